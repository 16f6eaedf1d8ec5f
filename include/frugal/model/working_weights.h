// Working weights: a bf16 copy of each trainable fp32 weight, written once per optimizer step, that
// the model's matrix products read instead of casting the fp32 weight again. Autocast's cast cache
// lasts one forward pass, so without it every micro-batch of an accumulated step, and every
// activation-checkpointing recompute, casts every weight anew (6 bytes of traffic a parameter).
// On with model.kernels = "frugal", precision.mode = "bf16" and the fused AdamW of one unsharded
// optimizer (train/fused_adamw.h keeps the copies beside its flat fp32 buffers).
//
// The copy holds what autocast's cast gives (round to nearest even) and its gradient reaches the
// fp32 weight as the cast's does (the bf16 gradient widened to fp32 and added to .grad), so a run
// with working weights computes bitwise what the same run without them computes. With
// `add_into_grads` the widening and the addition are one pass straight into the parameter's
// existing .grad (a view into the optimizer's flat fp32 buffer), with no fp32 temporary for
// AccumulateGrad to add: only where no gradient hook waits on AccumulateGrad (one process). A
// weight with another source of gradient in the same backward (a tied embedding) is looked up as
// `shared` and keeps the AccumulateGrad path, which sums its gradients in their usual order.
//
// Freshness: the optimizer calls refresh() after each update (add_gathered's copies excepted). Any other in-place write
// through ATen to a parameter or to its flat buffer (a checkpoint restore, a broadcast) moves that tensor's version
// counter, and the next lookup copies again. A write that bypasses ATen (a raw pointer) must call refresh().
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>

#include <memory>
#include <vector>

namespace frugal {

class WorkingWeights {
 public:
  WorkingWeights(c10::ScalarType dtype, bool add_into_grads);
  ~WorkingWeights();  // its parameters are looked up no more
  WorkingWeights(const WorkingWeights&) = delete;
  WorkingWeights& operator=(const WorkingWeights&) = delete;

  // `flat`: a contiguous fp32 buffer; `params`: the parameters whose storage it is, in order from
  // offset 0 (FusedAdamW's layout). Copies them (refresh) and makes them known to working_weight().
  void add(const at::Tensor& flat, const std::vector<at::Tensor>& params);
  // The same with a copy someone else writes (ZeRO-3's gathered bf16 blocks, dist/zero_adamw.h):
  // `copy` (flat, this dtype, flat's length) holds the parameters' copies at their offsets when
  // its storage has memory; it is never copied from the master or checked for freshness. While its
  // storage has none, working_weight() returns the parameter itself (then whole).
  void add_gathered(const at::Tensor& flat, const at::Tensor& copy, const std::vector<at::Tensor>& params);
  // Every copy from its master, in one pass per buffer.
  void refresh();
  int64_t bytes() const;
  c10::ScalarType dtype() const { return dtype_; }

  struct Buffer;  // one flat master and its copy (working_weights.cpp)

 private:
  void add_buffer(const at::Tensor& flat, const at::Tensor& copy, const std::vector<at::Tensor>& params, bool gathered);
  c10::ScalarType dtype_;
  bool add_into_grads_;
  std::vector<std::unique_ptr<Buffer>> buffers_;
};

// The tensor a matrix product reads for the weight `w`: its working copy, as an autograd function
// of `w`, where one is registered, autocast is on for w's device in the copy's dtype and fp8
// linears are off (they cast from the fp32 master); else `w` itself. `shared`: `w` gets gradient
// from elsewhere in the same backward too (a tied embedding's lookup).
at::Tensor working_weight(const at::Tensor& w, bool shared = false);

}  // namespace frugal
