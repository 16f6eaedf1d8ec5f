// OpenMP's wait policy must be chosen before libgomp starts, i.e. before main() of any program
// linked against LibTorch. By default idle OpenMP workers spin for a while after each parallel
// region, which keeps them ready for the next one: with the wheel's LibTorch (MKL on OpenMP) and
// the cores to itself, the demo GPT trains 1.2x faster than with passive workers
// (docs/levers.md, "threads"). Where several processes share this machine's cores (ranks of a
// `frugal launch`, torchrun or Slurm job), each process's spinning workers take cores from the
// others, so those processes run with passive workers.
#pragma once

#include <functional>
#include <string>

namespace frugal {

// The OMP_WAIT_POLICY this process should run with, from its environment: "" (keep OpenMP's
// default) unless the launcher variables say other processes of the job share this machine
// (LOCAL_WORLD_SIZE, else WORLD_SIZE, SLURM_NTASKS_PER_NODE or OMPI_COMM_WORLD_LOCAL_SIZE above 1),
// then "PASSIVE". A policy already set in the environment is kept ("").
std::string openmp_wait_policy_for(const std::function<const char*(const char*)>& getenv);

// Sets the policy openmp_wait_policy_for chooses and re-executes the program (argv as given) so
// that libgomp reads it at start-up. Returns only when nothing needs to change (or exec failed).
// Call first thing in main(). FRUGAL_NO_REEXEC=1 disables it.
void choose_openmp_wait_policy(char** argv);

}  // namespace frugal
