// Stop-signal handling; see preemption.h.
#include "frugal/train/preemption.h"

#include <atomic>
#include <cstring>

namespace frugal {
namespace {

std::atomic<int> g_signal{0};
static_assert(std::atomic<int>::is_always_lock_free, "the signal flag must be lock-free");

extern "C" void on_stop_signal(int sig) {
  g_signal.store(sig);
  if (sig == SIGINT) {  // a second Ctrl-C kills the process the usual way
    struct sigaction dfl;
    std::memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(SIGINT, &dfl, nullptr);
  }
}

void install(int sig, struct sigaction* old) {
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(sig, &sa, old);
}

}  // namespace

int preemption_signal() { return g_signal.load(); }
void clear_preemption() { g_signal.store(0); }

SignalHandlers::SignalHandlers() {
  install(SIGTERM, &old_term_);
  install(SIGINT, &old_int_);
  install(SIGUSR1, &old_usr1_);
}

SignalHandlers::~SignalHandlers() {
  sigaction(SIGTERM, &old_term_, nullptr);
  sigaction(SIGINT, &old_int_, nullptr);
  sigaction(SIGUSR1, &old_usr1_, nullptr);
}

}  // namespace frugal
