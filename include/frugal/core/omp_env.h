// OpenMP's wait policy must be chosen before libgomp starts, i.e. before main() of any program
// linked against LibTorch. By default idle OpenMP workers spin for a while after each parallel
// region; on a machine with few cores they then compete with OpenBLAS's own threads during the
// next matmul. Measured on a 2-vCPU VM (docs/levers.md, "threads"): the demo GPT trained at
// ~6.3k tok/s with 2 threads and spinning workers, ~14k tok/s with passive workers, ~11k with 1
// thread.
#pragma once

namespace frugal {

// If OMP_WAIT_POLICY is unset, sets it to PASSIVE and re-executes the program (argv as given) so
// that libgomp reads it at start-up. Returns only when nothing needs to change (or exec failed).
// Call first thing in main(). FRUGAL_NO_REEXEC=1 disables it.
void ensure_passive_openmp(char** argv);

}  // namespace frugal
