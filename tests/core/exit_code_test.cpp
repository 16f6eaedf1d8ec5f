// The one exit-code table, and the two error channels (user input vs a bug in frugal).
#include "frugal/core/exit_code.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>

#include "frugal/core/errors.h"
#include "frugal/data/shard.h"
#include "test_util.h"

namespace frugal::exit_code_test {
namespace {

TEST(ExitCode, ErrorsMapToTheDocumentedCodes) {
  EXPECT_EQ(exit_code_for(ConfigError("x")), ExitCode::kBadInput);
  EXPECT_EQ(exit_code_for(DataError("x")), ExitCode::kBadInput);
  EXPECT_EQ(exit_code_for(GuardStop("x")), ExitCode::kGuardStop);
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
}

// A full disk is said as such, with what to free and the command that continues.
TEST(ExitCode, AFullDiskGetsAdviceOtherErrorsDoNot) {
  const std::string advice = error_advice(std::string("cannot write runs/x/metrics.jsonl: ") + std::strerror(ENOSPC));
  EXPECT_NE(advice.find("the disk is full"), std::string::npos) << advice;
  EXPECT_NE(advice.find("--resume auto"), std::string::npos) << advice;
  EXPECT_EQ(error_advice(std::string("cannot write x: ") + std::strerror(EACCES)), "");
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
