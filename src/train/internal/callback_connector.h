// The one place that names the concrete callbacks and wires them from the config (Lightning's
// _CallbackConnector), as one table of kinds (callback_connector.cpp): the producers first (cost,
// MFU, noise scale fill the step's figures), then the observers (progress, metrics file, trackers,
// checkpoint cadence, early stopping, target, deadline, divergence guard, profiler, dashboard),
// then the user's, the stop at a step (TrainerOptions::stop_at_step), and last the time limit.
// The same table says what a probe run (TrainerOptions::probe) leaves out. The loop iterates the
// list through the Callback interface only.
#pragma once

#include <c10/core/Device.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "frugal/core/callback.h"
#include "frugal/core/config.h"
#include "frugal/train/run_setup.h"

namespace frugal::detail {

struct ConnectorContext {
  const Config* config = nullptr;
  const RunSetup* setup = nullptr;
  std::string run_dir;
  bool writer = true;     // this process writes the run directory (rank 0)
  bool resuming = false;  // metrics.jsonl is appended to, not started
  bool quiet = false, json = false;
  c10::Device device{c10::kCPU};
  std::vector<std::shared_ptr<Callback>> user;  // TrainerOptions::callbacks
  int64_t stop_at_step = 0;                     // TrainerOptions::stop_at_step (0 = none)
  bool probe = false;                           // TrainerOptions::probe
};

struct Connection {
  std::vector<std::shared_ptr<Callback>> callbacks;  // in the order the loop calls them
  std::vector<std::string> kinds;                    // each callback's kind (callback_kinds())
  std::string dashboard_url;                         // "" = no dashboard
};

// Every kind of callback the connector can wire, in the loop's order, each with whether a probe
// run keeps it (ConnectorContext::probe): a probe leaves out what acts on the world or ends a run
// early (trackers, dashboard, profiler, deadline guard, target, early stopping, divergence guard,
// time limit) and keeps the cost meter without the budget's limit and alert command.
std::vector<std::pair<std::string, bool>> callback_kinds();

// Throws ConfigError for a deadline that has passed and for two callbacks sharing a state key.
Connection connect_callbacks(const ConnectorContext& ctx);

// ConfigError when two callbacks keep their checkpointed state under the same key (one would
// overwrite the other's in every checkpoint).
void check_state_keys(const std::vector<std::shared_ptr<Callback>>& callbacks);

}  // namespace frugal::detail
