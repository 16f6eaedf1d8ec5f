// A BatchSource over user datasets: any torch::data dataset (a MapDataset with Stack<> included),
// or a plain per-sample function. Batches are pure functions of (seed, index), so a resumed run
// draws exactly the batches of the uninterrupted one.
//
//   auto src = std::make_shared<frugal::DatasetSource>(
//       frugal::torch_dataset(MyDataset(train_rows).map(torch::data::transforms::Stack<>())),
//       frugal::torch_dataset(MyDataset(val_rows)), /*micro_batch=*/32, /*seed=*/1, "my rows");
//
// Order: training batch k holds samples k*B ... k*B+B-1 of an epoch-after-epoch stream, each
// epoch a seeded permutation of the training split (EpochSampler, data/sampler.h; every sample
// exactly once per epoch; shuffle=false keeps file order). Validation batch i holds samples
// i*B ... i*B+B-1 of the validation split (modulo its size), in order, the same at every
// evaluation.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/data/example.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "frugal/data/batch_source.h"
#include "frugal/data/prefetch_loader.h"
#include "frugal/data/sampler.h"

namespace frugal {

// One split: a batch from sample indices, and the number of samples.
struct DatasetSplit {
  std::function<Batch(const std::vector<int64_t>& indices)> get_batch;
  int64_t size = 0;
};

// Stacks per-sample tensors along a new batch dimension (y may be undefined for all samples).
Batch stack_samples(const std::vector<at::Tensor>& xs, const std::vector<at::Tensor>& ys);

namespace detail {
inline Batch to_batch(torch::data::Example<> e) { return {std::move(e.data), std::move(e.target)}; }
inline Batch to_batch(const std::vector<torch::data::Example<>>& examples) {
  std::vector<at::Tensor> xs, ys;
  for (const auto& e : examples) {
    xs.push_back(e.data);
    ys.push_back(e.target);
  }
  return stack_samples(xs, ys);
}
}  // namespace detail

// A torch::data dataset as a split: its get_batch(indices) yields either one Example (after a
// Stack<> transform) or a vector of Examples (stacked here). REQUIRES: size() is known.
template <typename Dataset>
DatasetSplit torch_dataset(Dataset dataset) {
  auto ds = std::make_shared<Dataset>(std::move(dataset));
  const auto n = ds->size();
  DatasetSplit s;
  s.size = n.has_value() ? static_cast<int64_t>(*n) : 0;
  s.get_batch = [ds](const std::vector<int64_t>& indices) {
    std::vector<size_t> idx(indices.begin(), indices.end());
    return detail::to_batch(ds->get_batch(idx));
  };
  return s;
}

// A per-sample function as a split: sample(i) returns (x, y) of sample i in [0, size).
DatasetSplit sample_function(std::function<torch::data::Example<>(int64_t)> sample, int64_t size);

class DatasetSource : public BatchSource {
 public:
  // REQUIRES: train.size >= 1, micro_batch >= 1 (DataError/ConfigError naming `what` otherwise).
  // Evaluations need a validation split: with val.size == 0, val_batch throws DataError.
  DatasetSource(DatasetSplit train, DatasetSplit val, int64_t micro_batch, uint64_t seed, std::string what,
                bool shuffle = true);
  ~DatasetSource() override;
  // Builds training batches on `workers` threads, at most `prefetch` ahead (data.workers and
  // data.prefetch; the Trainer sets them for a Task's DatasetSource). 0 workers = inline on the
  // caller's thread, the default. Batch k is the same either way (it is a function of k), so a
  // resumed run draws the same batches; the training split's get_batch must then be safe to call
  // from several threads at once (a read-only dataset is).
  void set_workers(int workers, int prefetch);
  Batch train_batch(int64_t index) override;
  Batch val_batch(int64_t index) override;
  std::string describe() const override;
  int64_t train_tokens() const override { return train_.size; }
  int64_t val_tokens() const override { return val_.size; }

  // The sample indices of training batch `index` / validation batch `index`.
  std::vector<int64_t> train_indices(int64_t index) const;
  std::vector<int64_t> val_indices(int64_t index) const;

 private:
  DatasetSplit train_, val_;
  int64_t micro_batch_;
  EpochSampler sampler_;
  std::string what_;
  std::unique_ptr<PrefetchLoader<Batch>> loader_;  // set_workers(> 0)
};

}  // namespace frugal
