// In-memory window sampling for builtin:arith and text:PATH, and the factory for every source;
// see batch_source.h.
#include "frugal/data/batch_source.h"
#include "frugal/data/document_dataset.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <random>

#include "frugal/core/atomic_file.h"
#include "frugal/core/errors.h"
#include "frugal/data/arith.h"
#include "frugal/data/document_reader.h"
#include "frugal/data/packing.h"
#include "frugal/data/record_source.h"
#include "frugal/data/rng.h"
#include "frugal/data/shard_source.h"
#include <nlohmann/json.hpp>

namespace frugal {

namespace {
constexpr uint64_t kTrainStream = 0x7261696eULL;  // "rain"
constexpr uint64_t kValStream = 0x76616cULL;      // "val"
// Validation text for builtin:arith: this many held-out problems (fewer if the space is small).
constexpr int64_t kArithValProblems = 4000;
}  // namespace

WindowSource::WindowSource(std::vector<int32_t> train, std::vector<int32_t> val, int64_t micro_batch, int64_t block,
                           uint64_t seed, std::string what, int64_t rank, int64_t world_size, bool pin_memory)
    : train_(std::move(train)),
      val_(std::move(val)),
      micro_batch_(micro_batch),
      block_(block),
      seed_(seed),
      rank_(rank),
      world_(world_size),
      pin_memory_(pin_memory),
      what_(std::move(what)) {
  auto need = [&](const std::vector<int32_t>& t, const char* split) {
    if (static_cast<int64_t>(t.size()) <= block_)
      throw DataError(
          fmt::format("{}: the {} split has {} tokens, but a window needs model.block + 1 = {}; use a larger "
                      "input, a smaller model.block, or (text) a larger data.val_fraction",
                      what_, split, t.size(), block_ + 1));
  };
  need(train_, "training");
  need(val_, "validation");
}

Batch WindowSource::windows(const std::vector<int32_t>& tokens, uint64_t stream) {
  std::mt19937_64 rng(stream);
  std::uniform_int_distribution<int64_t> start(0, static_cast<int64_t>(tokens.size()) - block_ - 1);
  // Inputs and targets are written straight into their own (pinned, for a GPU) host tensors.
  const auto host = at::TensorOptions().dtype(at::kLong).pinned_memory(pin_memory_);
  at::Tensor x = at::empty({micro_batch_, block_}, host), y = at::empty({micro_batch_, block_}, host);
  int64_t* px = x.data_ptr<int64_t>();
  int64_t* py = y.data_ptr<int64_t>();
  for (int64_t b = 0; b < micro_batch_; ++b) {
    const int32_t* src = tokens.data() + start(rng);
    for (int64_t t = 0; t < block_; ++t) {
      *px++ = src[t];
      *py++ = src[t + 1];
    }
  }
  return {x, y};
}

Batch WindowSource::train_batch(int64_t index) {
  return windows(train_, derive_seed(seed_, kTrainStream, static_cast<uint64_t>(index * world_ + rank_)));
}

Batch WindowSource::val_batch(int64_t index) {
  return windows(val_, derive_seed(seed_, kValStream, static_cast<uint64_t>(index)));
}

int64_t BatchSource::train_tokens() const { return 0; }
int64_t BatchSource::val_tokens() const { return 0; }
double BatchSource::unigram_baseline() const { return std::nan(""); }

int64_t count_targets(const at::Tensor& y) {
  if (!y.defined()) return 0;
  return y.ne(kIgnoreIndex).sum().item<int64_t>();
}

Batch to_device(const Batch& b, c10::Device device) {
  auto move = [&](const at::Tensor& t) { return t.defined() ? t.to(device, /*non_blocking=*/true) : t; };
  return {move(b.x), move(b.y), move(b.pos)};
}
nlohmann::json BatchSource::state() const { return nullptr; }
void BatchSource::load_state(const nlohmann::json&) {}

double WindowSource::unigram_baseline() const {
  std::map<int32_t, double> counts;
  for (int32_t t : train_) counts[t] += 1;
  // Add-one smoothing so a validation token unseen in training has a finite cost.
  const double total = static_cast<double>(train_.size()) + static_cast<double>(counts.size() + 1);
  double nll = 0;
  for (int32_t t : val_) {
    auto it = counts.find(t);
    nll -= std::log(((it == counts.end() ? 0.0 : it->second) + 1.0) / total);
  }
  return nll / static_cast<double>(val_.size());
}

std::vector<int32_t> byte_tokens(const std::string& text) {
  std::vector<int32_t> out(text.size());
  for (size_t i = 0; i < text.size(); ++i) out[i] = static_cast<unsigned char>(text[i]);
  return out;
}

std::string bytes_to_text(const std::vector<int64_t>& tokens) {
  std::string s;
  s.reserve(tokens.size());
  for (int64_t t : tokens) s.push_back(static_cast<char>(t & 0xff));
  return s;
}

bool pin_memory_for(const std::string& device) { return c10::Device(device).is_cuda() && at::hasCUDA(); }

std::unique_ptr<BatchSource> make_batch_source(const Config& c, int64_t rank, int64_t world_size) {
  const DataSource& src = c.data.source;
  const uint64_t seed = static_cast<uint64_t>(c.run.seed);
  if (src.kind == DataSource::Kind::kRecords) {
    RecordSourceOptions o;
    o.micro_batch = c.data.micro_batch;
    o.seed = seed;
    o.workers = static_cast<int>(c.data.workers);
    o.prefetch = static_cast<int>(c.data.prefetch);
    o.pin_memory = pin_memory_for(c.run.device);
    o.rank = rank;
    o.world_size = world_size;
    return std::make_unique<RecordSource>(open_record_dataset(src.path), o);
  }
  if (src.kind == DataSource::Kind::kShards && is_document_dataset(src.path)) {
    auto ds = std::make_shared<const DocumentDataset>(src.path);
    if (ds->vocab() > c.model.vocab)
      throw ConfigError(
          fmt::format("data.source = \"{}\" holds token ids up to {} but model.vocab = {}: set "
                      "model.vocab = {} (or more)",
                      to_string(src), ds->vocab() - 1, c.model.vocab, ds->vocab()));
    return std::make_unique<DocumentSource>(ds, c.data.micro_batch, c.model.block, seed, rank, world_size,
                                            pin_memory_for(c.run.device), c.data.packing);
  }
  if (src.kind == DataSource::Kind::kShards) {
    ShardSourceOptions o;
    o.micro_batch = c.data.micro_batch;
    o.block = c.model.block;
    o.seed = seed;
    o.workers = static_cast<int>(c.data.workers);
    o.prefetch = static_cast<int>(c.data.prefetch);
    o.vocab = c.model.vocab;
    o.pin_memory = pin_memory_for(c.run.device);
    o.rank = rank;
    o.world_size = world_size;
    return std::make_unique<ShardSource>(open_token_dataset(src.path), o);
  }
  if (c.model.vocab < 256)
    throw ConfigError(
        fmt::format("data.source = \"{}\" uses byte-level tokens (256 symbols) but model.vocab = {}; set "
                    "model.vocab = 256",
                    to_string(src), c.model.vocab));
  if (src.kind == DataSource::Kind::kArith) {
    ArithTask task(c.data.arith_digits);
    std::string train = task.train_text(c.data.arith_lines, seed);
    std::string val;
    for (const auto& p : task.held_out(kArithValProblems, seed)) val += p.line();
    return std::make_unique<WindowSource>(
        byte_tokens(train), byte_tokens(val), c.data.micro_batch, c.model.block, seed,
        fmt::format("builtin:arith ({} digits, {} training lines)", c.data.arith_digits, c.data.arith_lines), rank,
        world_size, pin_memory_for(c.run.device));
  }
  if (src.kind == DataSource::Kind::kText) {
    const std::string& path = src.path;
    if (!std::filesystem::is_regular_file(path))
      throw DataError(fmt::format("data.source: text file '{}' does not exist or is not a file", path));
    std::string text;
    try {
      text = read_file(path);
    } catch (const IoError& e) {
      throw DataError(e.what());
    }
    require_text(text, path, "data.source");
    const size_t n_val = static_cast<size_t>(static_cast<double>(text.size()) * c.data.val_fraction);
    std::vector<int32_t> tokens = byte_tokens(text);
    std::vector<int32_t> val(tokens.end() - static_cast<long>(n_val), tokens.end());
    tokens.resize(tokens.size() - n_val);
    return std::make_unique<WindowSource>(std::move(tokens), std::move(val), c.data.micro_batch, c.model.block, seed,
                                          "text:" + path, rank, world_size, pin_memory_for(c.run.device));
  }
  throw ConfigError(fmt::format("data.source = \"{}\": unknown source kind", to_string(src)));
}

}  // namespace frugal
