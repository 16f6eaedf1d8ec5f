// The seam through which data-parallel training (src/dist) joins the training step. A single
// process passes no GradSync and the step is unchanged. With one, TrainStep calls it at fixed
// points:
//
//   construction     optimizer_sharding()     how the optimizer's state is sharded (ZeRO-1), which
//                                             the one factory (build_optimizer) takes as an argument
//                    attach(params)           once the optimizer owns the gradients' storage
//   each micro-batch before_backward(last)    last = this backward completes the step's gradients
//   after backward   finish(loss)             every gradient (and the step's mean loss) is now the
//                                             mean over all ranks
//   gradient norm    global_norm(local)       the norm over every rank's shard (dist.zero = 2)
//   fp16 scaler      any(found_inf)           all ranks skip a step together
//   ragged targets   mean(targets)            before the step's first backward: the step's targets
//                                             per rank, so every token weighs the same (train_step.cpp)
//
// REQUIRES: the calls come in this order on every rank (they may run collectives).
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <vector>

#include "frugal/core/config.h"
#include "frugal/train/optimizer.h"

namespace frugal {

class GradSync {
 public:
  virtual ~GradSync() = default;
  // dist.zero = 0: the default (one process's optimizer on every rank).
  virtual OptimizerSharding optimizer_sharding() = 0;
  virtual void attach(const std::vector<at::Tensor>& params) = 0;
  virtual void before_backward(bool last_micro_batch) = 0;
  // `loss` (0-dim, this rank's mean over its micro-batches) becomes the mean over ranks, in place.
  virtual void finish(at::Tensor& loss) = 0;
  virtual bool any(bool flag) = 0;
  // The mean of `value` over the ranks (one small all-reduce).
  virtual double mean(double value) = 0;
  // The gradient norm of the whole model from this rank's norm of the optimizer's grads() (0-dim):
  // `local` itself where every rank holds whole gradients; combined over the ranks where each
  // holds a shard of them (dist.zero = 2).
  virtual at::Tensor global_norm(const at::Tensor& local) { return local; }
};

}  // namespace frugal
