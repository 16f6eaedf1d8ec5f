// Stop-signal handling; see preemption.h.
#include "frugal/train/preemption.h"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <string>

namespace frugal {
namespace {

std::atomic<int> g_signal{0};
static_assert(std::atomic<int>::is_always_lock_free, "the signal flag must be lock-free");

// What a second SIGINT prints before the process ends, composed beforehand (set_interrupt_hint)
// so that the handler only calls write(2), which is async-signal-safe. The length is published
// after the text, so the handler never reads a half-written one.
constexpr char kSecondSigintMessage[] =
    "frugal: a second Ctrl-C (SIGINT): stopped at once, without a checkpoint; "
    "`--resume auto` continues from the newest checkpoint\n";
char g_hint[1024];
std::atomic<size_t> g_hint_size{0};
static_assert(std::atomic<size_t>::is_always_lock_free, "the hint's length must be lock-free");

// The second SIGINT: says so, then ends the process the usual way (killed by SIGINT, which the
// shell reports as 130). SA_RESETHAND has restored the default action on entry; SIGINT is blocked
// while this runs, so the raise() takes effect as the handler returns.
extern "C" void on_second_sigint(int) {
  const int saved = errno;
  const size_t hint = g_hint_size.load();
  [[maybe_unused]] const ssize_t n =
      hint > 0 ? ::write(STDERR_FILENO, g_hint, hint)
               : ::write(STDERR_FILENO, kSecondSigintMessage, sizeof kSecondSigintMessage - 1);
  ::raise(SIGINT);
  errno = saved;
}

extern "C" void on_stop_signal(int sig) {
  g_signal.store(sig);
  if (sig == SIGINT) {  // a second Ctrl-C ends the process at once
    struct sigaction second;
    std::memset(&second, 0, sizeof second);
    second.sa_handler = on_second_sigint;
    sigemptyset(&second.sa_mask);
    second.sa_flags = SA_RESETHAND;
    sigaction(SIGINT, &second, nullptr);
  }
}

void install(int sig, struct sigaction* old) {
  // A hang-up that was ignored before (`nohup frugal train ...`) stays ignored: the user asked
  // for the run to outlive the terminal.
  if (sig == SIGHUP && sigaction(sig, nullptr, old) == 0 && old->sa_handler == SIG_IGN) return;
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(sig, &sa, old);
}

}  // namespace

void set_interrupt_line(const std::string& text) {
  const std::string line = text + "\n";
  if (line.size() > sizeof g_hint) return;  // the generic line stays
  g_hint_size.store(0);
  std::memcpy(g_hint, line.data(), line.size());
  g_hint_size.store(line.size());
}

void set_interrupt_hint(const std::string& command) {
  set_interrupt_line(
      "frugal: a second Ctrl-C (SIGINT): stopped at once, without a checkpoint; continue "
      "from the newest checkpoint with: " +
      command);
}

std::string stop_signal_name(int sig) {
  switch (sig) {
    case SIGINT:
      return "SIGINT";
    case SIGTERM:
      return "SIGTERM";
    case SIGUSR1:
      return "SIGUSR1";
    case SIGHUP:
      return "SIGHUP";
    default:
      return "signal " + std::to_string(sig);
  }
}

int preemption_signal() { return g_signal.load(); }
void clear_preemption() { g_signal.store(0); }

SignalHandlers::SignalHandlers() {
  install(SIGTERM, &old_term_);
  install(SIGINT, &old_int_);
  install(SIGUSR1, &old_usr1_);
  install(SIGHUP, &old_hup_);
}

SignalHandlers::~SignalHandlers() {
  sigaction(SIGTERM, &old_term_, nullptr);
  sigaction(SIGINT, &old_int_, nullptr);
  sigaction(SIGUSR1, &old_usr1_, nullptr);
  sigaction(SIGHUP, &old_hup_, nullptr);
}

}  // namespace frugal
