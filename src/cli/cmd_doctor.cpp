// `frugal doctor [--json]`: versions, CPU/GPU features, threads, BLAS, measured matmul speed.
#include <fmt/format.h>

#include <memory>

#include "cli/commands.h"
#include "frugal/tune/doctor.h"

namespace frugal::cli {

namespace {
struct DoctorArgs {
  bool json = false;
  double seconds = 0.3;
  bool no_save = false;
};

int run_doctor_cmd(const DoctorArgs& a) {
  DoctorOptions o;
  o.seconds_per_probe = a.seconds;
  o.save_thread_choice = !a.no_save;
  DoctorReport r = run_doctor(o);
  if (a.json) {
    nlohmann::ordered_json j = r.facts;
    j["warnings"] = r.warnings;
    fmt::print("{}\n", j.dump(2));
    return 0;
  }
  const auto& f = r.facts;
  auto b = [](bool x) { return x ? "yes" : "no"; };
  fmt::print("frugal {} on LibTorch {} ({} parallel backend)\n", f["frugal_version"].get<std::string>(),
             f["torch_version"].get<std::string>(), f["parallel_backend"].get<std::string>());
  fmt::print("cpu          {} | {} logical CPUs, {} physical cores\n", f["cpu"].get<std::string>(),
             f["logical_cpus"].get<int>(), f["physical_cores"].get<int>());
  const int level = f["kernel_level"].get<int>();
  fmt::print("features     AVX2 {} | AVX-512 {} | AVX-512 BF16 {} | AMX-BF16 {} | frugal's kernels: {}\n", b(f["avx2"]),
             b(f["avx512f"]), b(f["avx512_bf16"]), b(f["amx_bf16"]),
             level == 4   ? "x86-64-v4 (AVX-512)"
             : level == 3 ? "x86-64-v3 (AVX2)"
                          : "baseline");
  if (f["cuda_compiled"].get<bool>())
    fmt::print("built with   CUDA {} | cuDNN {} | NCCL {} | frugal's CUDA kernels {}{}\n",
               f["cuda_compiled_version"].get<std::string>(),
               f["cudnn_version"].get<int>() > 0 ? std::to_string(f["cudnn_version"].get<int>()) : "no",
               b(f["nccl_compiled"]), b(f.value("cuda_kernels_compiled", false)),
               f.value("cuda_kernel_architectures", std::string()).empty()
                   ? ""
                   : " (" + f["cuda_kernel_architectures"].get<std::string>() + ")");
  else
    fmt::print("built with   no CUDA (CPU-only LibTorch)\n");
  std::string built_in;
  for (const auto& [name, on] : f["build_features"].items())
    built_in += fmt::format("{}{} {}", built_in.empty() ? "" : " | ", name, b(on.get<bool>()));
  fmt::print("optional     {}\n", built_in);
  fmt::print("libstdc++    std::filesystem from {}\n", f["std_filesystem_library"].get<std::string>());
  fmt::print("GPUs         {}\n", f["cuda_devices"].get<int>() == 0 ? std::string("none found") : "");
  for (const auto& g : f["gpus"]) {
    fmt::print("  cuda:{}     {} | compute {} | {} SMs | {:.0f} GB | fp8 {}", g["index"].get<int>(),
               g["name"].get<std::string>(), g["compute_capability"].get<std::string>(),
               g["multiprocessors"].get<int>(), g["memory_gb"].get<double>(), g.value("fp8", false) ? "yes" : "no");
    if (g.contains("matmul_bf16_tflops"))
      fmt::print(" | matmul bf16 {:.0f} TFLOP/s, fp32 {:.0f} TFLOP/s", g["matmul_bf16_tflops"].get<double>(),
                 g["matmul_fp32_tflops"].get<double>());
    fmt::print("\n");
  }
  fmt::print("BLAS         {} ({})\n", f["blas_library"].get<std::string>(),
             f["blas_optimized"].get<bool>() ? "tuned" : "REFERENCE - slow");
  if (f["threads_blas_default"].get<int>() >= 0)
    fmt::print("threads      LibTorch default {}, OpenBLAS default {}; frugal uses {} for both\n",
               f["threads_libtorch_default"].get<int>(), f["threads_blas_default"].get<int>(),
               f["threads_frugal"].get<int>());
  else
    fmt::print("threads      LibTorch default {}; frugal uses {} (the BLAS has no pool of its own)\n",
               f["threads_libtorch_default"].get<int>(), f["threads_frugal"].get<int>());
  fmt::print("fp32 step    {:.1f} ms with frugal's threads, {:.1f} ms with 1 thread",
             f["mlp_step_ms_planned"].get<double>(), f["mlp_step_ms_one_thread"].get<double>());
  if (f.contains("mlp_step_ms_blas_oversubscribed"))
    fmt::print(", {:.1f} ms oversubscribed", f["mlp_step_ms_blas_oversubscribed"].get<double>());
  fmt::print("  -> recommended threads {} (other processes used {:.0f}% of the CPUs meanwhile)\n",
             f["threads_recommended"].get<int>(), 100 * f["threads_other_load"].get<double>());
  fmt::print(
      "matmul       fp32 {:.0f} GFLOP/s | bf16 {:.0f} GFLOP/s | bf16/fp32 {:.2f}x (512^3, medians of 5 "
      "alternating rounds)\n",
      f["matmul_fp32_gflops"].get<double>(), f["matmul_bf16_gflops"].get<double>(), f["bf16_speedup"].get<double>());
  fmt::print("precision    {}\n", f["precision_auto"].get<std::string>());
  if (f.contains("disk_free_gb")) fmt::print("disk         {:.1f} GB free here\n", f["disk_free_gb"].get<double>());
  for (const auto& w : r.warnings) fmt::print("\nWARNING: {}\n", w);
  if (r.warnings.empty()) fmt::print("\nno problems found\n");
  return 0;
}
}  // namespace

void add_doctor_command(CLI::App& app, Run* run) {
  auto args = std::make_shared<DoctorArgs>();
  auto* cmd = app.add_subcommand(
      "doctor",
      "Check this machine: LibTorch build, CPU features, CUDA, BLAS (warns about the slow "
      "reference BLAS), thread oversubscription, measured fp32/bf16 matmul GFLOP/s, free disk. Keeps the "
      "thread count it measured fastest on a quiet machine and the fp32/bf16 speeds precision.mode = \"auto\" "
      "decides from, with their evidence, which frugal train and tune follow (--no-save: measure only).");
  cmd->add_flag("--json", args->json, "print the facts as JSON");
  cmd->add_option("--seconds", args->seconds, "time budget per measurement")
      ->check(in_range(0.05, 10.0))
      ->capture_default_str();
  cmd->add_flag("--no-save", args->no_save,
                "measure only: keep neither the thread choice (run.threads = 0) nor the precision speeds "
                "(precision.mode = \"auto\") that frugal train follows");
  cmd->callback([args, run] { *run = [args] { return run_doctor_cmd(*args); }; });
}

}  // namespace frugal::cli
