// Precision policy; see precision.h.
#include "frugal/train/precision.h"

#include <fmt/format.h>

#include "frugal/core/errors.h"
#include "frugal/core/matmul_probe.h"

namespace frugal {

std::string precision_name(PrecisionMode m) {
  switch (m) {
    case PrecisionMode::kFp32: return "fp32";
    case PrecisionMode::kBf16: return "bf16";
    case PrecisionMode::kFp16: return "fp16";
    case PrecisionMode::kAuto: return "auto";
  }
  return "?";
}

PrecisionPolicy::PrecisionPolicy(PrecisionMode requested, c10::Device device, std::string why)
    : mode_(requested), device_(device), reason_(why.empty() ? "precision.mode" : std::move(why)) {
  if (requested == PrecisionMode::kAuto) {
    if (device.is_cuda()) {
      // bf16 autocast on CUDA needs Ampere or newer; the matmul probe below runs on the CPU, so
      // on CUDA trust the build's own check.
      mode_ = PrecisionMode::kBf16;
      reason_ = "auto: CUDA device, bf16 autocast";
    } else {
      // Measure at a size typical of small models' matmuls.
      const double fp32 = measure_matmul_gflops(512, false, 0.15);
      const double bf16 = measure_matmul_gflops(512, true, 0.15);
      mode_ = auto_precision(bf16, fp32, &reason_);
    }
  }
  // LibTorch 2.x can autocast to fp16 on the CPU, but CPUs without fp16 matrix units run it far
  // slower than fp32 (LibTorch 1.13 cannot at all): on the CPU, bf16 is the cheap precision.
  if (mode_ == PrecisionMode::kFp16 && !device.is_cuda())
    throw ConfigError(
        "precision.mode = \"fp16\" needs a CUDA device: on the CPU fp16 autocast runs far slower than fp32 "
        "(no fp16 matrix units). Use precision.mode = \"bf16\" (or \"auto\") on CPU");
}

PrecisionMode auto_precision(double bf16_gflops, double fp32_gflops, std::string* reason) {
  const bool fast = fp32_gflops > 0 && bf16_gflops >= kAutoBf16MinSpeedup * fp32_gflops;
  if (reason)
    *reason = fmt::format("auto: bf16 matmul {:.0f} GFLOP/s vs fp32 {:.0f} ({:.2f}x; bf16 from {}x) on this CPU -> {}",
                          bf16_gflops, fp32_gflops, fp32_gflops > 0 ? bf16_gflops / fp32_gflops : 0.0,
                          kAutoBf16MinSpeedup, fast ? "bf16" : "fp32 (bf16 is not fast enough here)");
  return fast ? PrecisionMode::kBf16 : PrecisionMode::kFp32;
}

std::string PrecisionPolicy::name() const { return precision_name(mode_); }

std::unique_ptr<compat::AutocastGuard> PrecisionPolicy::enter() const {
  return std::make_unique<compat::AutocastGuard>(device_.type(), dtype(), autocast());
}

bool PrecisionPolicy::fall_back_to_bf16(const std::string& why) {
  if (mode_ != PrecisionMode::kFp16) return false;
  mode_ = PrecisionMode::kBf16;
  reason_ = "fell back from fp16: " + why;
  return true;
}

}  // namespace frugal
