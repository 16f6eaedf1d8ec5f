// Rank, world and master address from the variables torchrun, Slurm and Open MPI set.
#include "frugal/dist/env.h"

#include <gtest/gtest.h>

#include "frugal/core/errors.h"

namespace frugal::dist::env_test {
namespace {

TEST(DistEnv, NoLauncherVariablesIsASingleProcess) {
  DistEnv d = dist_env_from({{"HOME", "/root"}});
  EXPECT_FALSE(d.distributed());
  EXPECT_EQ(d.rank, 0);
  EXPECT_EQ(d.world_size, 1);
  EXPECT_EQ(d.launcher, "none");
}

TEST(DistEnv, ReadsTorchrunVariables) {
  DistEnv d = dist_env_from({{"RANK", "3"},
                             {"WORLD_SIZE", "8"},
                             {"LOCAL_RANK", "1"},
                             {"LOCAL_WORLD_SIZE", "2"},
                             {"MASTER_ADDR", "10.0.0.5"},
                             {"MASTER_PORT", "29611"}});
  EXPECT_TRUE(d.distributed());
  EXPECT_EQ(d.launcher, "torchrun");
  EXPECT_EQ(d.rank, 3);
  EXPECT_EQ(d.world_size, 8);
  EXPECT_EQ(d.local_rank, 1);
  EXPECT_EQ(d.local_world_size, 2);
  EXPECT_EQ(d.master_addr, "10.0.0.5");
  EXPECT_EQ(d.master_port, 29611);
}

TEST(DistEnv, TorchrunVariablesWinOverSlurmOnes) {
  // torchrun started inside a Slurm allocation: its own variables describe the processes.
  DistEnv d = dist_env_from(
      {{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}});
  EXPECT_EQ(d.launcher, "torchrun");
  EXPECT_EQ(d.world_size, 2);
}

TEST(DistEnv, ReadsSlurmVariablesWithTheLaunchNodeAsMaster) {
  DistEnv d = dist_env_from({{"SLURM_PROCID", "5"},
                             {"SLURM_NTASKS", "8"},
                             {"SLURM_LOCALID", "1"},
                             {"SLURM_NTASKS_PER_NODE", "4(x2)"},
                             {"SLURM_LAUNCH_NODE_IPADDR", "10.1.2.3"}});
  EXPECT_EQ(d.launcher, "slurm");
  EXPECT_EQ(d.rank, 5);
  EXPECT_EQ(d.world_size, 8);
  EXPECT_EQ(d.local_rank, 1);
  EXPECT_EQ(d.local_world_size, 4);
  EXPECT_EQ(d.master_addr, "10.1.2.3");
  EXPECT_EQ(d.master_port, 29500);
  // MASTER_ADDR, as the emitted sbatch script exports it, wins.
  EXPECT_EQ(dist_env_from({{"SLURM_PROCID", "0"},
                           {"SLURM_NTASKS", "2"},
                           {"MASTER_ADDR", "node01"},
                           {"SLURM_LAUNCH_NODE_IPADDR", "10.1.2.3"},
                           {"MASTER_PORT", "30000"}})
                .master_addr,
            "node01");
}

TEST(DistEnv, SingleTaskSlurmJobIsASingleProcess) {
  EXPECT_FALSE(dist_env_from({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}}).distributed());
}

TEST(DistEnv, ReadsOpenMpiVariables) {
  DistEnv d = dist_env_from({{"OMPI_COMM_WORLD_RANK", "1"},
                             {"OMPI_COMM_WORLD_SIZE", "2"},
                             {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                             {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}});
  EXPECT_EQ(d.launcher, "openmpi");
  EXPECT_EQ(d.rank, 1);
  EXPECT_EQ(d.world_size, 2);
  EXPECT_EQ(d.master_addr, "127.0.0.1");  // one node: the loopback
}

TEST(DistEnv, MalformedOrInconsistentVariablesNameTheVariable) {
  auto message = [](const std::map<std::string, std::string>& env) {
    try {
      dist_env_from(env);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message({{"RANK", "x"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}}).find("RANK=x"), std::string::npos);
  EXPECT_NE(message({{"RANK", "2"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}}).find("outside the world"),
            std::string::npos);
  EXPECT_NE(message({{"RANK", "0"}}).find("WORLD_SIZE"), std::string::npos);
  EXPECT_NE(message({{"RANK", "0"}, {"WORLD_SIZE", "2"}}).find("MASTER_ADDR"), std::string::npos);
  EXPECT_NE(
      message({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "70000"}}).find("MASTER_PORT"),
      std::string::npos);
  EXPECT_NE(message({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "4"}}).find("MASTER_ADDR"), std::string::npos);
  EXPECT_NE(message({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "4"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}})
                .find("MASTER_ADDR"),
            std::string::npos);
}

}  // namespace
}  // namespace frugal::dist::env_test
