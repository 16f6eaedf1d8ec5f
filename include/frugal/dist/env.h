// Who this process is in a multi-process run, read from the environment the usual launchers set:
//
//   torchrun / frugal launch   RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT
//   Slurm (srun)               SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NTASKS_PER_NODE;
//                              MASTER_ADDR (else SLURM_LAUNCH_NODE_IPADDR), MASTER_PORT
//   Open MPI (mpirun)          OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK,
//                              OMPI_COMM_WORLD_LOCAL_SIZE; MASTER_ADDR (127.0.0.1 when every rank
//                              is on one node), MASTER_PORT
//
// The first family present wins, in that order. MASTER_PORT defaults to 29500 (torchrun's). No
// variables at all, or a world of 1, is a single-process run. docs/distributed.md.
#pragma once

#include <cstdint>
#include <map>
#include <string>

namespace frugal::dist {

struct DistEnv {
  int64_t rank = 0;
  int64_t world_size = 1;
  int64_t local_rank = 0;                 // index among the processes on this node (picks cuda:N)
  int64_t local_world_size = 1;           // processes on this node (shares the cores among them)
  std::string master_addr = "127.0.0.1";  // host of rank 0, where the TCPStore listens
  int64_t master_port = 29500;
  std::string launcher = "none";  // "none", "torchrun", "slurm" or "openmpi"

  bool distributed() const { return world_size > 1; }
  std::string describe() const;  // "rank 1 of 4 (local 1 of 2) via slurm, master host:port"
};

// Parses `env` (process_environment() or a test's map). Throws ConfigError naming the variable
// when a value is malformed or inconsistent (rank outside the world, a missing master address).
DistEnv dist_env_from(const std::map<std::string, std::string>& env);

}  // namespace frugal::dist
