// The optimizer behind the training step: frugal's FusedAdamW (default), LibTorch's AdamW
// (train.optimizer = "torch_adamw", the per-parameter reference the benchmark compares with) or
// Muon with FusedAdamW beside it ("muon", train/muon.h).
// By default both decay weight matrices only (biases, LayerNorm and rank-1 tensors are not
// decayed); a task may give its own parameter groups (TaskHooks::param_groups).
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "frugal/ckpt/state_shards.h"
#include "frugal/core/config.h"

namespace frugal {

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  virtual void set_lr(double lr) = 0;
  virtual void zero_grad() = 0;
  virtual void step() = 0;
  // The step on the gradients times `grad_scale` (a 0-dim tensor, e.g. the clip coefficient; an
  // undefined one is 1). By default the gradients are scaled in place first; FusedAdamW folds the
  // factor into its update pass on the CPU (the same bits, one pass over the gradients fewer).
  virtual void step(const at::Tensor& grad_scale);
  // The gradients the step will use (for unscaling and clipping).
  virtual std::vector<at::Tensor> grads() = 0;
  // Moments as named tensors plus the step count, for checkpoints.
  virtual std::vector<std::pair<std::string, at::Tensor>> state_tensors() = 0;
  virtual void load_state(const std::vector<std::pair<std::string, at::Tensor>>& t, int64_t steps) = 0;
  // Sharded checkpoints (ckpt/state_shards.h): true where each process holds only pieces of
  // state_tensors()' tensors (ZeRO on several processes). state_shard() then gives this process's
  // pieces, without communication, for the file it writes itself.
  virtual bool shards_state() const { return false; }
  virtual StateShard state_shard() const { return {}; }
  // Loads the state from the ranks' files of a sharded checkpoint (its directory and state.json's
  // "optimizer_shards"). By default the whole tensors are assembled (load_state); ZeroAdamW reads
  // only its own chunk's pieces (read_state_pieces), so a resume never holds the whole state.
  virtual void load_state_shards(const std::string& dir, const nlohmann::json& index, int64_t steps);
  // Likewise this process's pieces of the weights `tensors` (the model's, by name; views into the
  // optimizer's buffers where it re-homed them), each element on one process: with
  // shards_state(), the ranks write the weights in parallel too. Tensors outside the optimizer's
  // buffers (buffers, say) are rank 0's, whole.
  virtual StateShard weights_shard(const std::vector<std::pair<std::string, at::Tensor>>& tensors) const;
  // Writes `values` (whole, anywhere; checked by matched_weights) into the model's `tensors`, the
  // same list. Under ZeRO-3 each rank writes only its own chunk, into its master shard: nothing is
  // gathered, so a resume never holds the whole model on the device.
  virtual void load_weights(const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                            const std::vector<at::Tensor>& values);
  virtual int64_t step_count() const = 0;
  virtual int64_t state_bytes() const = 0;
  // The part of state_bytes() in host memory (dist.offload = "optimizer"; else 0).
  virtual int64_t host_state_bytes() const { return 0; }

  // A CUDA graph of the step (train.cuda_graphs) needs a step whose device work does not depend on
  // the host: step_on_device() queues it (reading the rate and the step count from device memory,
  // advancing the count there) and changes nothing on the host; count_replayed_step() then adds the
  // step to the host's count after each replay that took it. `found_inf` (the fp16 loss scaler's
  // flag, 0-dim on the device, or undefined): where it holds 1 the device skips the step. Only
  // FusedAdamW with its scalars on the device (AdamWDeviceScalars) has one.
  virtual bool steps_on_device() const { return false; }
  virtual void step_on_device(const at::Tensor& grad_scale, const at::Tensor& found_inf = {});
  virtual void count_replayed_step() {}

  // bf16 working weights (model/working_weights.h): keeps a `dtype` copy of every parameter,
  // rewritten by each step, and returns the bytes it takes; 0 where this optimizer keeps none
  // (only the unsharded fused AdamW does).
  virtual int64_t keep_working_copies(c10::ScalarType /*dtype*/, bool /*add_into_grads*/) { return 0; }

  // dist.zero = 3 (ZeRO-3, dist/zero_adamw.h): the parameters of the groups with a `unit` are
  // sharded, each rank keeping 1/world of them; the model's tensors are whole only while their
  // unit is gathered. gather_unit(u) makes unit u whole on every rank (a collective; a no-op while
  // it is whole); release_unit(u) frees it again. gather_parameters() gathers every unit and keeps
  // them whole (release_unit does nothing) until release_parameters(keep_writes), which releases
  // every unit, first taking what was written into the whole tensors as this rank's shard where
  // `keep_writes` (a restore); such scopes nest. No-ops elsewhere.
  virtual bool gathers_parameters() const { return false; }
  virtual void gather_unit(int64_t /*unit*/) {}
  virtual void release_unit(int64_t /*unit*/) {}
  // Starts gathering unit u (a collective, without waiting); the next gather_unit(u) waits for it.
  virtual void prefetch_unit(int64_t /*unit*/) {}
  virtual void gather_parameters() {}
  virtual void release_parameters(bool /*keep_writes*/) {}
  // The units gather_unit() takes (0 .. units() - 1; ZeRO-3: the blocks); 0 elsewhere.
  virtual int64_t units() const { return 0; }
  // The bytes of parameters this rank keeps between steps (ZeRO-3: its shards and the tensors kept
  // whole); -1 where that is every parameter of the model.
  virtual int64_t parameter_bytes() const { return -1; }
};

// The whole parameters for a scope (the end-of-run decoding, say):
// gathered on entry, released on exit, with the scope's writes kept where `keep_writes`. Every
// rank must enter it together (the gathers are collectives). Nothing where the optimizer does not
// shard parameters.
class WholeParameters {
 public:
  WholeParameters(Optimizer& opt, bool keep_writes) : opt_(opt), keep_(keep_writes) { opt_.gather_parameters(); }
  ~WholeParameters() { opt_.release_parameters(keep_); }
  WholeParameters(const WholeParameters&) = delete;
  WholeParameters& operator=(const WholeParameters&) = delete;

 private:
  Optimizer& opt_;
  bool keep_;
};

// Host copies of `tensors` (a model's, by name) for a checkpoint or the final weights. Where `opt`
// shards parameters (ZeRO-3) its units are gathered one at a time, each released once copied, so
// no rank holds more than one whole block beside its shards; a collective then (every rank calls
// it). Elsewhere plain copies. Where `keep` is false, the gathers happen and nothing is copied (an
// empty list): the ranks that only take part in rank 0's write hold no copy of the model.
std::vector<std::pair<std::string, at::Tensor>> host_copies(
    Optimizer& opt, const std::vector<std::pair<std::string, at::Tensor>>& tensors, bool keep = true);

// One AdamW parameter group: its tensors and their decoupled weight decay (the learning rate is
// the schedule's for every group).
struct ParamGroup {
  std::vector<at::Tensor> params;
  double weight_decay = 0;
  bool muon = false;  // train.optimizer = "muon": Muon trains this group's 2-D matrices (train/muon.h)
  // dist.zero = 3, where TrainStep split the task's groups by block: the block whose parameters
  // these are (sharded, gathered with that block; -1 for those outside every block, which every
  // rank keeps whole), the index of the group they were split from, and each parameter's first
  // element in that group's flat buffer (checkpoints keep the unsplit groups' layout).
  int64_t unit = -1;
  int64_t origin = -1;
  std::vector<int64_t> origin_offsets = {};
  // dist.zero = 3 under bf16 autocast: every parameter here is a product's weight, which the model
  // reads as a bf16 working copy, so the unit is gathered as that copy alone (half the bytes).
  bool bf16_copy = false;
};

// The default grouping: `weight_decay` on tensors of rank >= 2, none on the rest.
std::vector<ParamGroup> default_param_groups(const std::vector<at::Tensor>& params, double weight_decay);

// Throws ConfigError unless `groups` hold every tensor of `params` that requires a gradient
// exactly once and nothing else (`origin` names who made the groups).
void check_param_groups(const std::vector<ParamGroup>& groups, const std::vector<at::Tensor>& params,
                        const std::string& origin);

// How data parallel shards the optimizer's state across its ranks (dist.zero = 1), handed to
// build_optimizer as an argument by the data-parallel seam (grad_sync.h), as torchtitan passes its
// parallel dimensions: this rank and the world size, an in-place broadcast from a root rank, and
// ZeRO-1's sharded AdamW over given groups. The default: one process, nothing sharded.
struct OptimizerSharding {
  int64_t rank = 0, world = 1;
  std::function<void(at::Tensor& t, int64_t root)> broadcast;
  std::function<std::unique_ptr<Optimizer>(const std::vector<ParamGroup>& groups, const TrainConfig& t)> adamw;
  // dist.zero = 3: `adamw` shards the parameters of the groups with a unit (ParamGroup::unit).
  bool gathers_parameters = false;
  bool sharded() const { return static_cast<bool>(adamw); }
};

// The one factory of a run's optimizer: train.optimizer over `groups` (in a stable order: the
// model's named_parameters order within each group; kMuon needs groups marked `muon`,
// muon_param_groups), Muon's Newton-Schulz in bf16 where `muon_bf16` (RunSetup decides it once for
// the run's device), the state sharded as `sharding` says (its `adamw` offloads as it was made),
// and with `offload` (dist.offload = "optimizer") the unsharded AdamW's in host memory (ConfigError
// for another optimizer). The TrainStep builds through it, with or without data parallel.
std::unique_ptr<Optimizer> build_optimizer(const std::vector<ParamGroup>& groups, const TrainConfig& t, bool muon_bf16,
                                           const OptimizerSharding& sharding = {}, bool offload = false);

// build_optimizer in one process for `kind`, Muon's precision decided for the parameters' device
// (muon_uses_bf16): for programs and tests that build an optimizer outside a run.
std::unique_ptr<Optimizer> make_optimizer(OptimizerKind kind, const std::vector<ParamGroup>& groups,
                                          const TrainConfig& t);
// The default grouping of `params` (default_param_groups with train.weight_decay).
std::unique_ptr<Optimizer> make_optimizer(OptimizerKind kind, const std::vector<at::Tensor>& params,
                                          const TrainConfig& t);

}  // namespace frugal
