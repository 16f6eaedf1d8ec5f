// User datasets as a BatchSource; see dataset_source.h.
#include "frugal/data/dataset_source.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <algorithm>

#include "frugal/core/errors.h"

namespace frugal {

Batch stack_samples(const std::vector<at::Tensor>& xs, const std::vector<at::Tensor>& ys) {
  Batch b;
  b.x = at::stack(xs);
  const bool any_y = std::any_of(ys.begin(), ys.end(), [](const at::Tensor& t) { return t.defined(); });
  if (any_y) b.y = at::stack(ys);
  return b;
}

DatasetSplit sample_function(std::function<torch::data::Example<>(int64_t)> sample, int64_t size) {
  DatasetSplit s;
  s.size = size;
  s.get_batch = [sample = std::move(sample)](const std::vector<int64_t>& indices) {
    std::vector<at::Tensor> xs, ys;
    for (int64_t i : indices) {
      auto e = sample(i);
      xs.push_back(e.data);
      ys.push_back(e.target);
    }
    return stack_samples(xs, ys);
  };
  return s;
}

namespace {
EpochSampler checked_sampler(const DatasetSplit& train, int64_t micro_batch, uint64_t seed, bool shuffle,
                             const std::string& what) {
  if (train.size < 1 || !train.get_batch)
    throw DataError(
        fmt::format("{}: the training split is empty (or has no size); a DatasetSource needs at "
                    "least one sample",
                    what));
  if (micro_batch < 1) throw ConfigError(fmt::format("{}: micro_batch = {}; it must be at least 1", what, micro_batch));
  return EpochSampler(train.size, seed, 0, 1, shuffle);
}
}  // namespace

DatasetSource::DatasetSource(DatasetSplit train, DatasetSplit val, int64_t micro_batch, uint64_t seed, std::string what,
                             bool shuffle)
    : train_(std::move(train)),
      val_(std::move(val)),
      micro_batch_(micro_batch),
      sampler_(checked_sampler(train_, micro_batch, seed, shuffle, what)),
      what_(std::move(what)) {}

std::vector<int64_t> DatasetSource::train_indices(int64_t index) const {
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(micro_batch_));
  SampleCursor c = sampler_.at(index * micro_batch_);
  for (int64_t k = 0; k < micro_batch_; ++k) {
    out.push_back(sampler_.sample(c));
    c = sampler_.advance(c, 1);
  }
  return out;
}

std::vector<int64_t> DatasetSource::val_indices(int64_t index) const {
  if (val_.size < 1 || !val_.get_batch)
    throw DataError(
        fmt::format("{}: the validation split is empty; the trainer evaluates every "
                    "train.eval_every steps and at the end, so give the DatasetSource a "
                    "validation split",
                    what_));
  std::vector<int64_t> out;
  for (int64_t k = 0; k < micro_batch_; ++k) out.push_back((index * micro_batch_ + k) % val_.size);
  return out;
}

DatasetSource::~DatasetSource() = default;

void DatasetSource::set_workers(int workers, int prefetch) {
  loader_.reset();
  if (workers <= 0) return;
  loader_ = std::make_unique<PrefetchLoader<Batch>>([this](int64_t k) { return train_.get_batch(train_indices(k)); },
                                                    workers, prefetch);
}

Batch DatasetSource::train_batch(int64_t index) {
  if (!loader_) return train_.get_batch(train_indices(index));
  loader_->seek(index);  // a no-op in order; a resumed or retried run jumps
  return loader_->next();
}
Batch DatasetSource::val_batch(int64_t index) { return val_.get_batch(val_indices(index)); }

std::string DatasetSource::describe() const {
  return fmt::format("{} ({} training, {} validation samples)", what_, train_.size, val_.size);
}

}  // namespace frugal
