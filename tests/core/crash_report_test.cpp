// A process that dies of a bug says so, with a backtrace, and still dies of the same signal.
#include <gtest/gtest.h>

#include <csignal>
#include <cstdint>
#include <cstdio>

#include "frugal/core/crash_report.h"

namespace frugal::crash_report_test {

// External linkage, so the executable exports its name for the backtrace.
[[gnu::noinline]] void crash_in_a_named_function(int sig) {
  install_crash_report("crash_report_test");
  ::raise(sig);
  std::fputs("not reached\n", stderr);  // keeps raise() out of tail position: this frame shows
}

[[gnu::noinline]] void call_a_bad_pointer(void (*volatile f)()) {
  CrashPhase phase("checkpoint");
  install_crash_report("crash_report_test");
  f();
  std::fputs("not reached\n", stderr);
}

namespace {

TEST(CrashReport, AFatalSignalPrintsWhatHappenedAndABacktraceThenKillsWithTheSameSignal) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  // The report names the program, the signal and the frames (this function among them: -rdynamic).
  EXPECT_EXIT(crash_in_a_named_function(SIGSEGV), ::testing::KilledBySignal(SIGSEGV),
              "crash_report_test: killed by SIGSEGV.*phase: \\(none named\\) \\| main thread \\| fault address"
              ".*backtrace:.*crash_in_a_named_function");
  EXPECT_EXIT(crash_in_a_named_function(SIGBUS), ::testing::KilledBySignal(SIGBUS), "killed by SIGBUS");
}

// A call through a bad pointer (a destroyed object's vtable, say) leaves the unwinder nothing to
// start from; the report still names the phase, the faulting address and the caller (the return
// address on top of the stack), and the backtrace continues from that caller.
TEST(CrashReport, ACallThroughABadPointerNamesThePhaseTheAddressAndTheCaller) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(call_a_bad_pointer(reinterpret_cast<void (*)()>(uintptr_t{0x10})), ::testing::KilledBySignal(SIGSEGV),
              "phase: checkpoint \\| main thread \\| fault address 0x10\n"
              "instruction, then the return address on top of the stack:\n.*\n.*call_a_bad_pointer"
              ".*backtrace:\n.*call_a_bad_pointer");
}

TEST(CrashReport, PhasesNestAndRestore) {
  EXPECT_EQ(CrashPhase::current().load(), nullptr);
  {
    CrashPhase outer("step");
    {
      CrashPhase inner("checkpoint");
      EXPECT_STREQ(CrashPhase::current().load(), "checkpoint");
    }
    EXPECT_STREQ(CrashPhase::current().load(), "step");
  }
  EXPECT_EQ(CrashPhase::current().load(), nullptr);
}

}  // namespace
}  // namespace frugal::crash_report_test
