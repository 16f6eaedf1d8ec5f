// loader_bench: what shards buy over small files, and what threads buy `prepare`. Prints JSON.
//
//   loader_bench DIR [--records N]
//
// 1. Writes N image-like records (3x32x32 uint8 + int32 label = 3076 bytes) as one record shard
//    and as N small files under DIR/files, then times one epoch of shuffled 64-record batches
//    through PrefetchLoader (2 workers, prefetch 4) from each. Both paths are read once before
//    timing, so both are served from the page cache: the difference is per-sample overhead
//    (open/read/close vs a checksum-once memory-mapped block), not the disk.
// 2. Runs `prepare` on a synthetic corpus with the byte tokenizer and with SentencePiece, with 1
//    and 2 threads, and reports tokenising throughput (MB of text per second).
// DIR/files is left for the PyTorch DataLoader baseline (bench/torch_loader_baseline.py).
#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "frugal/core/atomic_file.h"
#include "frugal/data/prefetch_loader.h"
#include "frugal/data/prepare.h"
#include "frugal/data/sampler.h"
#include "frugal/data/shard.h"

namespace fs = std::filesystem;
using namespace frugal;
using Clock = std::chrono::steady_clock;

namespace {

constexpr size_t kRecordBytes = 3 * 32 * 32 + 4;
constexpr int64_t kBatch = 64;

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::string make_record(int64_t i) {
  std::string r(kRecordBytes, '\0');
  std::mt19937 rng(static_cast<uint32_t>(i));
  for (size_t k = 0; k < kRecordBytes - 4; ++k) r[k] = static_cast<char>(rng() & 0xff);
  const auto label = static_cast<uint32_t>(i % 10);
  std::memcpy(&r[kRecordBytes - 4], &label, 4);  // little-endian host: the bench only
  return r;
}

void read_small_file(const std::string& path, uint8_t* out) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0 || ::read(fd, out, kRecordBytes) != static_cast<ssize_t>(kRecordBytes))
    throw std::runtime_error("cannot read " + path);
  ::close(fd);
}

// Samples per second over one shuffled epoch; `read(i, dst)` copies record i.
template <class Read>
double epoch_rate(int64_t n, Read read) {
  EpochSampler sampler(n, 7);
  auto make = [&](int64_t k) {
    std::vector<uint8_t> batch(kBatch * kRecordBytes);
    for (int64_t r = 0; r < kBatch; ++r)
      read(sampler.sample(sampler.at(k * kBatch + r)), batch.data() + r * kRecordBytes);
    return batch;
  };
  const int64_t batches = n / kBatch;
  PrefetchLoader<std::vector<uint8_t>> loader(make, 2, 4);
  const auto t0 = Clock::now();
  uint64_t sum = 0;
  for (int64_t k = 0; k < batches; ++k) sum += loader.next()[0];
  const double s = since(t0);
  if (sum == 1) std::fprintf(stderr, " ");  // keeps the reads observable
  return static_cast<double>(batches * kBatch) / s;
}

std::string synthetic_corpus(size_t bytes) {
  std::mt19937 rng(3);
  std::vector<std::string> words(5000);
  for (auto& w : words) {
    w.resize(2 + rng() % 8);
    for (auto& c : w) c = static_cast<char>('a' + rng() % 26);
  }
  std::string s;
  while (s.size() < bytes) {
    for (int i = 0, n = 50 + static_cast<int>(rng() % 200); i < n; ++i) s += words[rng() % words.size()] + (i % 15 == 14 ? ".\n" : " ");
    s += "\n\n";
  }
  return s;
}

nlohmann::ordered_json prepare_rates(const std::string& dir) {
  nlohmann::ordered_json j;
  const std::string corpus = dir + "/corpus.txt";
  write_file_atomic(corpus, synthetic_corpus(16u << 20));
  write_file_atomic(dir + "/corpus_small.txt", synthetic_corpus(2u << 20));
  PrepareOptions train_sp;
  train_sp.inputs = {dir + "/corpus_small.txt"};
  train_sp.out_dir = dir + "/sp_model";
  train_sp.tokenizer = "sentencepiece";
  train_sp.vocab = 4000;
  train_sp.threads = 2;
  train_sp.force = true;
  prepare_dataset(train_sp);
  j["corpus_mb"] = static_cast<double>(fs::file_size(corpus)) / 1e6;
  for (std::string tok : {std::string("bytes"), "sentencepiece:" + dir + "/sp_model/tokenizer.model"}) {
    const std::string name = tok == "bytes" ? "bytes" : "sentencepiece_4000";
    for (int threads : {1, 2}) {
      PrepareOptions o;
      o.inputs = {corpus};
      o.out_dir = fmt::format("{}/prep_{}_{}", dir, name, threads);
      o.tokenizer = tok;
      o.threads = threads;
      o.force = true;
      PrepareReport r = prepare_dataset(o);
      j[fmt::format("prepare_{}_tokenise_mb_per_s_threads_{}", name, threads)] =
          static_cast<double>(r.bytes_kept) / 1e6 / r.tokenize_s;
      j[fmt::format("prepare_{}_total_mb_per_s_threads_{}", name, threads)] =
          static_cast<double>(r.bytes_in) / 1e6 / r.seconds;
      fs::remove_all(o.out_dir);
    }
  }
  return j;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: loader_bench DIR [--records N]\n");
    return 2;
  }
  const std::string dir = argv[1];
  int64_t n = 20000;
  if (argc == 4 && std::string(argv[2]) == "--records") n = std::stoll(argv[3]);
  fs::create_directories(dir + "/files");
  {
    ShardWriter w(dir + "/records.frs", ShardKind::kRecords, ShardDtype::kBytes);
    for (int64_t i = 0; i < n; ++i) {
      const std::string r = make_record(i);
      w.add_record(r);
      std::FILE* f = std::fopen(fmt::format("{}/files/{:06d}.bin", dir, i).c_str(), "wb");
      std::fwrite(r.data(), 1, r.size(), f);
      std::fclose(f);
    }
    w.finish();
  }
  ShardReader shard(dir + "/records.frs");
  auto from_shard = [&](int64_t i, uint8_t* out) {
    const std::string_view r = shard.record(static_cast<uint64_t>(i));
    std::memcpy(out, r.data(), r.size());
  };
  auto from_files = [&](int64_t i, uint8_t* out) { read_small_file(fmt::format("{}/files/{:06d}.bin", dir, i), out); };
  epoch_rate(n, from_shard);  // warm the page cache (and the block checksums) for both paths
  epoch_rate(n, from_files);
  nlohmann::ordered_json j;
  j["records"] = n;
  j["record_bytes"] = kRecordBytes;
  j["batch"] = kBatch;
  j["workers"] = 2;
  j["shard_samples_per_s"] = epoch_rate(n, from_shard);
  j["small_files_samples_per_s"] = epoch_rate(n, from_files);
  j["shard_vs_small_files"] = j["shard_samples_per_s"].get<double>() / j["small_files_samples_per_s"].get<double>();
  const nlohmann::ordered_json prep = prepare_rates(dir);
  for (auto& [k, v] : prep.items()) j[k] = v;
  std::printf("%s\n", j.dump(2).c_str());
  return 0;
}
