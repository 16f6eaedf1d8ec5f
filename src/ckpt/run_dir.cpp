// Paths of a run directory; see run_dir.h and docs/formats/run_dir.md.
#include "frugal/ckpt/run_dir.h"

#include <filesystem>

#include "frugal/core/config.h"

namespace frugal {

RunDir RunDir::of(const Config& c) { return RunDir((std::filesystem::path(c.run.out_dir) / c.run.name).string()); }

bool RunDir::holds_run() const {
  // A path that cannot be looked at (a loop of links, a name too long) throws filesystem_error,
  // which the CLI reports as bad input naming the path (exit 2).
  for (const std::string& p : {metrics(), summary(), final_dir(), checkpoints()})
    if (std::filesystem::exists(p)) return true;
  return false;
}

}  // namespace frugal
