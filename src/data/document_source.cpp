// Training batches from a documents dataset; see DocumentSource in document_dataset.h.
#include <ATen/ATen.h>

#include <algorithm>
#include <limits>

#include <fmt/format.h>

#include "frugal/core/console.h"
#include "frugal/core/errors.h"
#include "frugal/data/document_dataset.h"
#include "frugal/data/packing.h"
#include "frugal/data/rng.h"

namespace frugal {
namespace {
constexpr size_t kOpenRows = 8;  // rows a document may still go into (pack)

// The documents of a split whose trained tokens all lie past the cut (DocumentSource::find_untrained),
// and where their first trained token lies (token index; none when their mask has no 1 at all).
struct CutOff {
  int64_t documents = 0;
  int64_t first_min = std::numeric_limits<int64_t>::max(), first_max = -1;
  std::string where(int64_t block) const {
    const std::string at = first_max < 0 ? "they have no trained token at all"
                           : first_min == first_max
                               ? fmt::format("their first trained token is token {}", first_min)
                               : fmt::format("their first trained token is token {} to {}", first_min, first_max);
    return fmt::format("within model.block = {} (a document is cut to its first model.block + 1 = {} tokens; {})",
                       block, block + 1, at);
  }
  std::string what_to_do() const {
    const std::string raise =
        first_max < 0 ? ""
        : first_min == first_max
            ? fmt::format("set model.block to at least {}, or ", first_max)
            : fmt::format("set model.block to at least {} ({} trains the first of them), or ", first_max, first_min);
    return raise +
           "prepare the data again with --max-tokens N --overflow split (N at most model.block + 1), which keeps "
           "the rest of a long document as documents of their own (docs/data.md)";
  }
};
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
  // Said as the run starts, as a token dataset's empty split is: not at the first evaluation,
  // train.eval_every steps (maybe hours) into the run.
  if (ds_->size("val") == 0)
    throw DataError(
        fmt::format("dataset '{}' holds no validation documents, and the trainer evaluates on them (every "
                    "train.eval_every steps and at the end): prepare it again with --val-fraction above 0",
                    ds_->dir()));
  untrained_train_ = find_untrained("train");
  untrained_val_ = find_untrained("val");
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

bool DocumentSource::untrained(const std::string& split, int64_t doc) const {
  const std::vector<bool>& u = split == "train" ? untrained_train_ : untrained_val_;
  return doc >= 0 && static_cast<size_t>(doc) < u.size() && u[static_cast<size_t>(doc)];
}

// Only documents longer than block + 1 tokens are read: a shorter one is kept whole, and prepare
// stores no document without a trained token. The scan reads each such document once, at start-up.
std::vector<bool> DocumentSource::find_untrained(const std::string& split) const {
  const int64_t n = ds_->size(split);
  std::vector<bool> lost(static_cast<size_t>(n), false);
  CutOff cut;
  for (int64_t i = 0; i < n; ++i) {
    if (ds_->length(split, i) <= block_ + 1) continue;
    const MaskedDocument d = ds_->document(split, i);
    // Token 0 is never a target (no token predicts it); a target at token u needs u <= block.
    const auto first = static_cast<int64_t>(std::find(d.mask.begin() + 1, d.mask.end(), 1) - d.mask.begin());
    if (first <= block_) continue;
    lost[static_cast<size_t>(i)] = true;
    ++cut.documents;
    if (first < static_cast<int64_t>(d.mask.size())) {
      cut.first_min = std::min(cut.first_min, first);
      cut.first_max = std::max(cut.first_max, first);
    }
  }
  if (cut.documents == 0) return lost;
  const bool train = split == "train";
  if (cut.documents == n)
    throw DataError(fmt::format(
        "dataset '{}': none of its {} {} documents has a trained token {}, so {} would have no target{}: {}",
        ds_->dir(), n, train ? "training" : "validation", cut.where(block_), train ? "training" : "an evaluation",
        train ? " (a loss of 0 that learns nothing)" : " (val_loss nan)", cut.what_to_do()));
  if (rank_ == 0)
    Console::get().line(fmt::format(
        "warning: dataset '{}': {} of its {} {} documents have no trained token {}, and are left out; to {} them, {}",
        ds_->dir(), cut.documents, n, train ? "training" : "validation", cut.where(block_),
        train ? "train on" : "evaluate on", cut.what_to_do()));
  return lost;
}

std::vector<DocumentSource::Row> DocumentSource::build_rows(const std::string& split,
                                                            const std::vector<int64_t>& order) const {
  std::vector<Row> rows;
  if (packing_ == DataConfig::Packing::kPad) {
    for (int64_t d : order)
      if (!untrained(split, d)) rows.push_back({d});
    return rows;
  }
  struct Open {
    int64_t used = 0;
    Row docs;
  };
  std::vector<Open> open;
  for (int64_t d : order) {
    const int64_t n = positions(split, d);
    if (n == 0 || untrained(split, d)) continue;  // one token, or every target past the cut: nothing to train
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
        fmt::format("dataset '{}': no training document has a target (each is a single token or has its trained "
                    "tokens past model.block = {})",
                    ds_->dir(), block_));
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
