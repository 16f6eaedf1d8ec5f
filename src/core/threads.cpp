// Thread planning; see threads.h.
#include "frugal/core/threads.h"

#include <dlfcn.h>
#include <sched.h>

#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include <climits>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "frugal/core/atomic_file.h"
#include "frugal/core/machine_cache.h"

namespace frugal {

int usable_cpu_count() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return CPU_COUNT(&set);
  return static_cast<int>(std::thread::hardware_concurrency());
}

int physical_core_count() {
  std::set<std::pair<int, int>> cores;
  for (int cpu = 0; cpu < 4096; ++cpu) {
    std::string base = fmt::format("/sys/devices/system/cpu/cpu{}/topology/", cpu);
    std::ifstream core(base + "core_id"), pkg(base + "physical_package_id");
    if (!core) {
      if (cpu > 0) break;
      continue;
    }
    int c = 0, p = 0;
    core >> c;
    pkg >> p;
    cores.insert({p, c});
  }
  int n = static_cast<int>(cores.size());
  return n > 0 ? n : usable_cpu_count();
}

std::string blas_library() {
  void* sym = dlsym(RTLD_DEFAULT, "sgemm_");
  Dl_info info{};
  if (!sym || !dladdr(sym, &info) || !info.dli_fname) return "";
  char resolved[PATH_MAX];
  std::string lib = realpath(info.dli_fname, resolved) ? resolved : info.dli_fname;
  // The official x86 wheels link MKL statically into libtorch_cpu: sgemm_ comes from there.
  if (lib.find("libtorch_cpu") != std::string::npos && at::globalContext().hasMKL()) lib += " (MKL, built in)";
  return lib;
}

bool blas_is_optimized() {
  std::string lib = blas_library();
  for (const char* name : {"openblas", "blis", "mkl", "MKL"})
    if (lib.find(name) != std::string::npos) return true;
  return false;
}

namespace {
// OpenBLAS's pool functions, looked up in the BLAS that provides sgemm_ (not necessarily the
// first libopenblas loaded).
void* blas_symbol(const char* name) {
  std::string lib = blas_library();
  if (lib.find("openblas") == std::string::npos) return nullptr;
  void* h = dlopen(lib.c_str(), RTLD_NOW | RTLD_NOLOAD);
  return h ? dlsym(h, name) : nullptr;
}
}  // namespace

int blas_threads() {
  auto fn = reinterpret_cast<int (*)()>(blas_symbol("openblas_get_num_threads"));
  return fn ? fn() : -1;
}

bool set_blas_threads(int n) {
  auto fn = reinterpret_cast<void (*)(int)>(blas_symbol("openblas_set_num_threads"));
  if (!fn) return false;
  fn(n);
  return true;
}

std::string thread_choice_path() { return machine_cache_path("threads.json"); }

std::optional<MeasuredThreads> read_thread_choice() {
  const std::optional<nlohmann::json> j = read_machine_decision("threads.json");
  if (!j) return std::nullopt;  // none, another machine's, or written before it kept its evidence
  MeasuredThreads m;
  m.threads = j->value("threads", 0);
  m.physical_cores = physical_core_count();
  m.logical_cpus = usable_cpu_count();
  m.measured_utc = j->value("measured_utc", "");
  m.evidence = j->value("evidence", "");
  if (m.threads < 1) return std::nullopt;
  return m;
}

void save_thread_choice(int threads, const std::string& evidence) {
  save_machine_decision("threads.json", {{"threads", threads}, {"evidence", evidence}}, "frugal doctor");
}

ThreadSettings apply_thread_settings(int requested, bool use_doctor_choice) {
  ThreadSettings t;
  t.physical_cores = physical_core_count();
  t.logical_cpus = usable_cpu_count();
  const std::optional<MeasuredThreads> measured =
      requested > 0 || !use_doctor_choice ? std::nullopt : read_thread_choice();
  if (requested > 0) {
    t.intra_op = requested;
    t.reason = "run.threads";
  } else if (measured) {
    t.intra_op = std::min(measured->threads, t.logical_cpus);
    t.reason = fmt::format("auto: {} thread(s), kept by frugal doctor on {}{} ({}; run it again to re-measure)",
                           measured->threads, measured->measured_utc,
                           measured->evidence.empty() ? "" : ": " + measured->evidence, thread_choice_path());
  } else {
    t.intra_op = std::max(1, std::min(t.physical_cores, t.logical_cpus));
    t.reason = fmt::format("auto: {} physical core(s), {} usable CPU(s)", t.physical_cores, t.logical_cpus);
  }
  at::set_num_threads(t.intra_op);
  // BLAS calls come from the intra-op thread that runs the op; one BLAS pool of the same size
  // (not a second full-size pool on top of OpenMP's) avoids oversubscription.
  t.blas = t.intra_op;
  if (!set_blas_threads(t.blas)) t.blas = -1;
  static bool interop_set = false;
  if (!interop_set) {
    try {
      at::set_num_interop_threads(1);  // frugal runs no inter-op parallel work
    } catch (const std::exception&) {
      // already started by an earlier parallel op; harmless
    }
    interop_set = true;
  }
  return t;
}

}  // namespace frugal
