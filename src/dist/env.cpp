// Launcher environment parsing; see env.h.
#include "frugal/dist/env.h"

#include <fmt/format.h>

#include <optional>

#include "frugal/core/errors.h"

namespace frugal::dist {
namespace {

using Env = std::map<std::string, std::string>;

std::optional<std::string> get(const Env& env, const std::string& name) {
  auto it = env.find(name);
  if (it == env.end() || it->second.empty()) return std::nullopt;
  return it->second;
}

int64_t integer(const Env& env, const std::string& name, int64_t fallback, int64_t min) {
  auto v = get(env, name);
  if (!v) return fallback;
  size_t used = 0;
  int64_t x = 0;
  try {
    x = std::stoll(*v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != v->size() || x < min)
    throw ConfigError(fmt::format("environment variable {}={} is not an integer >= {}", name, *v, min));
  return x;
}

// SLURM_NTASKS_PER_NODE may read "4" or "4(x2)"; only the leading count matters.
int64_t leading_count(const std::optional<std::string>& v, int64_t fallback) {
  if (!v) return fallback;
  size_t end = v->find_first_not_of("0123456789");
  const std::string digits = v->substr(0, end);
  return digits.empty() ? fallback : std::stoll(digits);
}

}  // namespace

std::string DistEnv::describe() const {
  return fmt::format("rank {} of {} (local {} of {}) via {}, master {}:{}", rank, world_size, local_rank,
                     local_world_size, launcher, master_addr, master_port);
}

DistEnv dist_env_from(const Env& env) {
  DistEnv d;
  if (get(env, "RANK") || get(env, "WORLD_SIZE")) {
    if (!get(env, "RANK") || !get(env, "WORLD_SIZE"))
      throw ConfigError("RANK and WORLD_SIZE must be set together (torchrun sets both)");
    d.launcher = "torchrun";
    d.rank = integer(env, "RANK", 0, 0);
    d.world_size = integer(env, "WORLD_SIZE", 1, 1);
    d.local_rank = integer(env, "LOCAL_RANK", d.rank, 0);
    d.local_world_size = integer(env, "LOCAL_WORLD_SIZE", d.world_size, 1);
    if (d.world_size > 1 && !get(env, "MASTER_ADDR"))
      throw ConfigError("WORLD_SIZE > 1 but MASTER_ADDR is not set; set it to the host of rank 0");
  } else if (get(env, "SLURM_PROCID") && get(env, "SLURM_NTASKS")) {
    d.launcher = "slurm";
    d.rank = integer(env, "SLURM_PROCID", 0, 0);
    d.world_size = integer(env, "SLURM_NTASKS", 1, 1);
    d.local_rank = integer(env, "SLURM_LOCALID", 0, 0);
    d.local_world_size = leading_count(get(env, "SLURM_NTASKS_PER_NODE"), d.world_size);
    if (d.world_size > 1 && !get(env, "MASTER_ADDR") && !get(env, "SLURM_LAUNCH_NODE_IPADDR"))
      throw ConfigError(
          "SLURM_NTASKS > 1 but neither MASTER_ADDR nor SLURM_LAUNCH_NODE_IPADDR is set; export "
          "MASTER_ADDR=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -n1) in the batch script");
    if (auto launch_node = get(env, "SLURM_LAUNCH_NODE_IPADDR")) d.master_addr = *launch_node;
  } else if (get(env, "OMPI_COMM_WORLD_RANK") && get(env, "OMPI_COMM_WORLD_SIZE")) {
    d.launcher = "openmpi";
    d.rank = integer(env, "OMPI_COMM_WORLD_RANK", 0, 0);
    d.world_size = integer(env, "OMPI_COMM_WORLD_SIZE", 1, 1);
    d.local_rank = integer(env, "OMPI_COMM_WORLD_LOCAL_RANK", 0, 0);
    d.local_world_size = integer(env, "OMPI_COMM_WORLD_LOCAL_SIZE", d.world_size, 1);
    if (d.world_size > 1 && d.local_world_size < d.world_size && !get(env, "MASTER_ADDR"))
      throw ConfigError("mpirun spans several nodes but MASTER_ADDR is not set; pass -x MASTER_ADDR=<host of rank 0>");
  } else {
    return d;
  }
  if (auto a = get(env, "MASTER_ADDR")) d.master_addr = *a;
  d.master_port = integer(env, "MASTER_PORT", 29500, 1);
  if (d.master_port > 65535)
    throw ConfigError(fmt::format("MASTER_PORT={} is not a TCP port (1..65535)", d.master_port));
  if (d.rank >= d.world_size)
    throw ConfigError(fmt::format("{} rank {} is outside the world of {} processes", d.launcher, d.rank, d.world_size));
  if (d.local_rank >= d.local_world_size) d.local_world_size = d.local_rank + 1;
  return d;
}

}  // namespace frugal::dist
