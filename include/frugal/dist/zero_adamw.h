// ZeRO stages 1 and 2: AdamW whose state (and, at stage 2, whose gradients) are sharded across
// the ranks of a data-parallel run.
//
// Like FusedAdamW, each parameter group is re-homed into one flat fp32 buffer (parameters become
// views into it) with a flat gradient buffer beside it; both are padded to world_size equal
// chunks. Rank r owns chunk r: it keeps exp_avg / exp_avg_sq for that chunk only (1/world_size of
// FusedAdamW's state), updates that chunk of the parameters with the same op sequence as
// FusedAdamW, then all-gathers the chunks so every rank holds the full, identical parameters.
// The gradients must already be the mean over ranks (DataParallel all-reduces them first), so
// gradient clipping and the fp16 scaler see the global gradients unchanged.
//
// Stage 2 (`shard_gradients`): no flat gradient buffer. The parameters' gradients are autograd's
// own tensors, which DataParallel copies into a bucket, reduces to the ranks that own each range
// and frees during backward; the owner adds its range into its gradient shard
// (accumulate_shard). grads() is then this rank's shard (what clipping, the loss scaler and the
// step read; the gradient norm is combined over ranks by DataParallel).
//
// Offloaded, the moments are host tensors and the chunk's update runs on the CPU (AdamWState).
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
  // `offload` (dist.offload = "optimizer"): this rank's moments in host memory, its chunk updated
  // there (AdamWState).
  ZeroAdamW(std::vector<FusedAdamW::Group> groups, AdamWHyper hyper, std::shared_ptr<ProcessGroup> pg,
            bool shard_gradients = false, bool offload = false);

  void set_lr(double lr) override {
    hyper_.lr = lr;
    device_.set_lr(lr);
  }
  void zero_grad() override;
  void step() override;
  std::vector<at::Tensor> grads() override;
  std::vector<std::pair<std::string, at::Tensor>> state_tensors() override;
  void load_state(const std::vector<std::pair<std::string, at::Tensor>>& t, int64_t steps) override;
  int64_t step_count() const override { return steps_; }
  // This rank's share: 2 x chunk elements per group.
  int64_t state_bytes() const override;
  int64_t host_state_bytes() const override;
  // Seconds spent in the parameter all-gather so far (communication, for the summary).
  double gather_s() const { return gather_s_; }
  bool shards_gradients() const { return shard_gradients_; }
  // Stage 2: the flat group whose parameter buffer has `storage` (-1 for none), its chunk, and
  // adding a reduced range: `values` holds the flat elements [lo, lo + values.numel()) of group
  // `group`; the part inside this rank's chunk is added to its gradient shard.
  int64_t group_of(const c10::StorageImpl* storage) const;
  int64_t chunk(int64_t group) const { return flats_[static_cast<size_t>(group)].chunk; }
  void accumulate_shard(int64_t group, int64_t lo, const at::Tensor& values);
  // Bytes of gradient this rank holds: the flat buffers (stage 1) or the shards (stage 2).
  int64_t gradient_bytes() const;

 private:
  struct Flat {
    at::Tensor params, grads;  // padded to world x chunk, full on every rank (stage 2:
                               // grads is this rank's chunk only)
    AdamWState state;          // this rank's chunk only
    int64_t numel = 0, chunk = 0;
    double weight_decay = 0;
  };
  std::vector<Flat> flats_;
  AdamWHyper hyper_;
  std::shared_ptr<ProcessGroup> pg_;
  int64_t steps_ = 0;
  AdamWDeviceScalars device_;  // the rate and step count on a GPU (FusedAdamW's)
  double gather_s_ = 0;
  bool shard_gradients_ = false;
};

}  // namespace frugal::dist
