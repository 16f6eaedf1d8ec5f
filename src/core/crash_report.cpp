// Fatal-signal report; see crash_report.h.
#include "frugal/core/crash_report.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <execinfo.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

#include <csignal>
#include <cstdint>
#include <cstring>
#include <atomic>
#include <initializer_list>

namespace frugal {
namespace {

const char* g_program = "frugal";
char g_alt_stack[64 * 1024];  // a stack overflow on the main thread still gets its report

// write(2) only: async-signal-safe. A short write loses part of the report, nothing else.
void put(const char* s) {
  ssize_t ignored = ::write(STDERR_FILENO, s, std::strlen(s));
  (void)ignored;
}

void put_number(uint64_t v, int base) {
  char buf[24];
  int i = sizeof buf - 1;
  buf[i] = '\0';
  do {
    buf[--i] = "0123456789abcdef"[v % static_cast<uint64_t>(base)];
    v /= static_cast<uint64_t>(base);
  } while (v != 0 && i > 0);
  if (base == 16) put("0x");
  put(buf + i);
}

// Prints "<label>: " and the /proc/self/maps line of the mapping that holds `addr` (its range,
// permissions and file: a library, [heap], a stack, an anonymous mapping such as JIT code or a
// GPU driver's reserved range), or "not mapped". open/read only: async-signal-safe.
void put_mapping(const char* label, uintptr_t addr) {
  put(label);
  put(": ");
  const int fd = ::open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    put("(/proc/self/maps unreadable)\n");
    return;
  }
  static char chunk[4096], line[512];
  size_t len = 0;
  bool found = false;
  auto check = [&]() {  // line[0, len): "start-end perms offset dev inode [path]"
    line[len] = '\0';
    uintptr_t lo = 0, hi = 0;
    size_t i = 0;
    auto hex = [&](uintptr_t& v) {
      for (; i < len; ++i) {
        const char c = line[i];
        const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0) break;
        v = v * 16 + static_cast<uintptr_t>(d);
      }
    };
    hex(lo);
    if (i < len && line[i] == '-') ++i;
    hex(hi);
    if (addr >= lo && addr < hi) {
      put(line);
      put("\n");
      found = true;
    }
  };
  ssize_t n;
  while (!found && (n = ::read(fd, chunk, sizeof chunk)) > 0) {
    for (ssize_t k = 0; k < n && !found; ++k) {
      if (chunk[k] == '\n') {
        check();
        len = 0;
      } else if (len + 1 < sizeof line) {
        line[len++] = chunk[k];
      }
    }
  }
  if (!found && len > 0) check();
  ::close(fd);
  if (!found) put("not mapped\n");
}

const char* signal_name(int sig) {
  switch (sig) {
    case SIGSEGV:
      return "SIGSEGV (invalid memory access)";
    case SIGBUS:
      return "SIGBUS (bus error)";
    case SIGILL:
      return "SIGILL (illegal instruction)";
    case SIGFPE:
      return "SIGFPE (arithmetic fault)";
  }
  return "a fatal signal";
}

void on_fatal_signal(int sig, siginfo_t* info, void* context) {
  put("\n");
  put(g_program);
  put(": killed by ");
  put(signal_name(sig));
  put(". This is a bug in frugal or a library it calls, not in your input: please report it with\n"
      "this report, `frugal doctor --json` and the run's config.toml.\n");
  char phase[512];
  CrashPhase::chain(phase, sizeof phase);
  put("phase: ");
  put(phase[0] ? phase : "(none named)");
  const auto tid = static_cast<uint64_t>(::syscall(SYS_gettid));
  put(tid == static_cast<uint64_t>(::getpid()) ? " | main thread" : " | thread ");
  if (tid != static_cast<uint64_t>(::getpid())) put_number(tid, 10);
  put(" | fault address ");
  put_number(reinterpret_cast<uintptr_t>(info ? info->si_addr : nullptr), 16);
  put("\n");
  // What lies at the fault address: nothing (a null or wild pointer), a page without access (a
  // guard page, a GPU driver's reserved range: a device pointer read on the host), a heap.
  if (info && (sig == SIGSEGV || sig == SIGBUS))
    put_mapping("memory at the fault address", reinterpret_cast<uintptr_t>(info->si_addr));
#if defined(__x86_64__) && defined(REG_RIP)
  greg_t* regs = context ? static_cast<ucontext_t*>(context)->uc_mcontext.gregs : nullptr;
  const greg_t saved_ip = regs ? regs[REG_RIP] : 0, saved_sp = regs ? regs[REG_RSP] : 0;
  void* where[2] = {reinterpret_cast<void*>(saved_ip), nullptr};
  // A call through a bad pointer (a destroyed object's vtable, an unloaded library): the fault is
  // the fetch of the instruction itself, at an address outside every loaded object (JIT code
  // faults on data, not on its own address). The unwinder has no frame to start from there (it
  // may even fault reading it), but the call has just pushed the caller's return address on top
  // of the stack (mapped: it was written). Only then is that word read: after a stack overflow
  // the stack pointer may point into the guard page.
  Dl_info in{};
  const bool bad_call = regs && sig == SIGSEGV && info && info->si_addr == where[0] && ::dladdr(where[0], &in) == 0;
  if (bad_call) where[1] = *reinterpret_cast<void* const*>(saved_sp);
  if (bad_call && ::dladdr(where[1], &in) != 0) {
    put("a call through a bad pointer: the instruction address, then the caller's return address:\n");
    ::backtrace_symbols_fd(where, 2, STDERR_FILENO);
    // The interrupted context becomes the caller's, as if the bad call had returned, so that the
    // backtrace passes through the signal frame into the caller; restored afterwards, so that a
    // core dump shows the crash as it happened.
    regs[REG_RIP] = reinterpret_cast<greg_t>(where[1]);
    regs[REG_RSP] = saved_sp + static_cast<greg_t>(sizeof(void*));
  } else if (regs) {
    put("instruction:\n");
    ::backtrace_symbols_fd(where, 1, STDERR_FILENO);
    // Code outside every loaded object (JIT-compiled kernels, say) has no unwind information:
    // the backtrace below stops at the signal frame; the mapping at least says what it is.
    if (::dladdr(where[0], &in) == 0) put_mapping("memory at the instruction", static_cast<uintptr_t>(saved_ip));
  }
#else
  (void)context;
#endif
  put("backtrace:\n");
  void* frames[64];
  const int n = ::backtrace(frames, 64);
  ::backtrace_symbols_fd(frames, n, STDERR_FILENO);
#if defined(__x86_64__) && defined(REG_RIP)
  if (regs) {
    regs[REG_RIP] = saved_ip;
    regs[REG_RSP] = saved_sp;
  }
#endif
  // SA_RESETHAND restored the default action: the signal, raised again (or the faulting
  // instruction, re-run on return), ends the process as it would have without this report.
  ::raise(sig);
}

}  // namespace

namespace {
// The phase chain: statics only, so that the handler reads it without touching the heap or a
// destroyed object.
std::atomic<const char*> g_phase_names[CrashPhase::kMaxDepth];
std::atomic<int> g_phase_depth{0};
std::atomic<bool> g_phase_owned{false};

// True on the thread that owns the chain: the first to name a phase.
bool owns_the_chain() noexcept {
  thread_local const bool mine = [] {
    bool expected = false;
    return g_phase_owned.compare_exchange_strong(expected, true);
  }();
  return mine;
}

void append(char* out, size_t size, size_t& at, const char* s) noexcept {
  for (; *s && at + 1 < size; ++s) out[at++] = *s;
  out[at] = '\0';
}
}  // namespace

CrashPhase::CrashPhase(const char* name) noexcept : kept_(owns_the_chain()) {
  if (!kept_) return;
  const int d = g_phase_depth.load(std::memory_order_relaxed);
  if (d < kMaxDepth) g_phase_names[d].store(name, std::memory_order_relaxed);
  g_phase_depth.store(d + 1, std::memory_order_release);
}

CrashPhase::~CrashPhase() {
  if (kept_) g_phase_depth.store(g_phase_depth.load(std::memory_order_relaxed) - 1, std::memory_order_release);
}

void CrashPhase::chain(char* out, size_t size) noexcept {
  if (size == 0) return;
  size_t at = 0;
  out[0] = '\0';
  const int depth = g_phase_depth.load(std::memory_order_acquire);
  for (int i = 0; i < depth && i < kMaxDepth; ++i) {
    if (i > 0) append(out, size, at, " > ");
    const char* name = g_phase_names[i].load(std::memory_order_relaxed);
    append(out, size, at, name ? name : "?");
  }
  if (depth > kMaxDepth) append(out, size, at, " > ...");
}

void install_crash_report(const char* program) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  (void)program;
  return;  // the sanitizer's own report (with its symbolised stack) is the better one
#endif
  g_program = program;
  // The first backtrace() loads libgcc's unwinder (which allocates): do it now, not in the handler.
  void* warm[1];
  (void)::backtrace(warm, 1);
  stack_t ss{};
  ss.ss_sp = g_alt_stack;
  ss.ss_size = sizeof g_alt_stack;
  ::sigaltstack(&ss, nullptr);
  struct sigaction sa {};
  sa.sa_sigaction = on_fatal_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_SIGINFO | SA_RESETHAND | SA_ONSTACK;
  for (int sig : {SIGSEGV, SIGBUS, SIGILL, SIGFPE}) ::sigaction(sig, &sa, nullptr);
}

}  // namespace frugal
