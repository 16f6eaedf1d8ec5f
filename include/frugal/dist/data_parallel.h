// Multi-process data parallel: every rank holds the whole model, trains on its own share of each
// global batch, and the ranks average their gradients so the weights stay identical.
//
// Gradients: parameters are grouped, in reverse order (roughly the order backward produces their
// gradients), into buckets of about dist.bucket_mb that are contiguous ranges of the optimizer's
// flat gradient buffer. A post-hook on each parameter's gradient accumulator counts down its
// bucket during the step's last backward; a complete bucket is all-reduced at once (asynchronously)
// while backward goes on, so communication overlaps the rest of backward. Buckets start in a fixed
// order on every rank (c10d's contract). finish() waits for them. With accumulation, only the last
// micro-batch's backward reduces (once per optimizer step).
//
// dist.zero = 2 (ZeRO-2): no flat gradient buffer. A bucket is a range of the optimizer's flat
// parameter buffer; once its parameters' gradients (autograd's own tensors) are complete, they are
// copied into one staging buffer and freed, and each part of it is reduced to the rank that owns
// that range (ZeroAdamW's chunks), which adds it into its gradient shard. At most four buckets are
// in flight; a fifth waits for the oldest, whose staging buffer is then freed, so a rank holds its
// shard and a few buckets of gradient instead of all of it. Every micro-batch reduces (with
// train.accum > 1, accum times the communication of the last micro-batch alone).
//
// dist.zero = 3 (ZeRO-3): as stage 2, with the blocks' parameters sharded too; ZeroAdamW gathers a
// block when the model needs it (model/block_gathering.h) and finish() releases any block still
// gathered.
//
// Same global batch: rank r of w draws its micro-batches so that one optimizer step consumes
// exactly the samples a single process with train.accum x w would (make_batch_source with rank and
// world); the all-reduced mean gradient is that process's gradient up to fp32 rounding.
//
// The trainer also calls it to agree on stops and checkpoints (agree()), to gather the ranks' data
// cursors into rank 0's checkpoint and to start every rank from rank 0's weights.
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "frugal/core/callback.h"
#include "frugal/dist/process_group.h"
#include "frugal/train/data_parallelism.h"

namespace frugal::dist {

class ZeroAdamW;

class DataParallel : public DataParallelism {
 public:
  // REQUIRES: config.train.optimizer = fused_adamw (the buckets live in its flat gradient buffer);
  // ConfigError otherwise.
  DataParallel(std::shared_ptr<ProcessGroup> pg, const Config& config);
  ~DataParallel() override;

  // GradSync (the training step's side).
  OptimizerSharding optimizer_sharding() override;
  void attach(const std::vector<at::Tensor>& params) override;
  void before_backward(bool last_micro_batch) override;
  void finish(at::Tensor& loss) override;
  bool any(bool flag) override;
  double mean(double value) override;
  at::Tensor global_norm(const at::Tensor& local) override;

  // DataParallelism (the trainer's side).
  int64_t rank() const override { return pg_->rank(); }
  int64_t world_size() const override { return pg_->world_size(); }
  void broadcast_parameters(const std::vector<at::Tensor>& params) override;
  // One small all-reduce: a stop requested on any rank (signal, early stop, budget, guard,
  // max_minutes) becomes every rank's stop, with the same kind and the requesting rank's reason;
  // a checkpoint requested on any rank is taken by all (so ZeRO-1's gather happens together).
  void agree(Control& control) override;
  // Through the store.
  std::vector<std::string> gather_strings(const std::string& mine, const std::string& tag) override;
  void begin_step() override;
  void end_step() override;
  // World, backend, buckets, exposed communication per step (inside the training steps: an
  // evaluation's block gathers are reported apart, as totals *_outside_steps).
  void add_to_summary(nlohmann::ordered_json& summary, double step_s_total, int64_t steps) const override;
  int64_t bucket_count() const { return static_cast<int64_t>(buckets_.size()); }

 private:
  struct Bucket;
  // ZeroAdamW's communication counters (each a running total): read at a step's start and end.
  struct ZeroComm {
    double gather_s = 0;  // waited for parameter all-gathers (stage 1-2 after the step; stage 3 blocks)
    int64_t block_gathers = 0;
    double block_bytes = 0, block_copy_bytes = 0;  // fp32 parameters, working copies (bf16)
    void add_change(const ZeroComm& from, const ZeroComm& to);
  };
  ZeroComm zero_comm() const;  // now; all zero without ZeRO
  void on_grad_ready(size_t param);
  void launch_ready();
  void launch_to_owners(Bucket& b);  // dist.zero = 2
  void fold(Bucket& b);              // waits for b's reduces; the owned part into the shard
  void fold_in_flight(size_t keep);  // folds the oldest buckets in flight until `keep` remain
  at::Tensor small(std::vector<double> values) const;

  std::shared_ptr<ProcessGroup> pg_;
  DistConfig config_;
  c10::Device comm_device_;
  c10::Device run_device_;  // run.device: where ZeroAdamW's flat buffers live
  std::vector<std::unique_ptr<Bucket>> buckets_;
  std::vector<size_t> bucket_of_;                   // parameter index -> bucket
  std::vector<std::shared_ptr<void>> hook_owners_;  // keeps the gradient accumulators alive
  size_t next_launch_ = 0;
  bool reducing_ = false;
  int64_t agree_seq_ = 0;
  ZeroAdamW* zero_ = nullptr;  // owned by the step's optimizer slot when dist.zero >= 1
  bool shard_grads_ = false;   // dist.zero = 2
  std::vector<at::Tensor> params_;
  std::vector<size_t> in_flight_;   // buckets launched and not yet folded, oldest first
  double wait_s_ = 0;               // blocked in finish() waiting for gradient all-reduces
  double agree_s_ = 0;              // blocked in agree()
  ZeroComm step_start_, in_steps_;  // at the open step's start; summed over the training steps
  int64_t reductions_ = 0;
};

// The Trainer's entry into a multi-process run over `pg` (TrainerOptions::data_parallel).
DataParallelFactory data_parallel_factory(std::shared_ptr<ProcessGroup> pg);

}  // namespace frugal::dist
