// The run setup: batch arithmetic resolved once, the precision a resume continues in, and the
// global batch an elastic resume keeps on another number of processes.
#include "frugal/train/run_setup.h"

#include <gtest/gtest.h>

#include "frugal/core/errors.h"
#include "frugal/train/task.h"
#include "test_util.h"

namespace frugal::run_setup_test {
namespace {

RunSetup setup_for(int64_t micro, int64_t accum, int64_t world) {
  Config c = test::tiny_config();
  c.data.micro_batch = micro;
  c.train.accum = accum;
  c.monitor.grad_noise = true;
  TaskHooks hooks;
  hooks.tokens_per_sample = 16;
  return set_up_run(c, hooks, world, PrecisionPolicy(PrecisionMode::kFp32, c10::Device(c10::kCPU)));
}

TEST(RunSetup, TheGlobalBatchCountsEveryProcess) {
  const RunSetup p = setup_for(8, 2, 2);
  EXPECT_EQ(p.accum, 2);
  EXPECT_EQ(p.global_batch, 32);
  EXPECT_EQ(p.items_per_step, 32 * 16);
  EXPECT_TRUE(p.grad_noise);
  EXPECT_FALSE(p.loss_scaling);
}

TEST(RunSetup, AResumeOnAnotherWorldSizeKeepsTheGlobalBatch) {
  RunSetup one = setup_for(8, 2, 1);  // a 2-process run's checkpoint (global 32), resumed by 1 process
  continue_global_batch(one, 32, 2);
  EXPECT_EQ(one.accum, 4);
  EXPECT_EQ(one.global_batch, 32);
  EXPECT_EQ(one.items_per_step, 32 * 16);
  RunSetup four = setup_for(8, 2, 4);
  continue_global_batch(four, 32, 2);
  EXPECT_EQ(four.accum, 1);
  EXPECT_FALSE(four.grad_noise);  // one micro-batch per step: nothing to estimate the noise from
}

TEST(RunSetup, AWorldSizeThatCannotSplitTheGlobalBatchIsRefusedWithTheOnesThatCan) {
  RunSetup three = setup_for(8, 2, 3);
  try {
    continue_global_batch(three, 32, 2);
    FAIL() << "3 processes of micro-batch 8 accepted a global batch of 32";
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("resume with 1, 2, 4 process(es)"), std::string::npos) << what;
    EXPECT_NE(what.find("global batch of 32"), std::string::npos) << what;
  }
}

TEST(RunSetup, AResumeContinuesInTheCheckpointsPrecisionWhereTheConfigAllowsIt) {
  std::string warning;
  EXPECT_EQ(precision_to_continue(PrecisionMode::kAuto, "bf16", &warning), PrecisionMode::kBf16);
  EXPECT_EQ(precision_to_continue(PrecisionMode::kFp16, "bf16", &warning), PrecisionMode::kBf16);  // fell back
  EXPECT_TRUE(warning.empty());
  EXPECT_EQ(precision_to_continue(PrecisionMode::kFp32, "bf16", &warning), PrecisionMode::kFp32);
  EXPECT_NE(warning.find("will not match"), std::string::npos) << warning;
  warning.clear();
  EXPECT_EQ(precision_to_continue(PrecisionMode::kBf16, "", &warning), PrecisionMode::kBf16);  // a fresh run
  EXPECT_TRUE(warning.empty());
}

}  // namespace
}  // namespace frugal::run_setup_test
