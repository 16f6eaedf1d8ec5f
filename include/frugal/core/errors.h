// The small exception taxonomy frugal throws. Every user-facing error says what was wrong, where
// (file, key, line, shard, offset) and what to do. Only the CLI's main() maps these to exit codes
// (see exit_code()); the library itself never exits, so the trainer can still write a checkpoint.
#pragma once

#include <stdexcept>
#include <string>

namespace frugal {

// Base of every error frugal raises on purpose.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A bad configuration value, key, file or command-line argument. Exit code 2.
class ConfigError : public Error {
 public:
  using Error::Error;
};

// Bad or missing input data (a corpus, a shard). Exit code 2.
class DataError : public Error {
 public:
  using Error::Error;
};

// A checkpoint that cannot be written or read back. Exit code 1 unless wrapped otherwise.
class CheckpointError : public Error {
 public:
  using Error::Error;
};

// A file-system failure (open, write, fsync, rename). Exit code 1.
class IoError : public Error {
 public:
  using Error::Error;
};

// A peer process of a multi-process run died, never arrived or stopped answering within
// dist.timeout_s (src/dist). Exit code 1.
class DistError : public Error {
 public:
  using Error::Error;
};

// A guard (budget, divergence) stopped the run on purpose. Exit code 3.
class GuardStop : public Error {
 public:
  using Error::Error;
};

// Exit codes, the contract documented in README.md and docs/cli.md.
enum ExitCode : int {
  kExitOk = 0,
  kExitFailure = 1,
  kExitBadInput = 2,
  kExitGuard = 3,
  kExitPreempted = 75,
};

}  // namespace frugal
