// Machine diagnosis; see doctor.h.
#include "frugal/tune/doctor.h"

#include <sys/statvfs.h>

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <sstream>
#include <vector>

#include <fmt/format.h>

#include "frugal/core/compat.h"
#include "frugal/core/device.h"
#include "frugal/core/features.h"
#include "frugal/core/matmul_probe.h"
#include "frugal/core/memory.h"
#include "frugal/core/machine_cache.h"
#include "frugal/core/threads.h"
#include "frugal/core/wall_clock.h"
#include "frugal/model/fp8.h"
#include "frugal/model/fused_attention.h"
#include "frugal/model/kernel_ops.h"
#include "frugal/monitor/mfu.h"
#include "frugal/train/precision.h"

namespace frugal {
namespace {
using Clock = std::chrono::steady_clock;

// The middle value; of an even count, the upper of the two middle ones.
double upper_median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Median seconds of a small transformer-like fp32 training step (MLP 512 -> 2048 -> 512, batch
// 1024): matmuls from the BLAS plus element-wise ops from OpenMP, the mix that oversubscribes.
double mlp_step_seconds(double budget_s) {
  torch::manual_seed(0);
  auto w1 = torch::randn({2048, 512}).mul_(0.02).requires_grad_();
  auto w2 = torch::randn({512, 2048}).mul_(0.02).requires_grad_();
  auto x = torch::randn({1024, 512});
  std::vector<double> times;
  auto t_end = Clock::now() + std::chrono::duration<double>(budget_s);
  for (int i = 0; i < 3 || (Clock::now() < t_end && i < 50); ++i) {
    auto t0 = Clock::now();
    auto y = torch::linear(torch::gelu(torch::linear(x, w1)), w2);
    y.square().mean().backward();
    w1.mutable_grad().zero_();
    w2.mutable_grad().zero_();
    times.push_back(seconds_since(t0));
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

// The CPU, LibTorch, and the memory budget a run gets.
void check_cpu(DoctorReport& r) {
  auto& f = r.facts;
  f["frugal_version"] = FRUGAL_VERSION;
  f["torch_version"] = TORCH_VERSION;
  f["parallel_backend"] = at::get_parallel_info().find("OpenMP") != std::string::npos ? "OpenMP" : "native";
  f["cpu"] = cpu_model_name();
  f["logical_cpus"] = usable_cpu_count();
  f["physical_cores"] = physical_core_count();
  f["avx512f"] = cpu_has_flag("avx512f");
  f["avx512_bf16"] = cpu_has_flag("avx512_bf16");
  f["amx_bf16"] = cpu_has_flag("amx_bf16");
  f["avx2"] = cpu_has_flag("avx2");
  // The x86-64 level frugal's own CPU kernels (attention) run at on this CPU: 4 (AVX-512),
  // 3 (AVX2 and FMA) or 1 (baseline; also every other architecture).
  f["kernel_level"] = fused_attention_cpu_level();
  // What memory.limit_mb = 0 takes as the CPU memory budget (0 = no cgroup limit).
  f["cgroup_memory_limit_mb"] = static_cast<double>(cgroup_memory_limit_bytes()) / (1024.0 * 1024.0);
}

// What was compiled in (CUDA, cuDNN, NCCL, frugal's kernels, the optional features) and which
// std::filesystem this program resolves to.
void check_build(DoctorReport& r) {
  auto& f = r.facts;
  const device::BuildInfo build = device::build_info();
  f["cuda_compiled"] = build.cuda_compiled;
  f["cuda_compiled_version"] = build.cuda_version;
  f["cudnn_version"] = build.cudnn_version;
  f["nccl_compiled"] = build.nccl_compiled;
  f["cuda_kernels_compiled"] = cuda_kernels_built();             // model.kernels = "frugal" (docs/gpu.md)
  f["cuda_kernel_architectures"] = cuda_kernel_architectures();  // a GPU outside them runs ATen's bodies
  // Which copy of std::filesystem this program uses (libstdc++'s, not the wheel's).
  const std::string fs_library = std_filesystem_library();
  f["std_filesystem_library"] = fs_library;
  if (fs_library.find("libstdc++") == std::string::npos)
    r.warnings.push_back(
        fmt::format("std::filesystem resolves to {} instead of libstdc++: LibTorch's exported copy "
                    "can fault when a call continues in the other (pytorch/pytorch#133437). Link "
                    "libstdc++ ahead of LibTorch (frugal's CMakeLists.txt links -l:libstdc++.so.6 first)",
                    fs_library.empty() ? "an unknown library" : fs_library));
  nlohmann::ordered_json features = nlohmann::ordered_json::object();
  for (const Feature& x : build_features()) {
    features[x.name] = x.compiled;
    if (!x.compiled)
      r.warnings.push_back(fmt::format("this build has no {} ({}): {} is refused. Install {} and rebuild.", x.name,
                                       x.library, x.enables, x.package));
  }
  f["build_features"] = features;
}

// The GPUs this process sees, each with its datasheet peak and (with probes) its measured one.
void check_gpus(const DoctorOptions& o, DoctorReport& r) {
  auto& f = r.facts;
  const device::BuildInfo build = device::build_info();
  f["cuda_available"] = device::cuda_available();
  f["cuda_devices"] = device::cuda_device_count();
  nlohmann::ordered_json gpus = nlohmann::ordered_json::array();
  for (const auto& g : device::cuda_devices()) {
    nlohmann::ordered_json one;
    one["index"] = g.index;
    one["name"] = g.name;
    one["compute_capability"] = fmt::format("{}.{}", g.major, g.minor);
    one["memory_gb"] = static_cast<double>(g.total_bytes) / 1e9;
    one["multiprocessors"] = g.multiprocessors;
    one["fp8"] = fp8::gpu_supports_fp8(g.major, g.minor);  // precision.mode = "fp8" runs here
    // The datasheet's dense bf16/fp16 figure MFU is quoted against first (monitor/mfu.h); null
    // for a GPU not in frugal's table.
    const auto sheet = datasheet_peak_flops(g.name, torch::kBFloat16);
    one["datasheet_bf16_tflops"] =
        sheet.first > 0 ? nlohmann::ordered_json(sheet.first / 1e12) : nlohmann::ordered_json();
    one["datasheet_source"] = sheet.second;
    if (o.seconds_per_probe > 0) {  // the peaks MFU is measured against on this GPU
      const c10::Device dev(c10::kCUDA, static_cast<c10::DeviceIndex>(g.index));
      one["matmul_bf16_tflops"] = measure_matmul_gflops(8192, torch::kBFloat16, dev, o.seconds_per_probe) / 1e3;
      one["matmul_fp32_tflops"] = measure_matmul_gflops(8192, torch::kFloat, dev, o.seconds_per_probe) / 1e3;
    }
    gpus.push_back(one);
  }
  f["gpus"] = gpus;
  if (build.cuda_compiled && gpus.empty())
    r.warnings.push_back(
        "CUDA is compiled in but no GPU is visible (no driver, no device, or "
        "CUDA_VISIBLE_DEVICES hides them): runs use run.device = \"cpu\".");
  if (!build.cuda_compiled)
    r.warnings.push_back(
        "this build has no CUDA: run.device = \"cuda\" is refused. Build against the "
        "official CUDA wheel (scripts/install-deps.sh) to use a GPU.");
}

// The BLAS behind LibTorch's fp32 matmuls, and the thread pools it starts with.
void check_blas(DoctorReport& r) {
  auto& f = r.facts;
  const int default_intra = at::get_num_threads();
  const int default_blas = blas_threads();
  f["blas_library"] = blas_library();
  f["blas_optimized"] = blas_is_optimized();
  f["threads_libtorch_default"] = default_intra;
  f["threads_blas_default"] = default_blas;
  if (!blas_is_optimized()) {
    r.warnings.push_back(fmt::format(
        "LibTorch's fp32 matmul goes to the reference BLAS ({}), ~25x slower than a tuned one.\n"
        "    fix (Debian's LibTorch): sudo apt-get install libopenblas0-pthread; the official wheel brings MKL",
        blas_library().empty() ? "none found" : blas_library()));
  }
}

// Threads: the default setting (physical cores) against one thread, alternating 3 rounds of each
// (a shared machine's speed drifts from second to second) and comparing medians. One thread is
// kept only when it wins every round by the margin and the machine was quiet (other processes
// used under kBusyOthers of its CPUs): a measurement beside a busy neighbour says more about
// the neighbour, and a choice kept from it would slow every later run. The choice is kept with
// its evidence (threads.h: thread_choice_path) and `frugal train` with run.threads = 0 follows
// it, so the two never disagree.
void check_threads(const DoctorOptions& o, DoctorReport& r) {
  auto& f = r.facts;
  constexpr double kBusyOthers = 0.25;
  ThreadSettings threads = apply_thread_settings(0, /*use_doctor_choice=*/false);
  std::vector<double> planned_runs, one_runs;
  const OtherLoadMeter others;
  for (int round = 0; round < 3; ++round) {
    apply_thread_settings(0, false);
    planned_runs.push_back(mlp_step_seconds(o.seconds_per_probe / 3));
    apply_thread_settings(1);
    one_runs.push_back(mlp_step_seconds(o.seconds_per_probe / 3));
  }
  const double busy = others.fraction();
  const double planned_s = upper_median(planned_runs), one_s = upper_median(one_runs);
  bool every_round = true;
  for (size_t i = 0; i < one_runs.size(); ++i)
    every_round = every_round && recommend_threads(planned_runs[i], one_runs[i], threads.intra_op) == 1;
  const int fastest = every_round ? recommend_threads(planned_s, one_s, threads.intra_op) : threads.intra_op;
  const bool too_busy = fastest != threads.intra_op && busy > kBusyOthers;
  const int recommended = too_busy ? threads.intra_op : fastest;
  const std::string evidence = fmt::format(
      "{} thread(s) {:.1f} ms/step, 1 thread {:.1f} ms/step (medians of 3 alternating rounds; other processes "
      "used {:.0f}% of the CPUs meanwhile)",
      threads.intra_op, planned_s * 1e3, one_s * 1e3, 100 * busy);
  // Oversubscribed: OpenMP at the planned count with OpenBLAS's own pool at every CPU.
  at::set_num_threads(threads.intra_op);
  bool blas_pool = set_blas_threads(std::max(threads.logical_cpus, 2) * threads.intra_op);
  const double over_s = blas_pool ? mlp_step_seconds(o.seconds_per_probe) : planned_s;
  if (o.save_thread_choice) {
    try {
      save_thread_choice(recommended, evidence);
      f["threads_choice_file"] = thread_choice_path();
    } catch (const std::exception& e) {
      r.warnings.push_back(fmt::format("cannot save the thread choice: {}; frugal train keeps its default", e.what()));
    }
  }
  const ThreadSettings used = apply_thread_settings(0, o.save_thread_choice);
  f["threads_frugal"] = o.save_thread_choice ? used.intra_op : recommended;
  f["mlp_step_ms_planned"] = planned_s * 1e3;
  f["mlp_step_ms_one_thread"] = one_s * 1e3;
  f["threads_other_load"] = busy;
  f["threads_evidence"] = evidence;
  if (blas_pool) f["mlp_step_ms_blas_oversubscribed"] = over_s * 1e3;
  f["threads_recommended"] = recommended;
  if (blas_pool && over_s > planned_s * 1.3)
    r.warnings.push_back(
        fmt::format("oversubscription: with OpenBLAS's own pool of {} threads beside {} OpenMP threads an fp32 "
                    "step takes {:.1f} ms vs {:.1f} ms with matched pools ({:.1f}x slower).\n"
                    "    frugal sets both pools itself ([run] threads); other programs on this machine should "
                    "set OPENBLAS_NUM_THREADS and OMP_NUM_THREADS to the same count.",
                    std::max(threads.logical_cpus, 2) * threads.intra_op, threads.intra_op, over_s * 1e3,
                    planned_s * 1e3, over_s / planned_s));
  if (too_busy)
    r.warnings.push_back(fmt::format(
        "one thread measured faster ({}), but other processes kept {:.0f}% of the CPUs busy: frugal train keeps "
        "{} threads. Run frugal doctor again when the machine is quiet, or set run.threads.",
        evidence, 100 * busy, threads.intra_op));
  else if (recommended < threads.intra_op)
    r.warnings.push_back(fmt::format(
        "one thread beats {} in every round ({}): the CPUs are shared or slow to share work. frugal train "
        "(run.threads = 0) now uses 1 thread here{}; run frugal doctor again to re-measure, or set run.threads.",
        threads.intra_op, evidence, o.save_thread_choice ? " (kept in " + thread_choice_path() + ")" : ""));
}

// The measurement precision.mode = "auto" decides from, made again and kept (precision.h:
// cpu_auto_precision), so that doctor, tune and train decide alike on this machine.
void check_precision(const DoctorOptions& o, DoctorReport& r) {
  auto& f = r.facts;
  CpuPrecisionSpeeds speeds;
  std::string precision_reason;
  PrecisionMode auto_mode;
  if (o.save_thread_choice) {
    auto_mode = cpu_auto_precision(&precision_reason, /*remeasure=*/true, &speeds);
  } else {
    speeds = measure_cpu_precision_speeds(512, 5, o.seconds_per_probe / 5);
    auto_mode = auto_precision(speeds.bf16_gflops, speeds.fp32_gflops, &precision_reason);
  }
  const bool bf16_fast = auto_mode == PrecisionMode::kBf16;
  const double fp32 = speeds.fp32_gflops, bf16 = speeds.bf16_gflops;
  f["matmul_fp32_gflops"] = fp32;
  f["matmul_bf16_gflops"] = bf16;
  f["bf16_speedup"] = bf16 / fp32;
  f["precision_auto"] = precision_reason;
  f["bf16_fast"] = bf16_fast;
  if (!bf16_fast)
    r.warnings.push_back(
        fmt::format("bf16 matmul ({:.0f} GFLOP/s) is not much faster than fp32 ({:.0f}) here{}: "
                    "[precision] mode = \"auto\" will keep fp32.",
                    bf16, fp32, f["avx512_bf16"].get<bool>() ? "" : " (no AVX-512 BF16)"));
}

// Free space where runs are written.
void check_disk(const DoctorOptions& o, DoctorReport& r) {
  auto& f = r.facts;
  struct statvfs vfs {};
  if (::statvfs(o.disk_path.c_str(), &vfs) == 0)
    f["disk_free_gb"] = static_cast<double>(vfs.f_bavail) * static_cast<double>(vfs.f_frsize) / 1e9;
}

}  // namespace

int recommend_threads(double planned_step_s, double one_thread_step_s, int planned_threads) {
  return one_thread_step_s < 0.9 * planned_step_s ? 1 : planned_threads;
}

// One check after another, each adding its facts and warnings; precision reads the CPU's flags.
DoctorReport run_doctor(const DoctorOptions& o) {
  DoctorReport r;
  check_cpu(r);
  check_build(r);
  check_gpus(o, r);
  check_blas(r);
  check_threads(o, r);
  check_precision(o, r);
  check_disk(o, r);
  return r;
}

}  // namespace frugal
