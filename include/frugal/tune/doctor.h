// `frugal doctor`: what this machine and this LibTorch build can do, measured. Reports versions,
// CPU features (AVX-512 BF16), CUDA, thread settings, the BLAS in use (and a loud warning when it
// is the slow reference BLAS), fp32 and bf16 matmul GFLOP/s, a thread-count comparison that
// exposes oversubscription, and free disk.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace frugal {

struct DoctorOptions {
  double seconds_per_probe = 0.3;  // time budget of each measurement
  std::string disk_path = ".";     // where free space is reported
  // keep the measured thread count (threads.h) and fp32/bf16 speeds (precision.h: cpu_auto_precision)
  // for frugal train, tune and the next doctor
  bool save_thread_choice = true;
};

// The thread count to use from medians of step times: 1 when one thread is at least 10% faster
// than the planned count (a shared or busy machine), else the planned count.
int recommend_threads(double planned_step_s, double one_thread_step_s, int planned_threads);

struct DoctorReport {
  nlohmann::ordered_json facts;
  std::vector<std::string> warnings;  // each says what is wrong and the fix
};

DoctorReport run_doctor(const DoctorOptions& options);

}  // namespace frugal
