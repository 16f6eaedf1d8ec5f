// The one table of exit codes: what `frugal` returns, what the launcher passes on, what a program
// built on the library should return. README.md and docs/cli.md document the same table.
//
//   0  done             the run completed, or stopped early on purpose (early stopping, max_minutes)
//   1  bug or failure   an unexpected error: I/O, a checkpoint that cannot be read, a peer process
//                       lost, a bug in frugal (InternalError)
//   2  bad input        config, data or arguments (ConfigError, DataError); a full disk or an
//                       exhausted quota (IoError with ENOSPC or EDQUOT): the user frees space
//   3  guard stop       a guard stopped the run on purpose: divergence, the spending limit (GuardStop)
//   75 preempted        a stop signal or deadline: checkpoint written, continue with --resume auto;
//                       a command with nothing to continue (tune, plan) stopped by a signal
//                       (Interrupted): nothing written, run it again
#pragma once

#include <exception>
#include <string>

#include "frugal/core/callback.h"

namespace frugal {

enum class ExitCode : int {
  kDone = 0,
  kFailure = 1,
  kBadInput = 2,
  kGuardStop = 3,
  kPreempted = 75,
};

inline int exit_status(ExitCode c) { return static_cast<int>(c); }

// The code for an error that ended a command (errors.h's taxonomy; anything else is kFailure).
ExitCode exit_code_for(const std::exception& e);
// The code for a training run that returned normally, by why it stopped.
ExitCode exit_code_for(StopKind k);
// "done", "bad input", ... (the table above), for messages.
const char* exit_code_meaning(ExitCode c);
// How a program names an error it ends with: "bad input" (a config key, flag, path, file or data
// the user named), "stopped" (a guard), "internal error" or "error" (`frugal: bad input: ...`).
const char* error_label(const std::exception& e);
// Whether `e` says the disk is full or the quota used up (an IoError with ENOSPC or EDQUOT).
bool is_disk_full(const std::exception& e);
// How the user continues this process's work once they fixed what ended it, for error_advice():
// set by a command before its work starts (`frugal train`: its run's `--resume auto` command, or
// that its progress is lost when it writes no checkpoints). Unset: run the command again.
void set_how_to_continue(std::string how);
// What to do about an error whose message alone does not say it ("" for none): a full disk gets
// what to free, then how to continue (set_how_to_continue).
std::string error_advice(const std::exception& e);

}  // namespace frugal
