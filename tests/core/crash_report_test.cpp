// A process that dies of a bug says so, with a backtrace, and still dies of the same signal.
#include <gtest/gtest.h>

#include <csignal>
#include <cstdio>

#include "frugal/core/crash_report.h"

namespace frugal::crash_report_test {

// External linkage, so the executable exports its name for the backtrace.
[[gnu::noinline]] void crash_in_a_named_function(int sig) {
  install_crash_report("crash_report_test");
  ::raise(sig);
  std::fputs("not reached\n", stderr);  // keeps raise() out of tail position: this frame shows
}

namespace {

TEST(CrashReport, AFatalSignalPrintsWhatHappenedAndABacktraceThenKillsWithTheSameSignal) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  // The report names the program, the signal and the frames (this function among them: -rdynamic).
  EXPECT_EXIT(crash_in_a_named_function(SIGSEGV), ::testing::KilledBySignal(SIGSEGV),
              "crash_report_test: killed by SIGSEGV.*backtrace:.*crash_in_a_named_function");
  EXPECT_EXIT(crash_in_a_named_function(SIGBUS), ::testing::KilledBySignal(SIGBUS), "killed by SIGBUS");
}

}  // namespace
}  // namespace frugal::crash_report_test
