// The exit-code table; see exit_code.h.
#include "frugal/core/exit_code.h"

#include "frugal/core/errors.h"

namespace frugal {

ExitCode exit_code_for(const std::exception& e) {
  if (dynamic_cast<const ConfigError*>(&e) || dynamic_cast<const DataError*>(&e)) return ExitCode::kBadInput;
  if (dynamic_cast<const GuardStop*>(&e)) return ExitCode::kGuardStop;
  return ExitCode::kFailure;
}

ExitCode exit_code_for(StopKind k) {
  switch (k) {
    case StopKind::kPreempted:
      return ExitCode::kPreempted;
    case StopKind::kGuard:
    case StopKind::kBudget:
      return ExitCode::kGuardStop;
    case StopKind::kCompleted:
    case StopKind::kCallback:
    case StopKind::kEarlyStop:
    case StopKind::kMaxMinutes:
    case StopKind::kTarget:
      return ExitCode::kDone;
  }
  return ExitCode::kFailure;
}

const char* error_label(const std::exception& e) {
  // Exit 2 for a config key, a flag, a path or a file the user named: "bad input", as the exit-code
  // table says; the message names which.
  if (dynamic_cast<const ConfigError*>(&e)) return "bad input";
  if (dynamic_cast<const DataError*>(&e)) return "data error";
  if (dynamic_cast<const GuardStop*>(&e)) return "stopped";
  if (dynamic_cast<const InternalError*>(&e)) return "internal error";
  return "error";
}

const char* exit_code_meaning(ExitCode c) {
  switch (c) {
    case ExitCode::kDone:
      return "done";
    case ExitCode::kFailure:
      return "failure (an unexpected error or a bug)";
    case ExitCode::kBadInput:
      return "bad input";
    case ExitCode::kGuardStop:
      return "stopped by a guard";
    case ExitCode::kPreempted:
      return "preempted (resumable)";
  }
  return "?";
}

}  // namespace frugal
