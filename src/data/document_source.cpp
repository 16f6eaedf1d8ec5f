// Training batches from a documents dataset; see DocumentSource in document_dataset.h.
#include <ATen/ATen.h>

#include <algorithm>

#include <fmt/format.h>

#include "frugal/core/errors.h"
#include "frugal/data/document_dataset.h"
#include "frugal/data/packing.h"
#include "frugal/data/rng.h"

namespace frugal {
namespace {
constexpr size_t kOpenRows = 8;  // rows a document may still go into (pack)
}  // namespace

DocumentSource::DocumentSource(std::shared_ptr<const DocumentDataset> dataset, int64_t micro_batch, int64_t block,
                               uint64_t seed, int64_t rank, int64_t world_size, bool pin_memory,
                               DataConfig::Packing packing)
    : ds_(std::move(dataset)),
      micro_batch_(micro_batch),
      block_(block),
      seed_(seed),
      rank_(rank),
      world_(world_size),
      pin_memory_(pin_memory),
      packing_(packing) {
  if (ds_->size("train") == 0) throw DataError(fmt::format("dataset '{}' holds no training documents", ds_->dir()));
  std::vector<int64_t> stored(static_cast<size_t>(ds_->size("val")));
  for (size_t i = 0; i < stored.size(); ++i) stored[i] = static_cast<int64_t>(i);
  val_rows_ = build_rows("val", stored);
}

std::string DocumentSource::describe() const {
  return fmt::format("shards:{} ({} documents, {} train / {} val; {}, trained on the loss mask)", ds_->dir(),
                     ds_->content(), ds_->size("train"), ds_->size("val"),
                     packing_ == DataConfig::Packing::kPack
                         ? "packed: several a row, attention and positions within each document"
                         : "one a row, padded to the block");
}

int64_t DocumentSource::positions(const std::string& split, int64_t doc) const {
  return std::max<int64_t>(0, std::min(ds_->length(split, doc), block_ + 1) - 1);
}

std::vector<DocumentSource::Row> DocumentSource::build_rows(const std::string& split,
                                                            const std::vector<int64_t>& order) const {
  std::vector<Row> rows;
  if (packing_ == DataConfig::Packing::kPad) {
    for (int64_t d : order) rows.push_back({d});
    return rows;
  }
  struct Open {
    int64_t used = 0;
    Row docs;
  };
  std::vector<Open> open;
  for (int64_t d : order) {
    const int64_t n = positions(split, d);
    if (n == 0) continue;  // a document of one token has no target
    auto fits = std::find_if(open.begin(), open.end(), [&](const Open& o) { return o.used + n <= block_; });
    if (fits == open.end()) {
      if (open.size() == kOpenRows) {
        rows.push_back(std::move(open.front().docs));
        open.erase(open.begin());
      }
      open.push_back({});
      fits = open.end() - 1;
    }
    fits->used += n;
    fits->docs.push_back(d);
  }
  for (Open& o : open) rows.push_back(std::move(o.docs));
  return rows;
}

// Rows to (x, y) and, packed, the positions: each document's n - 1 positions in turn, then padding
// (token 0, no target; positions 0, 1, ... as one more document, which no real token attends to).
Batch DocumentSource::batch_of(const std::string& split, const std::vector<Row>& rows) const {
  const auto B = static_cast<int64_t>(rows.size());
  auto opts = at::TensorOptions().dtype(at::kLong);
  if (pin_memory_) opts = opts.pinned_memory(true);
  at::Tensor x = at::zeros({B, block_}, opts), y = at::full({B, block_}, kIgnoreIndex, opts);
  const bool packed = packing_ == DataConfig::Packing::kPack;
  at::Tensor pos = packed ? at::empty({B, block_}, opts) : at::Tensor();
  auto* xp = x.data_ptr<int64_t>();
  auto* yp = y.data_ptr<int64_t>();
  int64_t* pp = packed ? pos.data_ptr<int64_t>() : nullptr;
  for (int64_t b = 0; b < B; ++b) {
    int64_t t = b * block_;
    const int64_t end = t + block_;
    for (int64_t doc : rows[static_cast<size_t>(b)]) {
      const MaskedDocument d = ds_->document(split, doc);
      const int64_t n = std::min<int64_t>(static_cast<int64_t>(d.ids.size()), block_ + 1);
      for (int64_t u = 0; u + 1 < n; ++u, ++t) {
        xp[t] = d.ids[static_cast<size_t>(u)];
        if (d.mask[static_cast<size_t>(u + 1)]) yp[t] = d.ids[static_cast<size_t>(u + 1)];
        if (pp) pp[t] = u;
      }
    }
    for (int64_t u = 0; pp && t < end; ++u, ++t) pp[t] = u;
  }
  return {x, y, pos};
}

const std::vector<DocumentSource::Row>& DocumentSource::pass(int64_t epoch) {
  auto found = passes_.find(epoch);
  if (found != passes_.end()) return found->second;
  const int64_t n = ds_->size("train");
  std::vector<int64_t> order(static_cast<size_t>(n));  // a seeded Fisher-Yates permutation per pass
  for (int64_t i = 0; i < n; ++i) order[static_cast<size_t>(i)] = i;
  uint64_t state = derive_seed(seed_, 0x646f6373ULL /* "docs" */, static_cast<uint64_t>(epoch));
  for (int64_t i = n - 1; i > 0; --i) {
    state = splitmix64(state);
    std::swap(order[static_cast<size_t>(i)], order[state % static_cast<uint64_t>(i + 1)]);
  }
  std::vector<Row> rows = build_rows("train", order);
  if (rows.empty())
    throw DataError(
        fmt::format("dataset '{}': no training document has a target (every one is a single token)", ds_->dir()));
  if (passes_.size() == 2) passes_.erase(passes_.begin());
  return passes_.emplace(epoch, std::move(rows)).first->second;
}

const DocumentSource::Row& DocumentSource::train_row(int64_t k) {
  // The pass holding row k: passes are built in turn the first time a row past them is asked for.
  while (pass_start_.back() <= k) {
    const auto e = static_cast<int64_t>(pass_start_.size()) - 1;
    pass_start_.push_back(pass_start_.back() + static_cast<int64_t>(pass(e).size()));
  }
  const auto e =
      static_cast<int64_t>(std::upper_bound(pass_start_.begin(), pass_start_.end(), k) - pass_start_.begin()) - 1;
  return pass(e)[static_cast<size_t>(k - pass_start_[static_cast<size_t>(e)])];
}

Batch DocumentSource::train_batch(int64_t index) {
  std::vector<Row> rows;
  const int64_t first = (index * world_ + rank_) * micro_batch_;
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    for (int64_t k = 0; k < micro_batch_; ++k) rows.push_back(train_row(first + k));
  }
  return batch_of("train", rows);
}

Batch DocumentSource::val_batch(int64_t index) {
  const auto n = static_cast<int64_t>(val_rows_.size());
  if (n == 0)
    throw DataError(
        fmt::format("dataset '{}' holds no validation documents, and the trainer evaluates every "
                    "train.eval_every steps and at the end: prepare it again with --val-fraction above 0",
                    ds_->dir()));
  std::vector<Row> rows;
  for (int64_t k = 0; k < micro_batch_; ++k)
    rows.push_back(val_rows_[static_cast<size_t>((index * micro_batch_ + k) % n)]);
  return batch_of("val", rows);
}

}  // namespace frugal
