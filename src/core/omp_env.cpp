// See omp_env.h.
#include "frugal/core/omp_env.h"

#include <unistd.h>

#include <cstdlib>

namespace frugal {

void ensure_passive_openmp(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") || std::getenv("FRUGAL_NO_REEXEC")) return;
  ::setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
  ::setenv("FRUGAL_NO_REEXEC", "1", 1);  // never loop, whatever happens next
  ::execv("/proc/self/exe", argv);
  // exec failed (no /proc?): carry on with the default policy.
}

}  // namespace frugal
