// What a process says when it dies of a bug: a fatal signal (SIGSEGV, SIGBUS, SIGILL, SIGFPE)
// prints its name, the phase of work it hit (CrashPhase), the faulting thread, instruction and
// address, and a backtrace to standard error; then the process dies of the same signal (same exit
// status, and a core dump of the same state, as without the report).
#pragma once

#include <cstddef>

namespace frugal {

// Installs the report for `program` (the name it prints). Idempotent; call early in main. Under
// AddressSanitizer or ThreadSanitizer it does nothing: the sanitizer reports the crash.
void install_crash_report(const char* program);

// Names the work in progress for a crash report ("step", "checkpoint", "write
// optimizer.safetensors", ...) for the lifetime of the object. Phases nest: the report prints the
// chain, outermost first ("finish > checkpoint > write model.safetensors"). `name` must outlive the
// object (a string literal). Cheap: two relaxed atomic stores each way, no allocation.
//
// One chain per process, kept by the thread that drives the work: the first thread to name a
// phase (the trainer's) owns it, and phases named on any other thread (an async checkpoint
// writer) are ignored; the report names the crashing thread beside the chain. Deeper than
// kMaxDepth, the inner names are counted but not kept.
class CrashPhase {
 public:
  static constexpr int kMaxDepth = 8;

  explicit CrashPhase(const char* name) noexcept;
  ~CrashPhase();
  CrashPhase(const CrashPhase&) = delete;
  CrashPhase& operator=(const CrashPhase&) = delete;

  // The chain as the report prints it ("" when no phase is named). Async-signal-safe: writes at
  // most `size` bytes (terminated) into `out`, allocates nothing.
  static void chain(char* out, size_t size) noexcept;

 private:
  bool kept_;  // false on a thread that does not own the chain
};

}  // namespace frugal
