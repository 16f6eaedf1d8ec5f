// The one exit-code table, and the two error channels (user input vs a bug in frugal).
#include "frugal/core/exit_code.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>

#include "frugal/core/errors.h"
#include "frugal/data/shard.h"
#include "frugal/monitor/metrics_writer.h"
#include "test_util.h"

namespace frugal::exit_code_test {
namespace {

TEST(ExitCode, ErrorsMapToTheDocumentedCodes) {
  EXPECT_EQ(exit_code_for(ConfigError("x")), ExitCode::kBadInput);
  EXPECT_EQ(exit_code_for(DataError("x")), ExitCode::kBadInput);
  EXPECT_EQ(exit_code_for(GuardStop("x")), ExitCode::kGuardStop);
  EXPECT_EQ(exit_code_for(Interrupted("x")), ExitCode::kPreempted);  // tune or plan stopped by a signal
  EXPECT_EQ(exit_code_for(IoError("x")), ExitCode::kFailure);
  EXPECT_EQ(exit_code_for(CheckpointError("x")), ExitCode::kFailure);
  EXPECT_EQ(exit_code_for(InternalError("x")), ExitCode::kFailure);
  EXPECT_EQ(exit_code_for(std::runtime_error("x")), ExitCode::kFailure);
  EXPECT_EQ(exit_status(ExitCode::kPreempted), 75);
  EXPECT_EQ(exit_status(ExitCode::kBadInput), 2);
  EXPECT_EQ(exit_status(ExitCode::kGuardStop), 3);
}

// One exit code, one word for it: every error that exits 2 is printed as "bad input: ...".
TEST(ExitCode, EveryExit2IsLabelledBadInput) {
  EXPECT_STREQ(error_label(ConfigError("x")), "bad input");
  EXPECT_STREQ(error_label(DataError("x")), "bad input");
  EXPECT_STREQ(error_label(IoError("x")), "error");
  EXPECT_STREQ(error_label(GuardStop("x")), "stopped");
  EXPECT_STREQ(error_label(Interrupted("x")), "stopped");
}

// A full disk (or quota) is no bug: the user frees space. The errno travels with the IoError from
// the call that failed (here a write to /dev/full, which always answers ENOSPC); it used to exit 1.
TEST(ExitCode, AFullDiskIsBadInputNotABug) {
  try {
    MetricsWriter full("/dev/full", /*append=*/false);
    StepMetrics m;
    m.step = 1;
    m.logged = true;
    Control control;
    full.on_step_end(m, control);
    FAIL() << "no throw";
  } catch (const IoError& e) {
    EXPECT_EQ(e.error_number(), ENOSPC) << e.what();
    EXPECT_EQ(exit_code_for(e), ExitCode::kBadInput) << e.what();
    EXPECT_STREQ(error_label(e), "bad input");
  }
  EXPECT_EQ(exit_code_for(IoError("x", EDQUOT)), ExitCode::kBadInput);
  EXPECT_EQ(exit_code_for(IoError("x", EIO)), ExitCode::kFailure);
  EXPECT_EQ(exit_code_for(IoError(std::string("x: ") + std::strerror(ENOSPC))), ExitCode::kFailure);  // no errno
}

// A full disk is said as such, with what to free and how this command continues: what the command
// set (frugal train: its run's own resume command), else to run it again.
TEST(ExitCode, AFullDiskGetsAdviceOtherErrorsDoNot) {
  std::string advice = error_advice(IoError("cannot append to runs/x/metrics.jsonl: No space left on device", ENOSPC));
  EXPECT_NE(advice.find("the disk is full"), std::string::npos) << advice;
  EXPECT_NE(advice.find("then run the command again"), std::string::npos) << advice;
  set_how_to_continue("continue the run with `frugal train --set run.out_dir=/big --set run.name=r --resume auto`");
  advice = error_advice(IoError("x", EDQUOT));
  set_how_to_continue("");
  EXPECT_NE(advice.find("the disk quota is used up"), std::string::npos) << advice;
  EXPECT_NE(advice.find("then continue the run with `frugal train --set run.out_dir=/big --set run.name=r --resume "
                        "auto`"),
            std::string::npos)
      << advice;
  EXPECT_EQ(error_advice(IoError(std::string("cannot write x: ") + std::strerror(EACCES), EACCES)), "");
  EXPECT_EQ(error_advice(ConfigError("x")), "");
}

TEST(ExitCode, StopKindsMapToTheDocumentedCodes) {
  EXPECT_EQ(exit_code_for(StopKind::kPreempted), ExitCode::kPreempted);
  EXPECT_EQ(exit_code_for(StopKind::kGuard), ExitCode::kGuardStop);
  EXPECT_EQ(exit_code_for(StopKind::kBudget), ExitCode::kGuardStop);
  for (StopKind k : {StopKind::kCompleted, StopKind::kCallback, StopKind::kEarlyStop, StopKind::kMaxMinutes})
    EXPECT_EQ(exit_code_for(k), ExitCode::kDone) << stop_kind_name(k);
}

TEST(Errors, AnInternalAssertIsABugNotBadInput) {
  try {
    FRUGAL_INTERNAL_ASSERT(1 + 1 == 3, "arithmetic");
    FAIL() << "no throw";
  } catch (const InternalError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("a bug in frugal"), std::string::npos) << what;
    EXPECT_NE(what.find("exit_code_test.cpp"), std::string::npos) << what;
    EXPECT_NE(what.find("1 + 1 == 3"), std::string::npos) << what;
  }
  EXPECT_THROW(FRUGAL_CHECK(false, ConfigError, "bad key"), ConfigError);
  EXPECT_NO_THROW(FRUGAL_CHECK(true, ConfigError, "fine"));
}

TEST(Errors, MisusingAShardWriterIsAnInternalError) {
  test::TempDir dir;
  ShardWriter tokens(dir.file("t.shard"), ShardKind::kTokens, ShardDtype::kUint16);
  EXPECT_THROW(tokens.add_record("abc"), InternalError);
  tokens.finish();
  EXPECT_THROW(tokens.finish(), InternalError);
  EXPECT_THROW(ShardWriter(dir.file("r.shard"), ShardKind::kRecords, ShardDtype::kUint16), InternalError);
}

TEST(ExitCode, TheCliReturnsTheTablesCodes) {
  EXPECT_EQ(test::run_frugal("train --set train.steps=0").exit_code, exit_status(ExitCode::kBadInput));
  EXPECT_EQ(test::run_frugal("--no-such-option").exit_code, exit_status(ExitCode::kBadInput));
}

}  // namespace
}  // namespace frugal::exit_code_test
