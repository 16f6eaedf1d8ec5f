// See omp_env.h.
#include "frugal/core/omp_env.h"

#include <unistd.h>

#include <cstdlib>

namespace frugal {
namespace {

// The variable's leading count (SLURM_NTASKS_PER_NODE may read "4(x2)"), 0 when it is unset or
// does not start with a number.
long count_of(const std::function<const char*(const char*)>& getenv, const char* name) {
  const char* v = getenv(name);
  if (!v || !*v) return 0;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  return end == v ? 0 : n;
}

}  // namespace

std::string openmp_wait_policy_for(const std::function<const char*(const char*)>& getenv) {
  if (getenv("OMP_WAIT_POLICY")) return "";
  long local = count_of(getenv, "LOCAL_WORLD_SIZE");
  if (local == 0) local = count_of(getenv, "WORLD_SIZE");
  for (const char* name : {"SLURM_NTASKS_PER_NODE", "OMPI_COMM_WORLD_LOCAL_SIZE"})
    if (local == 0) local = count_of(getenv, name);
  return local > 1 ? "PASSIVE" : "";
}

void choose_openmp_wait_policy(char** argv) {
  if (std::getenv("FRUGAL_NO_REEXEC")) return;
  const std::string policy = openmp_wait_policy_for([](const char* name) { return std::getenv(name); });
  if (policy.empty()) return;
  ::setenv("OMP_WAIT_POLICY", policy.c_str(), 1);
  ::setenv("FRUGAL_NO_REEXEC", "1", 1);  // never loop, whatever happens next
  ::execv("/proc/self/exe", argv);
  // exec failed (no /proc?): carry on with the default policy.
}

}  // namespace frugal
