// The precision policy: which dtype autocast runs in, whether a loss scaler is needed, and the
// decision behind `mode = "auto"` (measured, not guessed from CPU names).
#pragma once

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <memory>
#include <string>

#include "frugal/core/matmul_probe.h"
#include "frugal/core/compat.h"
#include "frugal/core/config.h"
#include "frugal/model/fp8.h"

namespace frugal {

class PrecisionPolicy {
 public:
  // Resolves kAuto by measurement and checks that the device supports the mode. Throws
  // ConfigError for fp16 on a CPU build whose autocast has no fp16 (LibTorch < 2.x). `why`
  // replaces the reason of a mode given explicitly ("" = "precision.mode").
  PrecisionPolicy(PrecisionMode requested, c10::Device device, std::string why = "");

  PrecisionMode mode() const { return mode_; }
  c10::Device device() const { return device_; }
  bool autocast() const {
    return mode_ == PrecisionMode::kBf16 || mode_ == PrecisionMode::kFp16 || mode_ == PrecisionMode::kFp8;
  }
  // Whether the blocks' linear layers run in fp8 (model/fp8.h), in bf16 autocast.
  bool fp8() const { return mode_ == PrecisionMode::kFp8; }
  bool needs_loss_scaling() const { return mode_ == PrecisionMode::kFp16; }
  // The loss-scaling decision for a precision.loss_scaling setting.
  bool loss_scaling(LossScaling s) const {
    return s == LossScaling::kDynamic || (s == LossScaling::kAuto && needs_loss_scaling());
  }
  c10::ScalarType dtype() const { return mode_ == PrecisionMode::kFp16 ? c10::kHalf : c10::kBFloat16; }
  // Why this mode (for the log and summary.json), e.g. "auto: bf16 matmul 2.1x fp32 here".
  const std::string& reason() const { return reason_; }
  std::string name() const;

  // The precision of a forward pass while alive: autocast (a no-op guard in fp32) and fp8 linears.
  struct Region {
    Region(c10::DeviceType device, c10::ScalarType dtype, bool autocast, bool fp8, bool fp8_kernels)
        : autocast_(device, dtype, autocast), fp8_(fp8, fp8_kernels) {}
    compat::AutocastGuard autocast_;
    fp8::Scope fp8_;
  };
  std::unique_ptr<Region> enter() const;
  // fp8: whether the casts run frugal's kernel (fp8::cast_kernels; model.kernels = "frugal").
  void set_fp8_cast_kernels(bool on) { fp8_kernels_ = on; }

  // Switches a collapsing fp16 run to bf16 (when bf16 autocast exists on this device).
  bool fall_back_to_bf16(const std::string& why);

 private:
  PrecisionMode mode_;
  c10::Device device_;
  std::string reason_;
  bool fp8_kernels_ = false;
};

std::string precision_name(PrecisionMode m);

// The CPU decision of `mode = "auto"` from measured matmul speeds: bf16 when it is at least
// kAutoBf16MinSpeedup times fp32 (below that, its rounding is not worth the little time it saves),
// else fp32. `reason` receives the figures and the choice.
inline constexpr double kAutoBf16MinSpeedup = 1.5;
PrecisionMode auto_precision(double bf16_gflops, double fp32_gflops, std::string* reason);

// The CUDA decision of `mode = "auto"` from the GPU's compute capability: bf16 from 8.0 (Ampere:
// bf16 tensor cores), fp16 with loss scaling below (a T4 or V100 runs bf16 autocast without tensor
// cores, several times slower). `reason` receives the GPU, its capability and the choice.
PrecisionMode cuda_auto_precision(const std::string& gpu, int major, int minor, std::string* reason);

// The CPU's `auto` precision on this machine, decided once and kept (core/machine_cache.h,
// "precision.json"): the kept speeds when there are some for this machine, else 5 alternating
// rounds of 512^3 fp32 and bf16 products (medians), kept for the next run, tune and doctor, so
// that they all decide alike. `remeasure` (frugal doctor) measures and keeps again. `reason`
// receives the figures, where they were kept and when.
PrecisionMode cpu_auto_precision(std::string* reason, bool remeasure = false, CpuPrecisionSpeeds* speeds = nullptr);

}  // namespace frugal
