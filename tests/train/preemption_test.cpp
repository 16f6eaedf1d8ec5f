// Stop-signal handling: each signal sets the flag, the previous handlers come back, and a second
// SIGINT ends the process at once (checked in a forked child).
#include "frugal/train/preemption.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>

namespace frugal {
namespace {

TEST(Preemption, EachStopSignalSetsTheFlag) {
  for (int sig : {SIGTERM, SIGINT, SIGUSR1}) {
    clear_preemption();
    {
      SignalHandlers h;
      std::raise(sig);
      EXPECT_EQ(preemption_signal(), sig);
    }
    clear_preemption();
  }
}

TEST(Preemption, PreviousHandlersAreRestored) {
  struct sigaction before {};
  sigaction(SIGUSR1, nullptr, &before);
  { SignalHandlers h; }
  struct sigaction after {};
  sigaction(SIGUSR1, nullptr, &after);
  EXPECT_EQ(before.sa_handler, after.sa_handler);
}

TEST(Preemption, SecondSigintEndsTheProcessAtOnce) {
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    SignalHandlers h;
    std::raise(SIGINT);
    if (preemption_signal() != SIGINT) _exit(10);
    std::raise(SIGINT);  // must not return
    _exit(11);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status)) << "exit status " << WEXITSTATUS(status);
  EXPECT_EQ(WTERMSIG(status), SIGINT);
}

TEST(Preemption, SigtermThenSigintStillLeavesOneGracefulSigint) {
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    SignalHandlers h;
    std::raise(SIGTERM);
    std::raise(SIGINT);  // the first SIGINT: graceful
    _exit(preemption_signal() == SIGINT ? 0 : 12);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

}  // namespace
}  // namespace frugal
