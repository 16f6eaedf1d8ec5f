// The one place where LibTorch 1.13 and 2.x differ for frugal. Everything version-dependent goes
// through these helpers; the rest of the code is written once.
//
// Facts behind each branch: docs/ARCHITECTURE.md, "LibTorch versions".
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
  (TORCH_VERSION_MAJOR > (major) ||         \
   (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

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
  return dev == c10::DeviceType::CUDA ? at::autocast::get_autocast_gpu_dtype()
                                      : at::autocast::get_autocast_cpu_dtype();
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
  AutocastGuard(c10::DeviceType dev, c10::ScalarType dtype, bool enabled = true)
      : dev_(dev), enabled_(enabled) {
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
  throw OutOfMemoryError(c10::SourceLocation{__func__, __FILE__, static_cast<uint32_t>(__LINE__)},
                         message);
}

inline bool is_out_of_memory(const std::exception& e) {
  if (dynamic_cast<const OutOfMemoryError*>(&e) != nullptr) return true;
  if (const auto* ce = dynamic_cast<const c10::Error*>(&e))
    return std::strstr(ce->what_without_backtrace(), "out of memory") != nullptr;
  return false;
}

}  // namespace frugal::compat
