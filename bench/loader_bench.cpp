// loader_bench: what record shards buy over small files, and what threads buy `prepare`.
// Prints one JSON object.
//
//   loader_bench DIR [--records N] [--rounds R] [--images M] [--no-text]
//   loader_bench DIR --source-shard-only [--records N] [--rounds R]
//
// 1. Loader. N image records (3x32x32 uint8 + int64 label = 3080 bytes, the layout of
//    `prepare --format images`) are written once as a record dataset (one shard + manifest) and
//    once as N small files under DIR/files. Four ways of reading one shuffled epoch in batches of
//    64, each through PrefetchLoader / RecordSource with 2 workers and prefetch 4:
//      raw_shard / raw_files:       copy each record's bytes into the batch buffer;
//      source_shard / source_files: the training batch itself (x float (64, 3, 32, 32) in
//                                   [0, 1], y int64), by RecordSource from the shard, and by the
//                                   same conversion from open/read/close of each small file.
//    The small-file path is the cheapest possible one (one open, one read straight into the
//    batch, one close; no per-file allocation). Everything is read once before timing, so both
//    are served from the page cache: the difference is per-sample overhead, not the disk.
//    The four run alternately for R rounds; the JSON holds every round and the medians.
//    Cold (when /proc/sys/vm/drop_caches is writable, i.e. as root; skipped otherwise): the first
//    epoch from disk, raw_shard vs raw_files with the page cache dropped before each, R rounds
//    alternately: what a first epoch (or a dataset larger than RAM) costs.
// 2. Image prepare: M JPEGs (96x96, 10 classes) through `prepare --format images --size 32` with
//    1 and 2 decoder threads, alternately, R rounds: images per second.
// 3. Text prepare (unless --no-text): a synthetic corpus with the byte tokenizer and with
//    SentencePiece, 1 and 2 threads alternately, R rounds: tokenising MB/s (medians).
// DIR/files is left for the PyTorch DataLoader baseline (bench/torch_loader_baseline.py).
// --source-shard-only times R epochs of the training batches from the record shard an earlier
// run left in DIR (after one untimed epoch), nothing else: bench/loader_bench.py alternates it
// with the PyTorch DataLoader baseline, one epoch each per round.
#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "data/image_writers.h"
#include "frugal/core/atomic_file.h"
#include "frugal/data/file_hash.h"
#include "frugal/data/prefetch_loader.h"
#include "frugal/data/prepare.h"
#include "frugal/data/record_source.h"
#include "frugal/data/sampler.h"
#include "frugal/data/shard.h"

namespace fs = std::filesystem;
using namespace frugal;
using Clock = std::chrono::steady_clock;

namespace {

constexpr size_t kPixels = 3 * 32 * 32;
constexpr size_t kRecordBytes = 8 + kPixels;
constexpr int64_t kBatch = 64;
constexpr int kWorkers = 2, kPrefetch = 4;

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

std::string make_record(int64_t i) {
  std::string r(kRecordBytes, '\0');
  const auto label = static_cast<uint64_t>(i % 10);
  for (int b = 0; b < 8; ++b) r[static_cast<size_t>(b)] = static_cast<char>(label >> (8 * b));
  std::mt19937 rng(static_cast<uint32_t>(i));
  for (size_t k = 8; k < kRecordBytes; ++k) r[k] = static_cast<char>(rng() & 0xff);
  return r;
}

// Writes the record dataset (DIR/ds: one training shard, a small validation shard, manifest)
// and the same training records as small files (DIR/files).
void write_inputs(const std::string& dir, int64_t n) {
  fs::create_directories(dir + "/files");
  fs::create_directories(dir + "/ds");
  nlohmann::json splits;
  for (const char* split : {"train", "val"}) {
    const std::string name = std::string(split) + "_000000.frs";
    ShardWriter w(dir + "/ds/" + name, ShardKind::kRecords, ShardDtype::kBytes);
    const int64_t count = std::string(split) == "train" ? n : 64;
    for (int64_t i = 0; i < count; ++i) {
      const std::string r = make_record(i);
      w.add_record(r);
      if (std::string(split) == "train") test::write_bytes(fmt::format("{}/files/{:06d}.bin", dir, i), r);
    }
    const uint64_t hash = w.finish();
    splits[split] = {
        {{"file", name}, {"records", count}, {"bytes", fs::file_size(dir + "/ds/" + name)}, {"xxh64", hex64(hash)}}};
  }
  nlohmann::json m = {{"format", "frugal-dataset"},
                      {"format_version", 1},
                      {"kind", "records"},
                      {"record",
                       {{"content", "image"},
                        {"label", "int64"},
                        {"dtype", "uint8"},
                        {"shape", {3, 32, 32}},
                        {"layout", "CHW"},
                        {"bytes", kRecordBytes}}},
                      {"classes", {"0", "1", "2", "3", "4", "5", "6", "7", "8", "9"}},
                      {"splits", splits}};
  write_file_atomic(dir + "/ds/manifest.json", m.dump(2));
}

void read_small_file(const std::string& path, uint8_t* out) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0 || ::read(fd, out, kRecordBytes) != static_cast<ssize_t>(kRecordBytes))
    throw std::runtime_error("cannot read " + path);
  ::close(fd);
}

// Samples per second over one shuffled epoch of raw record bytes; `read(i, dst)` copies record i.
template <class Read>
double raw_epoch(int64_t n, Read read) {
  EpochSampler sampler(n, 7);
  auto make = [&](int64_t k) {
    std::vector<uint8_t> batch(kBatch * kRecordBytes);
    for (int64_t r = 0; r < kBatch; ++r)
      read(sampler.sample(sampler.at(k * kBatch + r)), batch.data() + r * kRecordBytes);
    return batch;
  };
  const int64_t batches = n / kBatch;
  PrefetchLoader<std::vector<uint8_t>> loader(make, kWorkers, kPrefetch);
  const auto t0 = Clock::now();
  uint64_t sum = 0;
  for (int64_t k = 0; k < batches; ++k) sum += loader.next()[8];
  const double s = since(t0);
  if (sum == 1) std::fprintf(stderr, " ");  // keeps the reads observable
  return static_cast<double>(batches * kBatch) / s;
}

// The training batches from the record shard, through RecordSource.
double source_shard_epoch(const std::string& ds, int64_t n) {
  RecordSourceOptions o;
  o.micro_batch = kBatch;
  o.seed = 7;
  o.workers = kWorkers;
  o.prefetch = kPrefetch;
  RecordSource src(open_record_dataset(ds), o);
  const int64_t batches = n / kBatch;
  const auto t0 = Clock::now();
  double sum = 0;
  for (int64_t k = 0; k < batches; ++k) sum += src.train_batch(k).x.data_ptr<float>()[0];
  const double s = since(t0);
  if (sum == -1) std::fprintf(stderr, " ");
  return static_cast<double>(batches * kBatch) / s;
}

// The same batches from small files: read each into a buffer, convert like RecordSource.
double source_files_epoch(const std::string& dir, int64_t n) {
  EpochSampler sampler(n, 7);
  struct Out {
    at::Tensor x, y;
  };
  auto make = [&](int64_t k) {
    Out b{at::empty({kBatch, 3, 32, 32}, at::kFloat), at::empty({kBatch}, at::kLong)};
    float* x = b.x.data_ptr<float>();
    int64_t* y = b.y.data_ptr<int64_t>();
    uint8_t buf[kRecordBytes];
    for (int64_t r = 0; r < kBatch; ++r) {
      read_small_file(fmt::format("{}/files/{:06d}.bin", dir, sampler.sample(sampler.at(k * kBatch + r))), buf);
      uint64_t label = 0;
      for (int i = 7; i >= 0; --i) label = (label << 8) | buf[i];
      y[r] = static_cast<int64_t>(label);
      for (size_t i = 0; i < kPixels; ++i)
        x[r * static_cast<int64_t>(kPixels) + static_cast<int64_t>(i)] =
            static_cast<float>(buf[8 + i]) * (1.0f / 255.0f);
    }
    return b;
  };
  const int64_t batches = n / kBatch;
  PrefetchLoader<Out> loader(make, kWorkers, kPrefetch);
  const auto t0 = Clock::now();
  double sum = 0;
  for (int64_t k = 0; k < batches; ++k) sum += loader.next().x.data_ptr<float>()[0];
  const double s = since(t0);
  if (sum == -1) std::fprintf(stderr, " ");
  return static_cast<double>(batches * kBatch) / s;
}

// Drops the page cache (clean pages no process maps); false when not permitted.
bool drop_page_cache() {
  ::sync();
  std::FILE* f = std::fopen("/proc/sys/vm/drop_caches", "w");
  if (!f) return false;
  const bool ok = std::fputs("3\n", f) >= 0;
  return std::fclose(f) == 0 && ok;
}

// raw_shard vs raw_files with a cold page cache (each epoch opens the shard afresh, after the drop).
void cold_rates(const std::string& dir, int64_t n, int rounds, nlohmann::ordered_json& j) {
  std::vector<double> shard_rates, file_rates;
  for (int round = 0; round < rounds; ++round) {
    if (!drop_page_cache()) {
      j["cold"] = "skipped: /proc/sys/vm/drop_caches is not writable (run as root)";
      return;
    }
    {
      ShardReader shard(dir + "/ds/train_000000.frs");
      shard_rates.push_back(raw_epoch(n, [&](int64_t i, uint8_t* out) {
        const std::string_view r = shard.record(static_cast<uint64_t>(i));
        std::memcpy(out, r.data(), r.size());
      }));
    }
    drop_page_cache();
    file_rates.push_back(raw_epoch(
        n, [&](int64_t i, uint8_t* out) { read_small_file(fmt::format("{}/files/{:06d}.bin", dir, i), out); }));
  }
  j["cold_raw_shard_samples_per_s_median"] = median(shard_rates);
  j["cold_raw_files_samples_per_s_median"] = median(file_rates);
  j["cold_raw_shard_samples_per_s"] = shard_rates;
  j["cold_raw_files_samples_per_s"] = file_rates;
  j["cold_raw_shard_vs_small_files"] = median(shard_rates) / median(file_rates);
}

nlohmann::ordered_json loader_rates(const std::string& dir, int64_t n, int rounds) {
  write_inputs(dir, n);
  ShardReader shard(dir + "/ds/train_000000.frs");
  auto from_shard = [&](int64_t i, uint8_t* out) {
    const std::string_view r = shard.record(static_cast<uint64_t>(i));
    std::memcpy(out, r.data(), r.size());
  };
  auto from_files = [&](int64_t i, uint8_t* out) { read_small_file(fmt::format("{}/files/{:06d}.bin", dir, i), out); };
  raw_epoch(n, from_shard);  // warm the page cache (and the block checksums) for both paths
  raw_epoch(n, from_files);
  std::map<std::string, std::vector<double>> r;
  for (int round = 0; round < rounds; ++round) {  // A/B alternately, so drift hits both alike
    r["raw_shard"].push_back(raw_epoch(n, from_shard));
    r["raw_files"].push_back(raw_epoch(n, from_files));
    r["source_shard"].push_back(source_shard_epoch(dir + "/ds", n));
    r["source_files"].push_back(source_files_epoch(dir, n));
  }
  nlohmann::ordered_json j;
  j["records"] = n;
  j["record_bytes"] = kRecordBytes;
  j["batch"] = kBatch;
  j["workers"] = kWorkers;
  j["rounds"] = rounds;
  for (const char* k : {"raw_shard", "raw_files", "source_shard", "source_files"}) {
    j[fmt::format("{}_samples_per_s_median", k)] = median(r[k]);
    j[fmt::format("{}_samples_per_s", k)] = r[k];
  }
  j["raw_shard_vs_small_files"] = median(r["raw_shard"]) / median(r["raw_files"]);
  j["source_shard_vs_small_files"] = median(r["source_shard"]) / median(r["source_files"]);
  std::vector<double> ratios;
  for (int i = 0; i < rounds; ++i) ratios.push_back(r["source_shard"][i] / r["source_files"][i]);
  j["source_shard_vs_small_files_per_round"] = ratios;
  // For bench/loader_bench.py: the PyTorch baseline reads the same files with this key.
  j["shard_samples_per_s"] = median(r["source_shard"]);
  cold_rates(dir, n, rounds, j);
  return j;
}

nlohmann::ordered_json image_prepare_rates(const std::string& dir, int images, int rounds) {
  const std::string in = dir + "/images";
  for (int i = 0; i < images; ++i) {
    const std::string cls = fmt::format("{}/class{}", in, i % 10);
    if (i < 10) fs::create_directories(cls);
    test::write_bytes(fmt::format("{}/{:05d}.jpg", cls, i), test::encode_jpeg(test::gradient_image(96, 96, i), 90));
  }
  std::map<int, std::vector<double>> decode, total;
  for (int round = 0; round < rounds; ++round)
    for (int threads : {1, 2}) {
      PrepareOptions o;
      o.inputs = {in};
      o.out_dir = dir + "/images_ds";
      o.format = InputFormat::kImages;
      o.image_size = 32;
      o.threads = threads;
      o.force = true;
      const PrepareReport r = prepare_dataset(o);
      decode[threads].push_back(images / r.decode_s);
      total[threads].push_back(images / r.seconds);
    }
  fs::remove_all(dir + "/images_ds");
  nlohmann::ordered_json j;
  j["image_prepare_images"] = images;
  j["image_prepare_source"] = "96x96 JPEG (quality 90) -> 32x32 uint8";
  for (int t : {1, 2}) {
    j[fmt::format("image_prepare_decode_images_per_s_threads_{}_median", t)] = median(decode[t]);
    j[fmt::format("image_prepare_total_images_per_s_threads_{}_median", t)] = median(total[t]);
    j[fmt::format("image_prepare_decode_images_per_s_threads_{}", t)] = decode[t];
  }
  return j;
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
    for (int i = 0, n = 50 + static_cast<int>(rng() % 200); i < n; ++i)
      s += words[rng() % words.size()] + (i % 15 == 14 ? ".\n" : " ");
    s += "\n\n";
  }
  return s;
}

nlohmann::ordered_json text_prepare_rates(const std::string& dir, int rounds) {
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
  j["sentencepiece_vocab"] = train_sp.vocab;
  for (std::string tok : {std::string("bytes"), "sentencepiece:" + dir + "/sp_model/tokenizer.model"}) {
    const std::string name = tok == "bytes" ? "bytes" : "sentencepiece_4000";
    std::map<int, std::vector<double>> tokenise, total;
    for (int round = 0; round < rounds; ++round)
      for (int threads : {1, 2}) {
        PrepareOptions o;
        o.inputs = {corpus};
        o.out_dir = fmt::format("{}/prep_{}_{}", dir, name, threads);
        o.tokenizer = tok;
        o.threads = threads;
        o.force = true;
        PrepareReport r = prepare_dataset(o);
        tokenise[threads].push_back(static_cast<double>(r.bytes_kept) / 1e6 / r.tokenize_s);
        total[threads].push_back(static_cast<double>(r.bytes_in) / 1e6 / r.seconds);
        fs::remove_all(o.out_dir);
      }
    for (int t : {1, 2}) {
      j[fmt::format("prepare_{}_tokenise_mb_per_s_threads_{}", name, t)] = median(tokenise[t]);
      j[fmt::format("prepare_{}_total_mb_per_s_threads_{}", name, t)] = median(total[t]);
      j[fmt::format("prepare_{}_tokenise_mb_per_s_threads_{}_runs", name, t)] = tokenise[t];
    }
  }
  return j;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: loader_bench DIR [--records N] [--rounds R] [--images M] [--no-text] [--source-shard-only]\n");
    return 2;
  }
  const std::string dir = argv[1];
  int64_t n = 20000;
  int rounds = 5, images = 2000;
  bool text = true, source_shard_only = false;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--source-shard-only")
      source_shard_only = true;
    else if (a == "--records" && i + 1 < argc)
      n = std::stoll(argv[++i]);
    else if (a == "--rounds" && i + 1 < argc)
      rounds = std::stoi(argv[++i]);
    else if (a == "--images" && i + 1 < argc)
      images = std::stoi(argv[++i]);
    else if (a == "--no-text")
      text = false;
    else {
      std::fprintf(stderr, "loader_bench: unknown argument '%s'\n", a.c_str());
      return 2;
    }
  }
  if (source_shard_only) {
    if (!fs::exists(dir + "/ds/manifest.json")) {
      std::fprintf(stderr, "loader_bench: %s/ds holds no record dataset; run loader_bench %s first\n", dir.c_str(),
                   dir.c_str());
      return 2;
    }
    source_shard_epoch(dir + "/ds", n);  // untimed: page cache, block checksums, worker start
    std::vector<double> rates;
    for (int round = 0; round < rounds; ++round) rates.push_back(source_shard_epoch(dir + "/ds", n));
    nlohmann::ordered_json j;
    j["source_shard_samples_per_s"] = rates;
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  nlohmann::ordered_json j = loader_rates(dir, n, rounds);
  const nlohmann::ordered_json img = image_prepare_rates(dir, images, rounds);
  for (auto& [k, v] : img.items()) j[k] = v;
  if (text) {
    const nlohmann::ordered_json txt = text_prepare_rates(dir, rounds);  // the loop must not outlive it
    for (auto& [k, v] : txt.items()) j[k] = v;
  }
  std::printf("%s\n", j.dump(2).c_str());
  return 0;
}
