// Stop-signal handling: each signal sets the flag, the previous handlers come back, and a second
// SIGINT ends the process at once, saying how to continue (checked in a forked child).
#include "frugal/train/preemption.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fcntl.h>

#include <algorithm>
#include <filesystem>
#include <csignal>
#include <string>
#include <vector>

#include "test_util.h"

namespace frugal::preemption_test {
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

// Killed by SIGINT (130 in a shell), after one line on stderr: it used to end without a word,
// leaving the user to guess whether a checkpoint was written and how to go on. The line names the
// run's own resume command where `frugal train` set it (set_interrupt_hint), else `--resume auto`.
std::string second_sigint_says(const std::string& hint) {
  int err[2];
  EXPECT_EQ(pipe(err), 0);
  pid_t pid = fork();
  if (pid == 0) {
    close(err[0]);
    dup2(err[1], 2);
    if (!hint.empty()) set_interrupt_hint(hint);
    SignalHandlers h;
    std::raise(SIGINT);
    if (preemption_signal() != SIGINT) _exit(10);
    std::raise(SIGINT);  // must not return
    _exit(11);
  }
  close(err[1]);
  std::string said;
  char buf[512];
  for (ssize_t n; (n = read(err[0], buf, sizeof buf)) > 0;) said.append(buf, static_cast<size_t>(n));
  close(err[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFSIGNALED(status)) << "exit status " << WEXITSTATUS(status);
  EXPECT_EQ(WTERMSIG(status), SIGINT);
  EXPECT_NE(said.find("stopped at once, without a checkpoint"), std::string::npos) << said;
  EXPECT_EQ(std::count(said.begin(), said.end(), '\n'), 1) << said;
  return said;
}

TEST(Preemption, SecondSigintEndsTheProcessAtOnceSayingHowToContinue) {
  const std::string plain = second_sigint_says("");
  EXPECT_NE(plain.find("`--resume auto` continues from the newest checkpoint"), std::string::npos) << plain;
  const std::string named = second_sigint_says("frugal train --set run.name=r --resume auto");
  EXPECT_NE(named.find("continue from the newest checkpoint with: frugal train --set run.name=r --resume auto\n"),
            std::string::npos)
      << named;
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

// A stop signal that arrives while `frugal train` starts (here: before its main(), held pending
// through exec and across the OpenMP re-exec, which LOCAL_WORLD_SIZE=2 asks for) is a preemption:
// checkpoint, exit 75. It used to stay
// unhandled (exit 143 when it arrived before the trainer existed; here, ignored: exit 0).
TEST(Preemption, AStopSignalDuringStartUpExits75) {
  test::TempDir dir;
  std::vector<std::string> args = {"frugal", "train"};
  for (const auto& o : test::tiny_overrides(dir.path())) {
    args.push_back("--set");
    args.push_back(o);
  }
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    sigset_t term;
    sigemptyset(&term);
    sigaddset(&term, SIGTERM);
    sigprocmask(SIG_BLOCK, &term, nullptr);
    kill(getpid(), SIGTERM);      // pending until frugal unblocks it
    unsetenv("OMP_WAIT_POLICY");  // ranks sharing the machine: frugal re-executes itself as PASSIVE
    unsetenv("FRUGAL_NO_REEXEC");
    setenv("LOCAL_WORLD_SIZE", "2", 1);
    const int null = open("/dev/null", O_WRONLY);
    dup2(null, 1);
    dup2(null, 2);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(FRUGAL_BINARY, argv.data());
    _exit(126);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status)) << "killed by signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 75);
  const auto summary = test::read_text(dir.file("demo/summary.json"));
  EXPECT_NE(summary.find("\"stop_kind\": \"preempted\""), std::string::npos) << summary;
}

// `frugal train ... | tee log` over an ssh session that drops: the log reader goes away with the
// session. The run used to die of SIGPIPE at its next line of output, before any checkpoint; its
// writes now fail quietly and the run goes on (here: to its end, exit 0, final weights written).
// A hang-up that was pending when it started (held from before exec) stops it with exit 75.
int train_into_a_closed_pipe(const std::string& dir, bool hang_up) {
  std::vector<std::string> args = {"frugal", "train"};
  for (const auto& o : test::tiny_overrides(dir)) {
    args.push_back("--set");
    args.push_back(o);
  }
  int out[2];
  EXPECT_EQ(pipe(out), 0);
  pid_t pid = fork();
  EXPECT_GE(pid, 0);
  if (pid == 0) {
    close(out[0]);  // nobody reads: the first write raises SIGPIPE unless it is ignored
    dup2(out[1], 1);
    const int null = open("/dev/null", O_WRONLY);
    dup2(null, 2);
    signal(SIGPIPE, SIG_DFL);
    if (hang_up) {
      sigset_t hup;
      sigemptyset(&hup);
      sigaddset(&hup, SIGHUP);
      sigprocmask(SIG_BLOCK, &hup, nullptr);
      signal(SIGHUP, SIG_DFL);
      kill(getpid(), SIGHUP);  // pending until frugal unblocks it
    }
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(FRUGAL_BINARY, argv.data());
    _exit(126);
  }
  close(out[0]);
  close(out[1]);
  int status = 0;
  waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status)) << "killed by signal " << WTERMSIG(status);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(Preemption, AClosedLogPipeDoesNotKillTheRunAndAHangUpCheckpoints) {
  test::TempDir piped;
  EXPECT_EQ(train_into_a_closed_pipe(piped.path(), false), 0);
  EXPECT_TRUE(std::filesystem::exists(piped.file("demo/final/model.safetensors")));
  test::TempDir hung;
  EXPECT_EQ(train_into_a_closed_pipe(hung.path(), true), 75);
  EXPECT_NE(test::read_text(hung.file("demo/summary.json")).find("\"stop_kind\": \"preempted\""), std::string::npos);
}

// A stop signal after exec but before main (LibTorch's static initializers take ~0.3 s) used to kill
// `frugal train` with the default action (exit 143); frugal now holds the stop signals from its
// .preinit_array on. FRUGAL_FAULT_SIGNAL_AT_START=1 sends the SIGTERM from there.
TEST(Preemption, AStopSignalBeforeMainExits75) {
  test::TempDir dir;
  std::string sets;
  for (const auto& o : test::tiny_overrides(dir.path())) sets += " --set " + o;
  const auto r = test::run_frugal("train -q" + sets, "FRUGAL_FAULT_SIGNAL_AT_START=1");
  EXPECT_EQ(r.exit_code, 75) << r.output;
  EXPECT_NE(test::read_text(dir.file("demo/summary.json")).find("\"stop_kind\": \"preempted\""), std::string::npos);
}

// A stop signal while train.smoke_first runs (here from before main) ends the command with exit 75
// and says so; the smoke test's stopped trainer used to read as a failed smoke test (exit 1).
TEST(Preemption, AStopSignalDuringTheSmokeTestFirstExits75) {
  test::TempDir dir;
  std::string sets = " --set train.smoke_first=true";
  for (const auto& o : test::tiny_overrides(dir.path())) sets += " --set " + o;
  const auto r = test::run_frugal("train -q" + sets, "FRUGAL_FAULT_SIGNAL_AT_START=1");
  EXPECT_EQ(r.exit_code, 75) << r.output;
  EXPECT_NE(r.output.find("during train.smoke_first, before training began"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("smoke test failed"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace frugal::preemption_test
