// A process that dies of a bug says so, with a backtrace, and still dies of the same signal.
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <csignal>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "frugal/core/crash_report.h"

namespace frugal::crash_report_test {

// External linkage, so the executable exports its name for the backtrace.
[[gnu::noinline]] void crash_in_a_named_function(int sig) {
  install_crash_report("crash_report_test");
  ::raise(sig);
  std::fputs("not reached\n", stderr);  // keeps raise() out of tail position: this frame shows
}

// Recurses until the stack runs out (each frame keeps a buffer the compiler cannot drop).
[[gnu::noinline]] int overflow_the_stack(int depth) {
  if (depth < 0) return 0;  // never: the stack runs out long before
  volatile char frame[1024];
  frame[0] = static_cast<char>(depth);
  const int below = overflow_the_stack(depth + 1);
  asm volatile("" : : "r"(frame) : "memory");  // the frame stays live across the call: no loop
  return below + frame[0];
}

// Reads a page mapped without access (as a host read of a GPU driver's reserved range would).
[[gnu::noinline]] void read_a_page_without_access() {
  install_crash_report("crash_report_test");
  void* page = ::mmap(nullptr, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  std::fprintf(stderr, "page at %p\n", page);
  std::printf("%d\n", *static_cast<volatile int*>(page));
}

[[gnu::noinline]] void call_a_bad_pointer(void (*volatile f)()) {
  CrashPhase outer("finish");
  CrashPhase phase("checkpoint");
  install_crash_report("crash_report_test");
  f();
  std::fputs("not reached\n", stderr);
}

namespace {

// Death tests in the "threadsafe" style (a fresh process runs the test up to the statement), the
// global style flag restored after each.
class CrashReport : public ::testing::Test {
 protected:
  void SetUp() override { style_ = GTEST_FLAG_GET(death_test_style); }
  void TearDown() override { GTEST_FLAG_SET(death_test_style, style_); }

 private:
  std::string style_;
};

TEST_F(CrashReport, AFatalSignalPrintsWhatHappenedAndABacktraceThenKillsWithTheSameSignal) {
  // The report names the program, the signal and the frames (this function among them: -rdynamic).
  EXPECT_EXIT(crash_in_a_named_function(SIGSEGV), ::testing::KilledBySignal(SIGSEGV),
              "crash_report_test: killed by SIGSEGV.*phase: \\(none named\\) \\| main thread \\| fault address"
              ".*backtrace:.*crash_in_a_named_function");
  EXPECT_EXIT(crash_in_a_named_function(SIGBUS), ::testing::KilledBySignal(SIGBUS), "killed by SIGBUS");
}

// A call through a bad pointer (a destroyed object's vtable, say) leaves the unwinder nothing to
// start from; the report still names the phase, the faulting address and the caller (the return
// address on top of the stack), and the backtrace continues from that caller.
TEST_F(CrashReport, ACallThroughABadPointerNamesThePhaseTheAddressAndTheCaller) {
  EXPECT_EXIT(call_a_bad_pointer(reinterpret_cast<void (*)()>(uintptr_t{0x10})), ::testing::KilledBySignal(SIGSEGV),
              "phase: finish > checkpoint \\| main thread \\| fault address 0x10\n"
              "memory at the fault address: not mapped\n"
              "a call through a bad pointer: the instruction address, then the caller's return address:\n"
              ".*\n.*call_a_bad_pointer.*backtrace:\n.*call_a_bad_pointer");
}

// The report says what lies at the fault address: here a mapping without access (its
// /proc/self/maps line, "---p"); for a wild pointer, nothing ("not mapped", below).
TEST_F(CrashReport, TheFaultAddressIsPlacedInTheProcessMemoryMap) {
  EXPECT_EXIT(read_a_page_without_access(), ::testing::KilledBySignal(SIGSEGV),
              "page at 0x[0-9a-f]+\n.*fault address 0x[0-9a-f]+\n"
              "memory at the fault address: [0-9a-f]+-[0-9a-f]+ ---p ");
  EXPECT_EXIT(call_a_bad_pointer(reinterpret_cast<void (*)()>(uintptr_t{0x10})), ::testing::KilledBySignal(SIGSEGV),
              "fault address 0x10\nmemory at the fault address: not mapped\n");
}

// A stack overflow's report runs on the alternate signal stack and still gets its backtrace (the
// handler never reads the exhausted stack's guard page).
TEST_F(CrashReport, AStackOverflowIsReportedWithItsBacktrace) {
  EXPECT_EXIT(
      {
        install_crash_report("crash_report_test");
        std::printf("%d\n", overflow_the_stack(0));
      },
      ::testing::KilledBySignal(SIGSEGV), "killed by SIGSEGV.*instruction:\n.*backtrace:\n.*overflow_the_stack");
}

std::string chain() {
  char buf[512];
  CrashPhase::chain(buf, sizeof buf);
  return buf;
}

TEST_F(CrashReport, PhasesNestAndRestore) {
  EXPECT_EQ(chain(), "");
  {
    CrashPhase outer("step");
    {
      CrashPhase inner("checkpoint");
      EXPECT_EQ(chain(), "step > checkpoint");
    }
    EXPECT_EQ(chain(), "step");
  }
  EXPECT_EQ(chain(), "");
}

// Deeper than kMaxDepth the inner names are elided, and the chain still unwinds to empty; a
// buffer too small for the chain holds its start, terminated.
TEST_F(CrashReport, ADeepChainIsElidedAndASmallBufferTruncated) {
  {
    std::vector<std::unique_ptr<CrashPhase>> phases;
    for (int i = 0; i < CrashPhase::kMaxDepth + 2; ++i) phases.push_back(std::make_unique<CrashPhase>("p"));
    std::string expect = "p";
    for (int i = 1; i < CrashPhase::kMaxDepth; ++i) expect += " > p";
    EXPECT_EQ(chain(), expect + " > ...");
    char small[6];
    CrashPhase::chain(small, sizeof small);
    EXPECT_STREQ(small, "p > p");
    while (!phases.empty()) phases.pop_back();  // innermost first, as scopes unwind
  }
  EXPECT_EQ(chain(), "");
}

// The chain belongs to the thread that drives the work (this one, the first to name a phase): a
// phase named on another thread (an async checkpoint writer) neither shows nor disturbs it.
TEST_F(CrashReport, PhasesOfAnotherThreadAreNotMixedIn) {
  CrashPhase mine("step");
  std::thread other([] {
    CrashPhase theirs("write model.safetensors");
    EXPECT_EQ(chain(), "step");
  });
  other.join();
  EXPECT_EQ(chain(), "step");
}

}  // namespace
}  // namespace frugal::crash_report_test
