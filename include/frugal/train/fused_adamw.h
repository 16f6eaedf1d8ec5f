// AdamW as one multi-tensor update. The parameters of each group are re-homed into one flat
// fp32 buffer (each parameter becomes a view into it), and their gradients into a second flat
// buffer, so an optimizer step is one pass over one buffer per group instead of ~8 small ops per
// parameter, and zero_grad is one memset. On the CPU (fp32) the pass is a single fused loop over
// threads that reads p, g, m, v once and writes p, m, v once (28 bytes per parameter instead of
// the ~88 of eight separate element-wise ops); elsewhere it is ATen's eight ops on the flat buffer.
//
// Same maths as torch::optim::AdamW (decoupled weight decay, bias correction; no amsgrad), and a
// test checks it step for step against LibTorch's AdamW (within float rounding: the fused loop
// rounds m * b1 + (1 - b1) * g twice where ATen's vectorised add may use one fused multiply-add).
// Each element's update depends on nothing but its own values, so any slicing of the buffer
// (ZeRO-1's per-rank chunks) gives bitwise the same result. Parameters stay the same autograd
// leaves: only their storage moves. The flat gradient views rely on autograd accumulating into an
// existing .grad in place (AccumulateGrad does when grad mode is off, i.e. in backward()).
//
// REQUIRES: all parameters of a group share dtype and device; create the optimizer after the
// model is on its device. Not thread-safe.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <memory>
#include <string>
#include <vector>

namespace frugal {

class WorkingWeights;

struct AdamWHyper {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
};

// The learning rate and the step count of an AdamW on a GPU, kept in the parameters' device
// memory (0-dim fp32 tensors) where ATen's fused kernel reads them. The host writes them only
// when they change (a new rate from the schedule, a resume), as small device writes with no
// synchronisation; the step itself advances the count on the device and passes no scalar of its
// own, so its launches are the same every step (what a CUDA graph captures and replays).
struct AdamWDeviceScalars {
  at::Tensor lr, step;  // undefined: the update takes its scalars from the host

  // Defined (lr, steps taken) on `device` where the update runs ATen's fused kernel there (a GPU,
  // LibTorch >= 2.4); left undefined elsewhere.
  void init(const c10::Device& device, double lr, int64_t steps);
  bool on() const { return lr.defined(); }
  void set_lr(double v);
  void set_steps(int64_t steps);
  void advance();  // one more step
  // Takes the advance back where `found_inf` (0-dim fp32 on the device) holds 1: a skipped step.
  void take_back(const at::Tensor& found_inf);
};

// One AdamW update of flat, equally sized, contiguous buffers (step = the 1-based step count
// after this update, for the bias corrections); `scratch` is a buffer of the same size used off
// the CPU path. Shared by FusedAdamW and ZeroAdamW (dist/zero_adamw.h, on its slice).
// `grad_scale` (0-dim, or undefined for 1) multiplies the gradients first: inside the CPU pass
// (the gradients are left as they are), elsewhere in place beforehand; the same bits either way.
// With `device` on (already advanced to this step): ATen's fused kernel reads the rate and the
// count from it, and `grad_scale` enters the kernel as its divisor 1 / grad_scale (no pass over
// the gradients before it; they are left divided by it; within one rounding of the product).
// `found_inf` (REQUIRES: `device` on; 0-dim fp32): where it holds 1 the kernel changes nothing,
// decided on the device (the fp16 loss scaler's skip inside a CUDA graph).
void adamw_update(const at::Tensor& params, const at::Tensor& grads, const at::Tensor& exp_avg,
                  const at::Tensor& exp_avg_sq, const at::Tensor& scratch, const AdamWHyper& hyper, double weight_decay,
                  int64_t step, const at::Tensor& grad_scale = {}, const AdamWDeviceScalars* device = nullptr,
                  const at::Tensor& found_inf = {});

// One flat buffer's (or one ZeRO chunk's) AdamW state, shared by FusedAdamW and ZeroAdamW: the
// moments and the update's scratch on the parameters' device, or with dist.offload = "optimizer"
// (ZeRO-Offload) the moments in host memory (pinned where the parameters are on a GPU) and each
// update run by the CPU pass on host copies: the parameters and gradients staged into host
// buffers, updated there, the parameters copied back. Offloaded, the device holds no moments and
// no scratch (12 bytes a parameter fewer) and each step moves 12 bytes a parameter between device
// and host; the maths is the CPU pass's, so the same bits as an unoffloaded CPU run.
//
// With the master in host memory too (keep_master_on_host: ZeRO-3's shard), `host_params` is the
// fp32 parameters themselves rather than a staging copy: a step copies only the gradients to the
// host, and the result goes back to the device in the dtype of the tensor the update is given
// (ZeRO-3's bf16 shard: 2 bytes a parameter on the device instead of 4, cast on the host as
// autocast's cast rounds).
struct AdamWState {
  at::Tensor exp_avg, exp_avg_sq;  // on the parameters' device, or in host memory when offloaded
  // On the device: scratch for sqrt(v)/bc2 + eps, allocated once (a fresh buffer of the model's
  // size every step would be mmapped and page-faulted in each time).
  at::Tensor denom;
  at::Tensor host_params, host_grads;  // offloaded: the host staging buffers (host_params: or the master)
  at::Tensor host_out;                 // master on the host, a device copy of another dtype: its cast, staged
  AdamWState() = default;
  // `n` zeroed moments for parameters of `opts` (fp32), on their device or offloaded.
  AdamWState(int64_t n, const at::TensorOptions& opts, bool offload);
  bool offloaded() const { return host_params.defined(); }
  // REQUIRES: offloaded(). From now on `host_params` is the master, first set to `values` (this
  // state's `n` parameters, anywhere); update() no longer reads its `params` argument, only writes it.
  void keep_master_on_host(const at::Tensor& values);
  bool master_on_host() const { return master_on_host_; }
  // One update of `params` from `grads` (REQUIRES: both of this size): adamw_update on the device
  // (with `device`'s scalars where on), or offloaded with the host's rate and count.
  void update(const at::Tensor& params, const at::Tensor& grads, const AdamWHyper& hyper, double weight_decay,
              int64_t step, const at::Tensor& grad_scale, const AdamWDeviceScalars* device,
              const at::Tensor& found_inf = {});
  int64_t bytes() const;       // the moments' (and a master in host memory)
  int64_t host_bytes() const;  // of those, in host memory

 private:
  bool master_on_host_ = false;
};

namespace test_hooks {
// Makes AdamWDeviceScalars::init put the scalars on the CPU too, so the CPU runs the device
// path through ATen's CPU fused kernel (tests only).
void adamw_device_scalars_on_cpu(bool on);
}  // namespace test_hooks

class FusedAdamW {
 public:
  struct Group {
    std::vector<at::Tensor> params;
    double weight_decay = 0.0;
  };

  // `offload`: the moments in host memory and the update on the CPU (AdamWState).
  FusedAdamW(std::vector<Group> groups, AdamWHyper hyper, bool offload = false);
  ~FusedAdamW();
  FusedAdamW(const FusedAdamW&) = delete;
  FusedAdamW& operator=(const FusedAdamW&) = delete;

  // Keeps a `dtype` copy of every parameter beside the flat buffers, rewritten by each step, for
  // the model's products to read (model/working_weights.h; `add_into_grads` where no gradient hook
  // waits on AccumulateGrad). Returns the bytes the copies take.
  int64_t keep_working_copies(c10::ScalarType dtype, bool add_into_grads);

  void set_lr(double lr) {
    hyper_.lr = lr;
    device_.set_lr(lr);
  }
  double lr() const { return hyper_.lr; }
  // The rate and the step count on the parameters' device (on() on a GPU; see AdamWDeviceScalars).
  const AdamWDeviceScalars& device_scalars() const { return device_; }
  // One AdamW step over every parameter (a parameter that got no gradient counts as zero).
  void step(const at::Tensor& grad_scale = {});
  // The same step's device work alone (REQUIRES: device_scalars().on()): the count advanced on
  // the device, the host's count left as it is, for a CUDA graph to capture; after each replay,
  // count_replayed_step() brings the host's count level. `found_inf` (0-dim fp32 on the device,
  // or undefined): where it holds 1 the step is skipped on the device (weights, moments and the
  // device's count as they were), and the host does not count it.
  void step_on_device(const at::Tensor& grad_scale = {}, const at::Tensor& found_inf = {});
  void count_replayed_step() { ++steps_; }
  // Sets every gradient to zero (the gradients stay allocated views into the flat buffer).
  void zero_grad();
  int64_t step_count() const { return steps_; }

  // Every gradient as a list (views), e.g. for clipping or loss-scaler unscaling.
  std::vector<at::Tensor> flat_grads() const;
  // Optimizer state for checkpoints: "g<i>.exp_avg", "g<i>.exp_avg_sq" (flat, per group).
  std::vector<std::pair<std::string, at::Tensor>> state_tensors() const;
  void load_state(const std::vector<std::pair<std::string, at::Tensor>>& tensors, int64_t steps);
  // Bytes held by the optimizer state (moments), for the memory report; of which in host memory.
  int64_t state_bytes() const;
  int64_t host_state_bytes() const;

 private:
  struct Flat {
    at::Tensor params, grads;
    std::vector<at::Tensor> members;  // the parameters living in `params`, in order
    AdamWState state;
    double weight_decay;
  };
  // One update of every group as step `step` (1-based), the device count advanced, the copies
  // rewritten.
  void update(int64_t step, const at::Tensor& grad_scale, const at::Tensor& found_inf = {});

  std::vector<Flat> flats_;
  AdamWHyper hyper_;
  int64_t steps_ = 0;
  AdamWDeviceScalars device_;
  std::unique_ptr<WorkingWeights> working_;  // bf16 copies the forward reads (keep_working_copies)
};

}  // namespace frugal
