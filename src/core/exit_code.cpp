// The exit-code table; see exit_code.h.
#include "frugal/core/exit_code.h"

#include <cerrno>
#include <cstring>
#include <string>

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
  // Exit 2 for a config key, a flag, a path, a file or data the user named: "bad input" for all of
  // them, as the exit-code table says; the message names which.
  if (dynamic_cast<const ConfigError*>(&e) || dynamic_cast<const DataError*>(&e)) return "bad input";
  if (dynamic_cast<const GuardStop*>(&e)) return "stopped";
  if (dynamic_cast<const InternalError*>(&e)) return "internal error";
  return "error";
}

std::string error_advice(const std::string& message) {
  if (message.find(std::strerror(ENOSPC)) == std::string::npos) return "";
  return "the disk is full. Free space on it (old runs; old checkpoints: `frugal archive`, or a lower "
         "checkpoint.keep_last), then continue the run with `frugal train --set run.name=NAME --resume auto`: "
         "a checkpoint is written to a temporary file and renamed into place, so every one it lists is whole";
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
