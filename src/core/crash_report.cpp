// Fatal-signal report; see crash_report.h.
#include "frugal/core/crash_report.h"

#include <execinfo.h>
#include <unistd.h>

#include <csignal>
#include <cstring>
#include <initializer_list>

namespace frugal {
namespace {

const char* g_program = "frugal";
char g_alt_stack[64 * 1024];  // a stack overflow still gets its report

void put(const char* s) {
  // write(2) only: async-signal-safe. A short write loses part of the report, nothing else.
  ssize_t ignored = ::write(STDERR_FILENO, s, std::strlen(s));
  (void)ignored;
}

const char* signal_name(int sig) {
  switch (sig) {
    case SIGSEGV: return "SIGSEGV (invalid memory access)";
    case SIGBUS: return "SIGBUS (bus error)";
    case SIGILL: return "SIGILL (illegal instruction)";
    case SIGFPE: return "SIGFPE (arithmetic fault)";
  }
  return "a fatal signal";
}

void on_fatal_signal(int sig) {
  put("\n");
  put(g_program);
  put(": killed by ");
  put(signal_name(sig));
  put(". This is a bug in frugal or a library it calls, not in your input: please report it with\n"
      "the backtrace below, `frugal doctor --json` and the run's config.toml.\nbacktrace:\n");
  void* frames[64];
  const int n = ::backtrace(frames, 64);
  ::backtrace_symbols_fd(frames, n, STDERR_FILENO);
  // SA_RESETHAND restored the default action: the signal, raised again (or the faulting
  // instruction, re-run on return), ends the process as it would have without this report.
  ::raise(sig);
}

}  // namespace

void install_crash_report(const char* program) {
  g_program = program;
  // The first backtrace() loads libgcc's unwinder (which allocates): do it now, not in the handler.
  void* warm[1];
  (void)::backtrace(warm, 1);
  stack_t ss{};
  ss.ss_sp = g_alt_stack;
  ss.ss_size = sizeof g_alt_stack;
  ::sigaltstack(&ss, nullptr);
  struct sigaction sa {};
  sa.sa_handler = on_fatal_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESETHAND | SA_ONSTACK;
  for (int sig : {SIGSEGV, SIGBUS, SIGILL, SIGFPE}) ::sigaction(sig, &sa, nullptr);
}

}  // namespace frugal
