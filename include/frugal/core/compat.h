// The one place where LibTorch 1.13 and 2.x differ for frugal. Everything version-dependent goes
// through these helpers; the rest of the code is written once.
//
// Facts behind each branch: docs/build.md, "LibTorch versions".
#pragma once

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <c10/util/Exception.h>
#include <torch/version.h>

#include <cstdint>
#include <type_traits>
#include <utility>
#include <cstring>
#include <string>

#define FRUGAL_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) || (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

namespace frugal::compat {

// Autocast state for one device type (CPU or CUDA). 2.4 replaced the per-device functions with
// device-generic ones (PR pytorch/pytorch#124359) and deprecated the old names.
inline bool autocast_enabled(c10::DeviceType dev) {
#if FRUGAL_TORCH_AT_LEAST(2, 4)
  return at::autocast::is_autocast_enabled(dev);
#else
  return dev == c10::DeviceType::CUDA ? at::autocast::is_enabled() : at::autocast::is_cpu_enabled();
#endif
}

inline void set_autocast_enabled(c10::DeviceType dev, bool on) {
#if FRUGAL_TORCH_AT_LEAST(2, 4)
  at::autocast::set_autocast_enabled(dev, on);
#else
  if (dev == c10::DeviceType::CUDA) {
    at::autocast::set_enabled(on);
  } else {
    at::autocast::set_cpu_enabled(on);
  }
#endif
}

inline c10::ScalarType autocast_dtype(c10::DeviceType dev) {
#if FRUGAL_TORCH_AT_LEAST(2, 4)
  return at::autocast::get_autocast_dtype(dev);
#else
  return dev == c10::DeviceType::CUDA ? at::autocast::get_autocast_gpu_dtype() : at::autocast::get_autocast_cpu_dtype();
#endif
}

inline void set_autocast_dtype(c10::DeviceType dev, c10::ScalarType t) {
#if FRUGAL_TORCH_AT_LEAST(2, 4)
  at::autocast::set_autocast_dtype(dev, t);
#else
  if (dev == c10::DeviceType::CUDA) {
    at::autocast::set_autocast_gpu_dtype(t);
  } else {
    at::autocast::set_autocast_cpu_dtype(t);
  }
#endif
}

// RAII autocast region, the C++ twin of Python's `torch.autocast(device, dtype)`: LibTorch has no
// such guard. Disabled (a no-op) when `enabled` is false.
class AutocastGuard {
 public:
  AutocastGuard(c10::DeviceType dev, c10::ScalarType dtype, bool enabled = true) : dev_(dev), enabled_(enabled) {
    if (!enabled_) return;
    prev_on_ = autocast_enabled(dev_);
    prev_dtype_ = autocast_dtype(dev_);
    set_autocast_enabled(dev_, true);
    set_autocast_dtype(dev_, dtype);
    at::autocast::increment_nesting();
  }
  ~AutocastGuard() {
    if (!enabled_) return;
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    set_autocast_enabled(dev_, prev_on_);
    set_autocast_dtype(dev_, prev_dtype_);
  }
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  c10::DeviceType dev_;
  bool enabled_;
  bool prev_on_ = false;
  c10::ScalarType prev_dtype_ = c10::ScalarType::BFloat16;
};

// The key of a parameter's entry in torch::optim::Optimizer::state(): 1.13 keys it by the
// TensorImpl's address printed as a string, 2.x by the address itself (a void*).
inline auto optimizer_state_key(const at::Tensor& param) {
#if FRUGAL_TORCH_AT_LEAST(2, 0)
  return static_cast<void*>(param.unsafeGetTensorImpl());
#else
  return c10::guts::to_string(param.unsafeGetTensorImpl());
#endif
}

// ATen's multi-tensor unscale-and-check (what torch.amp.GradScaler runs): grads *= inv_scale in
// place, found_inf set non-zero where any element is inf/NaN; one kernel per call on CPU and
// CUDA in 2.x. 1.13 has it for CUDA only: returns false there, doing nothing, and the caller
// unscales and checks by hand.
inline bool amp_unscale_and_check(at::TensorList grads, at::Tensor& found_inf, const at::Tensor& inv_scale) {
#if FRUGAL_TORCH_AT_LEAST(2, 1)
  at::_amp_foreach_non_finite_check_and_unscale_(grads, found_inf, inv_scale);
  return true;
#else
  (void)grads, (void)found_inf, (void)inv_scale;
  return false;
#endif
}

// ATen's fused AdamW kernel (torch.optim.AdamW(fused=True)) on one CUDA buffer, with the step
// count as a device tensor (no host synchronisation). Returns false where LibTorch has none (1.13).
inline bool fused_adamw_cuda(const at::Tensor& param, const at::Tensor& grad, const at::Tensor& exp_avg,
                             const at::Tensor& exp_avg_sq, int64_t step, double lr, double beta1, double beta2,
                             double weight_decay, double eps) {
#if FRUGAL_TORCH_AT_LEAST(2, 1)
  at::Tensor step_t = at::full({}, static_cast<double>(step), param.options().dtype(at::kFloat));
  at::_fused_adamw_({param}, {grad}, {exp_avg}, {exp_avg_sq}, {}, {step_t}, lr, beta1, beta2, weight_decay, eps,
                    /*amsgrad=*/false, /*maximize=*/false);
  return true;
#else
  (void)param, (void)grad, (void)exp_avg, (void)exp_avg_sq, (void)step, (void)lr, (void)beta1, (void)beta2;
  (void)weight_decay, (void)eps;
  return false;
#endif
}

// ATen's fused AdamW with the rate and the step read from 0-dim fp32 tensors on the parameters'
// device, the gradients divided by `grad_divisor` (undefined: by 1) inside the kernel. Where
// `found_inf` (0-dim fp32, or undefined) holds 1, the kernel changes nothing (the caller takes the
// count back). False where LibTorch lacks it (before 2.4, whose CPU has no fused kernel and no
// tensor rate).
inline bool fused_adamw_tensor_scalars(const at::Tensor& param, const at::Tensor& grad, const at::Tensor& exp_avg,
                                       const at::Tensor& exp_avg_sq, const at::Tensor& step, const at::Tensor& lr,
                                       double beta1, double beta2, double weight_decay, double eps,
                                       const at::Tensor& grad_divisor, const at::Tensor& found_inf = {}) {
#if FRUGAL_TORCH_AT_LEAST(2, 4)
  std::optional<at::Tensor> divisor, skip;
  if (grad_divisor.defined()) divisor = grad_divisor;
  if (found_inf.defined()) skip = found_inf;  // 1: the kernel changes nothing
  at::_fused_adamw_({param}, {grad}, {exp_avg}, {exp_avg_sq}, {}, {step}, lr, beta1, beta2, weight_decay, eps,
                    /*amsgrad=*/false, /*maximize=*/false, divisor, skip);
  return true;
#else
  (void)param, (void)grad, (void)exp_avg, (void)exp_avg_sq, (void)step, (void)lr, (void)beta1, (void)beta2;
  (void)weight_decay, (void)eps, (void)grad_divisor, (void)found_inf;
  return false;
#endif
}

// Causal attention through ATen's scaled_dot_product_attention (flash / memory-efficient kernels
// on a GPU; q, k, v of shape (B, H, T, D)), dropout on the attention weights with probability
// `dropout`. Undefined where LibTorch has no public SDPA (1.13): the caller computes it by hand.
inline at::Tensor causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double dropout) {
#if FRUGAL_TORCH_AT_LEAST(2, 0)
  return at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, dropout, /*is_causal=*/true);
#else
  (void)q, (void)k, (void)v, (void)dropout;
  return {};
#endif
}

// The same with grouped key/value heads: q (B, H, T, D), k and v (B, K, T, D), H a multiple of K
// (query head h reads key/value head h / (H / K)). SDPA's enable_gqa came in 2.5; before it this
// is undefined and the caller repeats the heads by hand.
inline at::Tensor gqa_causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double dropout) {
#if FRUGAL_TORCH_AT_LEAST(2, 5)
  return at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, dropout, /*is_causal=*/true, std::nullopt,
                                          /*enable_gqa=*/q.size(1) != k.size(1));
#else
  (void)q, (void)k, (void)v, (void)dropout;
  return {};
#endif
}

// LibTorch profiler events (torch::autograd::profiler::KinetoEvent; the caller includes
// <torch/csrc/autograd/profiler_kineto.h>). 1.13 reports microseconds (startUs, durationUs); 2.x
// replaced them with nanoseconds (startNs, durationNs). Both are on the Unix-epoch clock. Detected
// by member rather than by version number, so a release in between picks whichever it has.
namespace detail {
template <class E, class = void>
struct HasStartNs : std::false_type {};
template <class E>
struct HasStartNs<E, std::void_t<decltype(std::declval<const E&>().startNs())>> : std::true_type {};
}  // namespace detail

template <class Event>
int64_t profiler_event_start_us(const Event& e) {
  if constexpr (detail::HasStartNs<Event>::value) {
    return static_cast<int64_t>(e.startNs() / 1000);
  } else {
    return static_cast<int64_t>(e.startUs());
  }
}

template <class Event>
int64_t profiler_event_duration_us(const Event& e) {
  if constexpr (detail::HasStartNs<Event>::value) {
    return static_cast<int64_t>(e.durationNs() / 1000);
  } else {
    return static_cast<int64_t>(e.durationUs());
  }
}

// Out-of-memory errors. c10::OutOfMemoryError (a c10::Error) exists in 1.13 and 2.x alike; the
// CUDA caching allocator throws it when VRAM runs out, and frugal's counting CPU allocator throws
// it past [memory] limit_mb. Older builds and some backends still throw a plain c10::Error whose
// message says "out of memory", so is_out_of_memory() also accepts that.
using OutOfMemoryError = c10::OutOfMemoryError;

[[noreturn]] inline void throw_out_of_memory(const std::string& message) {
  throw OutOfMemoryError(c10::SourceLocation{__func__, __FILE__, static_cast<uint32_t>(__LINE__)}, message);
}

inline bool is_out_of_memory(const std::exception& e) {
  if (dynamic_cast<const OutOfMemoryError*>(&e) != nullptr) return true;
  if (const auto* ce = dynamic_cast<const c10::Error*>(&e))
    return std::strstr(ce->what_without_backtrace(), "out of memory") != nullptr;
  return false;
}

}  // namespace frugal::compat
