// Test helper: TrainerOptions for a quiet run that may replace an existing run directory.
#pragma once

#include <memory>
#include <utility>
#include <vector>

#include "frugal/train/trainer.h"

namespace frugal::test {

inline TrainerOptions quiet_overwrite(std::vector<std::shared_ptr<Callback>> callbacks = {}) {
  TrainerOptions o;
  o.overwrite = true;
  o.quiet = true;
  o.callbacks = std::move(callbacks);
  return o;
}

}  // namespace frugal::test
