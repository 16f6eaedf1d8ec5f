// The training loop. A Trainer owns the model, the data source, the optimizer and the run
// directory runs/<name>/, runs the step, and calls callbacks at the events of callback.h.
//
//   frugal::Trainer t(frugal::resolve_config("my.toml", {}, frugal::process_environment()));
//   nlohmann::json summary = t.fit();
//
// Writes: config.toml (resolved, with origins), metrics.jsonl, summary.json,
// final/model.safetensors. Throws ConfigError/DataError for bad input, IoError for disk trouble.
#pragma once

#include <memory>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "frugal/core/config_loader.h"
#include "frugal/train/callback.h"

namespace frugal {

struct TrainerOptions {
  bool overwrite = false;  // replace an existing runs/<name>/ instead of refusing
  bool quiet = false;      // no banner or progress display (metrics files are still written)
  std::vector<std::shared_ptr<Callback>> callbacks;  // user observers, called after built-ins
};

class Trainer {
 public:
  explicit Trainer(ResolvedConfig config, TrainerOptions options = {});
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // Trains to the end (or until a callback requests a stop) and returns the summary that was
  // also written to summary.json.
  nlohmann::json fit();

  const std::string& run_dir() const;

 private:
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace frugal
