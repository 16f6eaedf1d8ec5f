// The training loop. A Trainer owns the task (model, loss, data source; train/task.h), the
// optimizer and the run directory runs/<name>/, runs the step, and calls callbacks at the events of
// callback.h.
//
//   // the reference GPT on data.source (what `frugal train` runs):
//   frugal::Trainer t(frugal::resolve_config("my.toml", {}, frugal::process_environment()));
//   // any torch::nn::Module with its loss and data (docs/library.md):
//   frugal::Trainer u(rc, frugal::make_task(net, my_loss));
//   nlohmann::json summary = t.fit();
//
// Writes: config.toml (resolved, with origins), metrics.jsonl, summary.json,
// final/model.safetensors, checkpoints/step-NNNNNNNN/ (docs/formats/checkpoint.md). Throws
// ConfigError/DataError for bad input, IoError for disk trouble, CheckpointError for a checkpoint
// that cannot be resumed from.
//
// Stops: fit() returns normally for every stop; stop_kind() and summary["stop_kind"] say why
// ("completed", "callback", "early_stop", "max_minutes", "preempted" after a stop signal, "guard"
// when the divergence guard gave up, "budget"); core/exit_code.h maps them to exit codes.
//
// Resume: TrainerOptions::resume = "auto" continues from the newest checkpoint under
// runs/<name>/checkpoints that verifies (or starts afresh when there is none); a path continues
// from that checkpoint. A resumed run reproduces the uninterrupted one bitwise on CPU.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "frugal/core/callback.h"
#include "frugal/core/config_loader.h"
#include "frugal/train/data_parallelism.h"
#include "frugal/train/task.h"

namespace frugal {

struct TrainerOptions {
  bool overwrite = false;                            // replace an existing runs/<name>/ instead of refusing
  bool quiet = false;                                // no banner or progress display (metrics files are still written)
  std::vector<std::shared_ptr<Callback>> callbacks;  // user observers, called after built-ins
  std::string resume;                                // "" = fresh run, "auto" = newest sound checkpoint, or a path
  // Install SIGTERM/SIGINT/SIGUSR1 handlers for the trainer's lifetime (train/preemption.h): a
  // signal finishes the step, writes a checkpoint and stops with stop_kind "preempted".
  bool handle_signals = false;
  // Multi-process data parallel (docs/distributed.md): dist::data_parallel_factory(dist::connect(...)).
  // The default is a single process. Rank 0 writes the run directory; every rank trains.
  DataParallelFactory data_parallel;
  // Progress as one JSON object per log step on stdout (`frugal train --json`); the banner and
  // other human lines go to stderr.
  bool json = false;
  // End the run after this step, keeping the schedule of train.steps (train/stop_at_step.h;
  // `frugal train --stop-at-step N`); 0 = run to the end.
  int64_t stop_at_step = 0;
  // A probe run (tune's candidates, plan's probe, the smoke test): it trains exactly train.steps
  // steps into its own directory and acts on nothing outside it. The callback connector leaves out
  // the trackers, the dashboard, the profiler, the deadline guard (notice poll and deadline
  // actions), the target-loss stop, early stopping, the divergence guard and the time limit, and
  // keeps the cost meter without the budget's limit and alert command, whatever the config says.
  bool probe = false;
};

// Builds the task from the resolved config (after a resumed checkpoint's precision is adopted,
// threads are set and torch is seeded with run.seed, so the model's initialisation is seeded).
using TaskFactory = std::function<Task(const Config&)>;

class Trainer {
 public:
  // The model that model.source names (the reference GPT unless "torchscript:FILE") and
  // data.source (make_model_task, train/model_task.h).
  explicit Trainer(ResolvedConfig config, TrainerOptions options = {});
  // A user task. REQUIRES: task.module and task.loss are set.
  Trainer(ResolvedConfig config, Task task, TrainerOptions options = {});
  Trainer(ResolvedConfig config, TaskFactory make_task, TrainerOptions options = {});
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // Trains to the end (or until a callback requests a stop) and returns the summary that was
  // also written to summary.json.
  nlohmann::json fit();
  // Why fit() stopped (kCompleted before it ran); exit_code_for(stop_kind()) (core/exit_code.h)
  // is what a program should return.
  StopKind stop_kind() const;

  const std::string& run_dir() const;
  // The checkpoint this trainer resumed from ("" for a fresh run).
  const std::string& resumed_from() const;
  // The live dashboard's address ("http://127.0.0.1:PORT/"; "" when monitor.http is off).
  std::string dashboard_url() const;

 private:
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace frugal
