// ZeRO stages 1, 2 and 3: AdamW whose state (at stage 2 also the gradients, at stage 3 also the
// blocks' parameters) is sharded across the ranks of a data-parallel run.
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
// Stage 3 (groups with a `unit`, ParamGroup::unit): such a group's parameters are sharded too.
// Rank r keeps chunk r of the flat buffer as its fp32 master shard, which the step updates (no
// all-gather after it); the flat buffer itself, of which the model's tensors are views, holds
// memory only while its unit is gathered (gather_unit: an all-gather of the shards into it;
// release_unit: its storage freed, the views kept). The gathers write through a tensor of their
// own, so the parameters' version counters do not move: autograd's saved parameters read the
// re-gathered values in the backward. Groups without a unit stay as at stage 2 (whole on every
// rank, all-gathered after the step). Stage 3 shards the gradients too.
//
// Offloaded, the moments are host tensors and the chunk's update runs on the CPU (AdamWState). At
// stage 3 the fp32 master shard is in host memory too (AdamWState::keep_master_on_host): the
// device keeps the shard only in the dtype its gathers send (the bf16 working copy's where the
// place sets copy_dtype), and the fp32 gathers (gather_parameters(): checkpoints, export) send
// the master from the host.
//
// Checkpoints: each rank writes its own pieces of the state (state_shard()) and of the weights
// (weights_shard()), without communication,
// named and placed as FusedAdamW's tensors ("g<i>.exp_avg", ...), so a checkpoint resumes with or
// without ZeRO and on any number of processes (load_state takes this rank's slice of the whole
// tensors). state_tensors() gathers the whole tensors (a collective).
//
// REQUIRES: every rank constructs it with the same groups in the same order; step() and
// state_tensors() are collectives (call them on every rank). Not thread-safe.
#pragma once

#include <array>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "frugal/dist/process_group.h"
#include "frugal/model/working_weights.h"
#include "frugal/train/fused_adamw.h"
#include "frugal/train/optimizer.h"

namespace frugal::dist {

// Stage 3: where one of the constructor's groups sits. TrainStep splits the task's groups by
// block (ParamGroup::unit); checkpoints name the state as the unsplit groups would
// ("g<origin>.exp_avg", each parameter at its offset in that group's flat buffer), so a run
// resumes with any dist.zero and any world size.
struct GroupPlace {
  int64_t unit = -1;             // the block; -1 = none (whole on every rank)
  int64_t origin = -1;           // the unsplit group's index; -1 = this group, unsplit
  std::vector<int64_t> offsets;  // each parameter's first element in the origin's flat buffer
  // Where set (bf16 under autocast; ParamGroup::bf16_copy), the unit is gathered as this dtype's
  // working copy (model/working_weights.h), which the model's products read, and its fp32
  // parameters only inside gather_parameters().
  c10::ScalarType copy_dtype = c10::ScalarType::Undefined;
};

class ZeroAdamW : public Optimizer {
 public:
  // `offload` (dist.offload = "optimizer"): this rank's moments in host memory, its chunk updated
  // there (AdamWState). `places`: one per group (stage 3); empty = every group unsplit, without a
  // unit. `device`: where the flat buffers (and so the parameters) live; unset, the parameters'
  // own device. At stage 3 a run's parameters come from host memory (the trainer keeps them there
  // until now): each group is copied into its flat buffer on `device` and, where it has a unit,
  // sharded before the next is copied, so the device never holds more than one block whole.
  ZeroAdamW(std::vector<FusedAdamW::Group> groups, AdamWHyper hyper, std::shared_ptr<ProcessGroup> pg,
            bool shard_gradients = false, bool offload = false, std::vector<GroupPlace> places = {},
            std::optional<c10::Device> device = std::nullopt);

  void set_lr(double lr) override {
    hyper_.lr = lr;
    device_.set_lr(lr);
  }
  void zero_grad() override;
  void step() override;
  std::vector<at::Tensor> grads() override;
  std::vector<std::pair<std::string, at::Tensor>> state_tensors() override;
  void load_state(const std::vector<std::pair<std::string, at::Tensor>>& t, int64_t steps) override;
  bool shards_state() const override { return pg_->world_size() > 1; }
  StateShard state_shard() const override;
  void load_state_shards(const std::string& dir, const nlohmann::json& index, int64_t steps) override;
  // Rank r's pieces of each weight: the part of the tensor in chunk r of its flat buffer (at
  // stage 3 read from the fp32 master shard: nothing is gathered).
  StateShard weights_shard(const std::vector<std::pair<std::string, at::Tensor>>& tensors) const override;
  void load_weights(const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                    const std::vector<at::Tensor>& values) override;
  int64_t step_count() const override { return steps_; }
  // This rank's share: 2 x chunk elements per group.
  int64_t state_bytes() const override;
  int64_t host_state_bytes() const override;
  bool gathers_parameters() const override { return gathers_; }
  void gather_unit(int64_t unit) override;
  void release_unit(int64_t unit) override;
  void prefetch_unit(int64_t unit) override;
  void gather_parameters() override;
  int64_t units() const override { return units_; }
  void release_parameters(bool keep_writes) override;
  int64_t parameter_bytes() const override;
  // Every unit still gathered released (a block whose backward did not release it), unless
  // inside gather_parameters(), which pins them whole (release_unit waits for its release).
  void release_blocks();
  // Seconds spent gathering units so far, and the gather_unit calls that gathered (stage 3).
  double unit_gather_s() const { return unit_gather_s_; }
  int64_t unit_gathers() const { return unit_gathers_; }
  // The bytes the gathers wrote here: fp32 parameters, and working copies (GroupPlace::copy_dtype).
  double unit_gather_bytes() const { return gathered_bytes_; }
  double unit_gather_copy_bytes() const { return gathered_copy_bytes_; }
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
    int64_t unit = -1;  // stage 3: the unit it is gathered with; -1 = whole on every rank
    int64_t origin = -1;
    struct Span {
      int64_t here = 0, there = 0, numel = 0;  // a parameter's offset here and in its origin group
    };
    std::vector<Span> spans;
    // Stage 3: this rank's chunk of the parameters, fp32 (the master); offloaded, the master is in
    // host memory and this its copy in the gathers' dtype (the working copy's where the place
    // sets copy_dtype: bf16, half the bytes).
    at::Tensor shard;
    // Stage 3's whole buffers, each with memory only while gathered: the fp32 parameters
    // (`params`) and, where the place sets copy_dtype, their working copy.
    struct Whole {
      at::Tensor buf, sending;  // sending: what this rank sends (the shard, or its cast)
      bool present = true;
      std::unique_ptr<Pending> arriving;  // a gather in flight into `buf`
    };
    Whole master, copy;
  };
  // The buffer a gather of `f` makes whole: the working copy where it has one, outside
  // gather_parameters(); else the fp32 parameters.
  Flat::Whole& wanted(Flat& f);
  void start_gather(Flat& f, Flat::Whole& w);  // allocates `w.buf` and starts the all-gather
  void finish_gather(Flat::Whole& w);
  void gather(Flat& f);
  void release(Flat& f, bool keep_writes);
  // Stage 3: this rank's fp32 master chunk (offloaded, in host memory: AdamWState's), and a write
  // of `values` into it at `at` that the device's shard follows.
  static const at::Tensor& master_shard(const Flat& f);
  void set_master_shard(Flat& f, int64_t at, const at::Tensor& values);
  std::string state_name(size_t flat, const char* what) const;
  // This rank's chunk of flat `flat` in the checkpoint's layout: {there, here, n} per piece, `there`
  // an offset in the whole (origin's) tensor, `here` one in this flat.
  std::vector<std::array<int64_t, 3>> chunk_pieces(size_t flat) const;
  // Where the model's tensor `t` lies: its flat buffer (-1 when none holds it) and the part of it in
  // this rank's chunk, as {offset in t, offset in the chunk, count} (count 0 when none).
  struct OwnPart {
    int64_t flat = -1, in_tensor = 0, in_chunk = 0, count = 0;
  };
  OwnPart own_part(const at::Tensor& t) const;
  int64_t origin_numel(int64_t origin) const;  // elements of an unsplit group (stage 3)
  // The whole flat state `full` (of flat `flat`) into, or out of, the checkpoint's layout.
  at::Tensor to_checkpoint_layout(size_t flat, const at::Tensor& full, at::Tensor& origin) const;
  at::Tensor from_checkpoint_layout(size_t flat, const at::Tensor& saved) const;
  std::vector<Flat> flats_;
  AdamWHyper hyper_;
  std::shared_ptr<ProcessGroup> pg_;
  int64_t steps_ = 0;
  AdamWDeviceScalars device_;  // the rate and step count on a GPU (FusedAdamW's)
  double gather_s_ = 0;
  bool shard_gradients_ = false;
  bool gathers_ = false;  // stage 3
  int64_t pinned_ = 0;    // gather_parameters() scopes open
  int64_t units_ = 0;     // 1 + the largest GroupPlace::unit
  double unit_gather_s_ = 0;
  int64_t unit_gathers_ = 0;
  double gathered_bytes_ = 0, gathered_copy_bytes_ = 0;  // stage 3: unit_gather_bytes()
  std::unique_ptr<WorkingWeights> copies_;               // the working copies' registry (GroupPlace::copy_dtype)
};

}  // namespace frugal::dist
