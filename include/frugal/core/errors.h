// The small exception taxonomy frugal throws. Every user-facing error says what was wrong, where
// (file, key, line, shard, offset) and what to do. Exit codes come from one table
// (core/exit_code.h); the library itself never exits, so the trainer can still write a checkpoint.
//
// Two channels, as c10 has TORCH_CHECK and TORCH_INTERNAL_ASSERT:
//   FRUGAL_CHECK(cond, ConfigError, message)   bad input from the user: exit 2 (or the error's code)
//   FRUGAL_INTERNAL_ASSERT(cond, message)      an invariant of frugal's own code broke: a bug,
//                                              exit 1, reported as one (InternalError)
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

// A file-system failure (open, write, fsync, rename). Exit code 1, except for a full disk or an
// exhausted quota (ENOSPC, EDQUOT): exit 2, what the user must fix (core/exit_code.h).
class IoError : public Error {
 public:
  using Error::Error;
  // `error_number`: the errno of the call that failed (0: none known).
  IoError(const std::string& what, int error_number) : Error(what), error_number_(error_number) {}

  int error_number() const { return error_number_; }

 private:
  int error_number_ = 0;
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

// A stop signal (SIGINT, SIGTERM, SIGUSR1, SIGHUP) ended a command that keeps nothing to continue
// from (`frugal tune`, `frugal plan`: their probes' temporary folders are removed as it unwinds).
// Exit code 75, as a stopped run or search; the message says what was not written.
class Interrupted : public Error {
 public:
  using Error::Error;
};

// A bug in frugal: a call that its own code should never make (a record added to a token shard,
// a writer finished twice). Exit code 1; the message names the file and line and asks for a report.
class InternalError : public Error {
 public:
  using Error::Error;
};

// Runs `read` (which reads a checkpoint, a weights file or an archive) and turns a CheckpointError
// from it into a DataError (exit 2) whose message starts with `named`: for a file the user named
// on the command line or in the config (--resume PATH, --weights, model.init_from, restore), an
// unusable one is bad input, as the help says, not a failure of frugal.
template <typename Read>
auto reading_named_input(const std::string& named, Read&& read) -> decltype(read()) {
  try {
    return read();
  } catch (const CheckpointError& e) {
    throw DataError(named + ": " + e.what());
  }
}

// Throws `e` again as an error of its own kind (a ConfigError stays a ConfigError, an IoError keeps
// its errno) whose message is `context` followed by e's: a step that adds where an error arose
// (`frugal train`'s smoke test) leaves its exit code (core/exit_code.h) as it was.
[[noreturn]] void throw_with_context(const Error& e, const std::string& context);

namespace detail {
[[noreturn]] void throw_internal_error(const char* file, int line, const char* condition, const std::string& message);
}  // namespace detail

}  // namespace frugal

// Throws ErrorType(message) unless `cond` holds: a user-facing check. `message` says what was
// wrong, where and what to do.
#define FRUGAL_CHECK(cond, ErrorType, message) \
  do {                                         \
    if (!(cond)) throw ErrorType(message);     \
  } while (false)

// Throws InternalError unless `cond` holds: an invariant of frugal's own code.
#define FRUGAL_INTERNAL_ASSERT(cond, message)                                                \
  do {                                                                                       \
    if (!(cond)) ::frugal::detail::throw_internal_error(__FILE__, __LINE__, #cond, message); \
  } while (false)
