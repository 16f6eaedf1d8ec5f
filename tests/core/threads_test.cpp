// The thread plan: run.threads = 0 follows the count `frugal doctor` measured fastest, on the CPU
// set it was measured on only; a set count always wins.
#include "frugal/core/threads.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "frugal/tune/doctor.h"
#include "test_util.h"

namespace frugal {
namespace {

// The saved choice is used only on the CPU set it was measured on, and only for run.threads = 0.
TEST(Threads, TheDoctorsChoiceAppliesToAutoOnTheSameCpusOnly) {
  EXPECT_EQ(recommend_threads(10.0, 8.5, 2), 1);  // one thread >= 10% faster
  EXPECT_EQ(recommend_threads(10.0, 9.5, 2), 2);  // within noise: keep the planned count
  save_thread_choice(1);
  ASSERT_TRUE(read_thread_choice().has_value());
  const ThreadPlan plan = apply_thread_plan(0);
  EXPECT_EQ(plan.intra_op, 1);
  EXPECT_NE(plan.reason.find("frugal doctor measured 1 thread(s)"), std::string::npos) << plan.reason;
  EXPECT_EQ(apply_thread_plan(3).intra_op, 3);  // run.threads wins
  EXPECT_EQ(apply_thread_plan(0, /*use_doctor_choice=*/false).reason.find("doctor"), std::string::npos);
  auto j = nlohmann::json::parse(test::read_text(thread_choice_path()));
  j["logical_cpus"] = j["logical_cpus"].get<int>() + 7;  // measured on another CPU set
  test::write_text(thread_choice_path(), j.dump());
  EXPECT_FALSE(read_thread_choice().has_value());
  EXPECT_EQ(apply_thread_plan(0).reason.find("doctor"), std::string::npos);
}

}  // namespace
}  // namespace frugal
