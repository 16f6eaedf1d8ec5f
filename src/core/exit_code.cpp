// The exit-code table; see exit_code.h.
#include "frugal/core/exit_code.h"

#include <cerrno>
#include <mutex>
#include <string>
#include <utility>

#include "frugal/core/errors.h"

namespace frugal {

namespace {
std::mutex how_mu;
std::string how_text;  // set_how_to_continue's; "" until a command sets it
}  // namespace

bool is_disk_full(const std::exception& e) {
  const auto* io = dynamic_cast<const IoError*>(&e);
  return io && (io->error_number() == ENOSPC || io->error_number() == EDQUOT);
}

ExitCode exit_code_for(const std::exception& e) {
  if (dynamic_cast<const ConfigError*>(&e) || dynamic_cast<const DataError*>(&e)) return ExitCode::kBadInput;
  if (is_disk_full(e)) return ExitCode::kBadInput;  // the user frees space; nothing is broken
  if (dynamic_cast<const GuardStop*>(&e)) return ExitCode::kGuardStop;
  if (dynamic_cast<const Interrupted*>(&e)) return ExitCode::kPreempted;
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
  // Exit 2 for a config key, a flag, a path, a file or data the user named, or a full disk:
  // "bad input" for all of them, as the exit-code table says; the message names which.
  if (dynamic_cast<const ConfigError*>(&e) || dynamic_cast<const DataError*>(&e) || is_disk_full(e)) return "bad input";
  if (dynamic_cast<const GuardStop*>(&e) || dynamic_cast<const Interrupted*>(&e)) return "stopped";
  if (dynamic_cast<const InternalError*>(&e)) return "internal error";
  return "error";
}

void set_how_to_continue(std::string how) {
  std::lock_guard<std::mutex> lock(how_mu);
  how_text = std::move(how);
}

std::string error_advice(const std::exception& e) {
  if (!is_disk_full(e)) return "";
  std::string how;
  {
    std::lock_guard<std::mutex> lock(how_mu);
    how = how_text.empty() ? "run the command again" : how_text;
  }
  const bool quota = dynamic_cast<const IoError&>(e).error_number() == EDQUOT;
  return std::string(quota ? "the disk quota is used up" : "the disk is full") +
         ". Free space on it (old runs; old checkpoints: `frugal archive`, or a lower checkpoint.keep_last, "
         "which a resumed run applies as it starts), then " +
         how;
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
