// The internal-error channel; see errors.h.
#include "frugal/core/errors.h"

namespace frugal {

namespace detail {

void throw_internal_error(const char* file, int line, const char* condition, const std::string& message) {
  throw InternalError(std::string("a bug in frugal (please report it) at ") + file + ":" + std::to_string(line) + ": " +
                      message + " [" + condition + " failed]");
}

}  // namespace detail

}  // namespace frugal
