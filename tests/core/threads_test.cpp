// The thread t: run.threads = 0 follows the count `frugal doctor` measured fastest, on the CPU
// set it was measured on only; a set count always wins.
#include "frugal/core/threads.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <map>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "frugal/core/machine_cache.h"
#include "frugal/core/omp_env.h"
#include "frugal/tune/doctor.h"
#include "test_util.h"

namespace frugal::threads_test {
namespace {

// The saved choice is used only on the CPU set it was measured on, and only for run.threads = 0.
TEST(Threads, TheDoctorsChoiceAppliesToAutoOnTheSameCpusOnly) {
  EXPECT_EQ(recommend_threads(10.0, 8.5, 2), 1);  // one thread >= 10% faster
  EXPECT_EQ(recommend_threads(10.0, 9.5, 2), 2);  // within noise: keep the planned count
  save_thread_choice(1, "2 thread(s) 10.0 ms/step, 1 thread 8.0 ms/step");
  ASSERT_TRUE(read_thread_choice().has_value());
  const ThreadSettings t = apply_thread_settings(0);
  EXPECT_EQ(t.intra_op, 1);
  EXPECT_NE(t.reason.find("auto: 1 thread(s), kept by frugal doctor on "), std::string::npos) << t.reason;
  EXPECT_NE(t.reason.find("1 thread 8.0 ms/step"), std::string::npos) << t.reason;  // with its evidence
  EXPECT_EQ(apply_thread_settings(3).intra_op, 3);                                  // run.threads wins
  EXPECT_EQ(apply_thread_settings(0, /*use_doctor_choice=*/false).reason.find("doctor"), std::string::npos);
  auto j = nlohmann::json::parse(test::read_text(thread_choice_path()));
  j["machine"]["logical_cpus"] = j["machine"]["logical_cpus"].get<int>() + 7;  // measured on another CPU set
  test::write_text(thread_choice_path(), j.dump());
  EXPECT_FALSE(read_thread_choice().has_value());
  EXPECT_EQ(apply_thread_settings(0).reason.find("doctor"), std::string::npos);
  // A choice kept before the evidence was (no "machine"): not trusted, the default setting.
  test::write_text(thread_choice_path(), R"({"threads": 1, "physical_cores": 1, "logical_cpus": 1})");
  EXPECT_FALSE(read_thread_choice().has_value());
}

// The doctor keeps no thread choice measured beside a busy neighbour: the meter sees the CPU time
// other processes take (here: one busy child per usable CPU, so nearly all of it).
TEST(Threads, TheLoadMeterSeesOtherProcessesBusyOnTheCpus) {
  std::vector<pid_t> children;
  for (int i = 0; i < usable_cpu_count(); ++i) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
      volatile uint64_t x = 0;
      while (std::chrono::steady_clock::now() < end) x = x + 1;
      ::_exit(0);
    }
    children.push_back(pid);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const OtherLoadMeter meter;
  std::this_thread::sleep_for(std::chrono::milliseconds(600));
  const double busy = meter.fraction();
  for (pid_t pid : children) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
  }
  EXPECT_GT(busy, 0.5) << "the busy children were not seen";
  EXPECT_LE(busy, 1.0);
}

// A process alone on its machine keeps OpenMP's spinning workers (faster, docs/levers.md); one of
// several ranks on the same machine gets passive workers; a policy the user set is never changed.
TEST(Threads, OpenMpWorkersArePassiveOnlyWhereRanksShareTheMachine) {
  auto policy = [](std::map<std::string, std::string> env) {
    return openmp_wait_policy_for([&](const char* name) -> const char* {
      auto it = env.find(name);
      return it == env.end() ? nullptr : it->second.c_str();
    });
  };
  EXPECT_EQ(policy({}), "");
  EXPECT_EQ(policy({{"WORLD_SIZE", "1"}, {"RANK", "0"}}), "");
  EXPECT_EQ(policy({{"WORLD_SIZE", "2"}, {"RANK", "1"}}), "PASSIVE");
  EXPECT_EQ(policy({{"WORLD_SIZE", "8"}, {"LOCAL_WORLD_SIZE", "1"}}), "");  // one rank per node
  EXPECT_EQ(policy({{"WORLD_SIZE", "8"}, {"LOCAL_WORLD_SIZE", "4"}}), "PASSIVE");
  EXPECT_EQ(policy({{"SLURM_NTASKS_PER_NODE", "2(x3)"}}), "PASSIVE");
  EXPECT_EQ(policy({{"OMPI_COMM_WORLD_LOCAL_SIZE", "3"}}), "PASSIVE");
  EXPECT_EQ(policy({{"WORLD_SIZE", "two"}}), "");
  EXPECT_EQ(policy({{"WORLD_SIZE", "2"}, {"OMP_WAIT_POLICY", "ACTIVE"}}), "");
}

}  // namespace
}  // namespace frugal::threads_test
