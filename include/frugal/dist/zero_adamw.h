// ZeRO stage 1: AdamW whose state is sharded across the ranks of a data-parallel run.
//
// Like FusedAdamW, each parameter group is re-homed into one flat fp32 buffer (parameters become
// views into it) with a flat gradient buffer beside it; both are padded to world_size equal
// chunks. Rank r owns chunk r: it keeps exp_avg / exp_avg_sq for that chunk only (1/world_size of
// FusedAdamW's state), updates that chunk of the parameters with the same op sequence as
// FusedAdamW, then all-gathers the chunks so every rank holds the full, identical parameters.
// The gradients must already be the mean over ranks (DataParallel all-reduces them first), so
// gradient clipping and the fp16 scaler see the global gradients unchanged.
//
// Checkpoints: state_tensors() gathers the shards into full tensors named exactly like
// FusedAdamW's ("g<i>.exp_avg", ...), so rank 0 writes one ordinary optimizer.safetensors and a
// checkpoint resumes with or without ZeRO-1 (and load_state takes this rank's slice).
//
// REQUIRES: every rank constructs it with the same groups in the same order; step() and
// state_tensors() are collectives (call them on every rank). Not thread-safe.
#pragma once

#include <memory>

#include "frugal/dist/process_group.h"
#include "frugal/train/fused_adamw.h"
#include "frugal/train/optimizer.h"

namespace frugal::dist {

class ZeroAdamW : public Optimizer {
 public:
  ZeroAdamW(std::vector<FusedAdamW::Group> groups, AdamWHyper hyper, std::shared_ptr<ProcessGroup> pg);

  void set_lr(double lr) override { hyper_.lr = lr; }
  void zero_grad() override;
  void step() override;
  std::vector<at::Tensor> grads() override;
  std::vector<std::pair<std::string, at::Tensor>> state_tensors() override;
  void load_state(const std::vector<std::pair<std::string, at::Tensor>>& t, int64_t steps) override;
  int64_t step_count() const override { return steps_; }
  // This rank's share: 2 x chunk elements per group.
  int64_t state_bytes() const override;
  // Seconds spent in the parameter all-gather so far (communication, for the summary).
  double gather_s() const { return gather_s_; }

 private:
  struct Flat {
    at::Tensor params, grads;               // padded to world x chunk, full on every rank
    at::Tensor exp_avg, exp_avg_sq, denom;  // this rank's chunk only
    int64_t numel = 0, chunk = 0;
    double weight_decay = 0;
  };
  std::vector<Flat> flats_;
  AdamWHyper hyper_;
  std::shared_ptr<ProcessGroup> pg_;
  int64_t steps_ = 0;
  double gather_s_ = 0;
};

}  // namespace frugal::dist
