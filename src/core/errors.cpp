// The internal-error channel, and errors rethrown with context; see errors.h.
#include "frugal/core/errors.h"

namespace frugal {

void throw_with_context(const Error& e, const std::string& context) {
  const std::string what = context + e.what();
  if (dynamic_cast<const ConfigError*>(&e)) throw ConfigError(what);
  if (dynamic_cast<const DataError*>(&e)) throw DataError(what);
  if (dynamic_cast<const CheckpointError*>(&e)) throw CheckpointError(what);
  if (const auto* io = dynamic_cast<const IoError*>(&e)) throw IoError(what, io->error_number());
  if (dynamic_cast<const DistError*>(&e)) throw DistError(what);
  if (dynamic_cast<const GuardStop*>(&e)) throw GuardStop(what);
  if (dynamic_cast<const InternalError*>(&e)) throw InternalError(what);
  throw Error(what);
}

namespace detail {

void throw_internal_error(const char* file, int line, const char* condition, const std::string& message) {
  throw InternalError(std::string("a bug in frugal (please report it) at ") + file + ":" + std::to_string(line) + ": " +
                      message + " [" + condition + " failed]");
}

}  // namespace detail

}  // namespace frugal
