// Precision policy; see precision.h.
#include "frugal/train/precision.h"

#include <fmt/format.h>

#include "frugal/core/device.h"
#include "frugal/core/errors.h"
#include "frugal/core/machine_cache.h"
#include "frugal/core/matmul_probe.h"

namespace frugal {
namespace {

// fp8 on this device: refused on a GPU without fp8 tensor cores; what it computes, for the log.
std::string check_fp8(c10::Device device) {
  if (!device.is_cuda()) {
    return "fp8 linears; on the CPU their products are computed from the dequantized fp8 operands in fp32 "
           "(torchao's emulate mode): a GPU run's numbers, slower than bf16";
  }
  const auto gpus = device::cuda_devices();
  const size_t i = device.has_index() ? static_cast<size_t>(device.index()) : 0;
  if (i >= gpus.size()) return "fp8 linears";
  const auto& g = gpus[i];
  FRUGAL_CHECK(fp8::gpu_supports_fp8(g.major, g.minor), ConfigError,
               fmt::format("precision.mode = \"fp8\" needs fp8 tensor cores (compute capability 8.9+: Ada, Hopper and "
                           "newer); {} has {}.{}. Use precision.mode = \"bf16\" (or \"auto\")",
                           g.name, g.major, g.minor));
  return fmt::format("fp8 linears (e4m3 forward, e5m2 gradients) on {} ({}.{})", g.name, g.major, g.minor);
}

}  // namespace

std::string precision_name(PrecisionMode m) {
  switch (m) {
    case PrecisionMode::kFp32:
      return "fp32";
    case PrecisionMode::kBf16:
      return "bf16";
    case PrecisionMode::kFp16:
      return "fp16";
    case PrecisionMode::kFp8:
      return "fp8";
    case PrecisionMode::kAuto:
      return "auto";
  }
  return "?";
}

PrecisionPolicy::PrecisionPolicy(PrecisionMode requested, c10::Device device, std::string why)
    : mode_(requested), device_(device), reason_(why.empty() ? "precision.mode" : std::move(why)) {
  if (requested == PrecisionMode::kAuto) {
    if (device.is_cuda()) {
      // bf16 tensor cores need Ampere or newer: the device's compute capability decides.
      const auto gpus = device::cuda_devices();
      const size_t i = device.has_index() ? static_cast<size_t>(device.index()) : 0;
      if (i < gpus.size()) {
        mode_ = cuda_auto_precision(gpus[i].name, gpus[i].major, gpus[i].minor, &reason_);
      } else {
        mode_ = PrecisionMode::kBf16;
        reason_ = "auto: CUDA device, bf16 autocast";
      }
    } else {
      mode_ = cpu_auto_precision(&reason_);
    }
  }
  // LibTorch 2.x can autocast to fp16 on the CPU, but CPUs without fp16 matrix units run it far
  // slower than fp32 (LibTorch 1.13 cannot at all): on the CPU, bf16 is the cheap precision.
  if (mode_ == PrecisionMode::kFp16 && !device.is_cuda())
    throw ConfigError(
        "precision.mode = \"fp16\" needs a CUDA device: on the CPU fp16 autocast runs far slower than fp32 "
        "(no fp16 matrix units). Use precision.mode = \"bf16\" (or \"auto\") on CPU");
  if (mode_ == PrecisionMode::kFp8) reason_ += ": " + check_fp8(device);
}

PrecisionMode cuda_auto_precision(const std::string& gpu, int major, int minor, std::string* reason) {
  const bool bf16 = major >= 8;
  if (reason)
    *reason = fmt::format(
        "auto: {} (compute capability {}.{}) {}", gpu, major, minor,
        bf16 ? "has bf16 tensor cores -> bf16" : "has no bf16 tensor cores (8.0+) -> fp16 with dynamic loss scaling");
  return bf16 ? PrecisionMode::kBf16 : PrecisionMode::kFp16;
}

PrecisionMode auto_precision(double bf16_gflops, double fp32_gflops, std::string* reason) {
  const bool fast = fp32_gflops > 0 && bf16_gflops >= kAutoBf16MinSpeedup * fp32_gflops;
  if (reason)
    *reason = fmt::format("auto: bf16 matmul {:.0f} GFLOP/s vs fp32 {:.0f} ({:.2f}x; bf16 from {}x) on this CPU -> {}",
                          bf16_gflops, fp32_gflops, fp32_gflops > 0 ? bf16_gflops / fp32_gflops : 0.0,
                          kAutoBf16MinSpeedup, fast ? "bf16" : "fp32 (bf16 is not fast enough here)");
  return fast ? PrecisionMode::kBf16 : PrecisionMode::kFp32;
}

PrecisionMode cpu_auto_precision(std::string* reason, bool remeasure, CpuPrecisionSpeeds* speeds) {
  const std::string path = machine_cache_path("precision.json");
  if (!remeasure) {
    if (const auto kept = read_machine_decision("precision.json")) {
      CpuPrecisionSpeeds s;
      s.fp32_gflops = kept->value("fp32_gflops", 0.0);
      s.bf16_gflops = kept->value("bf16_gflops", 0.0);
      s.rounds = kept->value("rounds", 0);
      s.n = kept->value("n", int64_t{0});
      if (s.fp32_gflops > 0 && s.bf16_gflops > 0) {
        if (speeds) *speeds = s;
        const PrecisionMode m = auto_precision(s.bf16_gflops, s.fp32_gflops, reason);
        if (reason)
          *reason += fmt::format(
              " (measured {}, medians of {} alternating rounds, kept in {}; frugal doctor "
              "measures again)",
              kept->value("measured_utc", std::string("?")), s.rounds, path);
        return m;
      }
    }
  }
  // A size typical of small models' matmuls; alternating rounds, medians.
  const CpuPrecisionSpeeds s = measure_cpu_precision_speeds(512, 5, 0.04);
  if (speeds) *speeds = s;
  const PrecisionMode m = auto_precision(s.bf16_gflops, s.fp32_gflops, reason);
  std::string kept = "not kept";
  try {
    save_machine_decision("precision.json",
                          {{"fp32_gflops", s.fp32_gflops},
                           {"bf16_gflops", s.bf16_gflops},
                           {"rounds", s.rounds},
                           {"n", s.n},
                           {"chosen", precision_name(m)}},
                          remeasure ? "frugal doctor" : "precision.mode = auto");
    kept = "kept in " + path;
  } catch (const std::exception& e) {
    kept = std::string("not kept: ") + e.what();
  }
  if (reason) *reason += fmt::format(" (medians of {} alternating rounds; {})", s.rounds, kept);
  return m;
}

std::string PrecisionPolicy::name() const { return precision_name(mode_); }

std::unique_ptr<PrecisionPolicy::Region> PrecisionPolicy::enter() const {
  return std::make_unique<Region>(device_.type(), dtype(), autocast(), fp8(), fp8() && fp8_kernels_);
}

bool PrecisionPolicy::fall_back_to_bf16(const std::string& why) {
  if (mode_ != PrecisionMode::kFp16) return false;
  mode_ = PrecisionMode::kBf16;
  reason_ = "fell back from fp16: " + why;
  return true;
}

}  // namespace frugal
