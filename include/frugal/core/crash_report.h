// What a process says when it dies of a bug: a fatal signal (SIGSEGV, SIGBUS, SIGILL, SIGFPE)
// prints its name, the phase of work it hit (CrashPhase), the faulting thread, instruction and
// address, and a backtrace to standard error; then the process dies of the same signal (same exit
// status, and a core dump of the same state, as without the report).
#pragma once

#include <atomic>

namespace frugal {

// Installs the report for `program` (the name it prints). Idempotent; call early in main. Under
// AddressSanitizer or ThreadSanitizer it does nothing: the sanitizer reports the crash.
void install_crash_report(const char* program);

// Names the work in progress for a crash report ("step", "eval", "checkpoint", ...) for the
// lifetime of the object; nested phases restore the outer one. `name` must outlive the object
// (a string literal). Cheap: one atomic exchange each way. One per process, set by the thread
// that drives the work (the trainer's); the report names the crashing thread beside it.
class CrashPhase {
 public:
  explicit CrashPhase(const char* name) noexcept : prev_(current().exchange(name)) {}
  ~CrashPhase() { current().store(prev_); }
  CrashPhase(const CrashPhase&) = delete;
  CrashPhase& operator=(const CrashPhase&) = delete;

  static std::atomic<const char*>& current() noexcept;

 private:
  const char* prev_;
};

}  // namespace frugal
