// Stop signals: SIGTERM, SIGINT, SIGUSR1 and SIGHUP (spot-instance reclaim notices, Ctrl-C,
// schedulers, a dropped ssh session) set a flag; the trainer checks it between steps, between evaluation batches and
// during start-up, finishes the current step, writes a checkpoint and stops with StopKind::kPreempted (the CLI exits
// 75). A second SIGINT ends the process at once, killed by SIGINT (exit status 130 in a shell), after one line on
// stderr: stopped without a checkpoint, and the command that continues from the newest one (set_interrupt_hint). A
// SIGHUP that is ignored when the handlers are installed (`nohup`) stays ignored.
//
// The handlers only load and store lock-free atomics and call sigaction(), write(2) of a buffer
// written before and raise(), all async-signal-safe.
// SignalHandlers is RAII: it installs the handlers and restores the previous ones on
// destruction. The flag is process-wide.
#pragma once

#include <signal.h>

#include <string>

namespace frugal {

// The signal that asked for a stop, or 0.
int preemption_signal();
inline bool preemption_requested() { return preemption_signal() != 0; }
// Clears the flag (tests; a new run in the same process).
void clear_preemption();
// The command a second SIGINT's line names to continue the run (`frugal train ... --resume auto`);
// without one the line says `--resume auto`. Call it before training, not from a handler.
void set_interrupt_hint(const std::string& command);
// The whole line a second SIGINT prints, for a command that has no checkpoint to continue from
// (`frugal tune`, `frugal plan`); a newline is added. Call it before the work, not from a handler.
void set_interrupt_line(const std::string& line);
// "SIGINT", "SIGTERM", "SIGUSR1", "SIGHUP"; else "signal N".
std::string stop_signal_name(int sig);

class SignalHandlers {
 public:
  SignalHandlers();
  ~SignalHandlers();
  SignalHandlers(const SignalHandlers&) = delete;
  SignalHandlers& operator=(const SignalHandlers&) = delete;

 private:
  struct sigaction old_term_, old_int_, old_usr1_, old_hup_;
};

}  // namespace frugal
