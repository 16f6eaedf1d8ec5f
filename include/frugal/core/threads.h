// Deliberate thread settings. LibTorch 1.13 defaults to hardware_concurrency()/2 intra-op threads
// (1 on a 2-vCPU VM) and OpenBLAS keeps its own pool beside OpenMP's, so left alone a run is
// either under-threaded or oversubscribed. frugal sets intra-op, inter-op and BLAS threads
// itself and says what it chose.
#pragma once

#include <optional>
#include <string>

namespace frugal {

struct ThreadSettings {
  int intra_op = 1;        // at::set_num_threads
  int blas = 1;            // openblas_set_num_threads (when OpenBLAS is the BLAS)
  int physical_cores = 1;  // distinct (package, core) pairs in /sys
  int logical_cpus = 1;    // CPUs this process may run on
  std::string reason;      // one line for the log
};

int physical_core_count();
int usable_cpu_count();

// The thread count `frugal doctor` measured fastest on this machine, kept with its evidence in
// thread_choice_path() (machine_cache.h: machine_cache_path("threads.json")).
struct MeasuredThreads {
  int threads = 0;
  int physical_cores = 0, logical_cpus = 0;
  std::string measured_utc;  // "2026-11-24T18:02:11Z"
  std::string evidence;      // what was measured, one line for the banner
};
std::string thread_choice_path();
// The kept choice when it exists and was measured on this machine (machine_cache.h).
std::optional<MeasuredThreads> read_thread_choice();
// Keeps (atomically) `threads` for this machine, with `evidence` (one line).
void save_thread_choice(int threads, const std::string& evidence);

// Chooses and applies thread counts. requested > 0: that many. requested <= 0 (auto): the count
// `frugal doctor` measured fastest here (read_thread_choice) when `use_doctor_choice` and there
// is one, else the physical cores, capped by the CPUs this process may use.
ThreadSettings apply_thread_settings(int requested, bool use_doctor_choice = true);

// BLAS facts: the shared object that provides sgemm_ (resolved through Debian alternatives), and
// whether it is a tuned BLAS (OpenBLAS, BLIS, MKL) rather than the reference one.
std::string blas_library();
bool blas_is_optimized();
// OpenBLAS's own pool size, or -1 when the BLAS is not OpenBLAS.
int blas_threads();
bool set_blas_threads(int n);

}  // namespace frugal
