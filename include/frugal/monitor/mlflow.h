// An MLflow tracking server as a run's tracker ([track] mlflow_uri = "http://HOST:PORT"), through
// MLflow's REST API (docs/observability.md, "Trackers").
//
// What it sends (rank 0 alone):
//   - the run: created in track.mlflow_experiment (made when missing) and named after run.name,
//     with params (the resolved config, one param per key; secrets left out) and tags
//     (frugal.version, frugal.device, frugal.levers, frugal.run_dir);
//   - metrics: every scalar of each metrics.jsonl line (monitor/trackers.h) at its step;
//   - artifacts at the end: summary.json, report.html, config.toml (and final/model.safetensors
//     with track.mlflow_weights), when the server stores artifacts itself (`mlflow server`'s
//     default, mlflow-artifacts:/); and the run's status (FINISHED, FAILED, or KILLED for a
//     preempted run, which a resume sets RUNNING again).
// The run id is kept in runs/<name>/mlflow.json, so a resumed run continues the same MLflow run
// (a copied or moved run dir, or a changed track.mlflow_experiment, makes a new one);
// the steps the killed session had sent past its checkpoint are sent again, and the run's tag
// frugal.resumes lists "STEP@TIME" for each resume (a reader takes each step's newest point).
//
// A tracker that is down or slow never stops or slows training: the trainer thread only puts
// points into a bounded queue (track.mlflow_queue); a background thread sends them in batches
// (what gathered in a second, or 1,000 points),
// retries a server that does not answer, and warns once (and again when it answers). Every request
// is bounded as a whole (a server that trickles its answer is cut at the deadline) and its reply
// is capped. The run's end has one deadline, track.mlflow_timeout_s, for all of it: the run's
// status first, then what is queued, then the artifacts (the weights get time for their size on
// top); a stop signal during it cuts it short; a preempted run gives MLflow at most 0.5 s (its
// status), so exit 75 is never held up. What was never sent is counted in
// summary.json's trackers.mlflow (sent, dropped). Credentials: MLFLOW_TRACKING_TOKEN (a bearer
// token), or MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD (basic auth), read from the
// environment, never written anywhere.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "frugal/core/callback.h"
#include "frugal/core/config.h"

namespace frugal {

// What a run tells MLflow about itself besides its metrics.
struct MlflowRunFacts {
  std::string run_name;
  std::string run_dir;
  bool resuming = false;                                    // continue the run named in <run_dir>/mlflow.json, if any
  std::vector<std::pair<std::string, std::string>> params;  // key -> value (mlflow_params())
  std::map<std::string, std::string> tags;
  // True once a stop signal has come (the trainer's flag): the end of the run then cuts its
  // requests at once instead of waiting out their deadline. Empty: never.
  std::function<bool()> stop_requested;
};

// The resolved config as MLflow params: every key of the schema but the secrets, strings
// unquoted, other values as TOML writes them.
std::vector<std::pair<std::string, std::string>> mlflow_params(const Config& c);

class MlflowTracker : public Callback {
 public:
  MlflowTracker(const TrackConfig& track, MlflowRunFacts facts);
  ~MlflowTracker() override;
  MlflowTracker(const MlflowTracker&) = delete;
  MlflowTracker& operator=(const MlflowTracker&) = delete;

  void on_train_begin(const RunInfo& info) override;
  void on_step_end(const StepMetrics& m, Control& control) override;
  void on_eval_end(const EvalMetrics& m, Control& control) override;
  // Starts the run's end (its one deadline): sends the run's status, waits for the queue, then
  // records trackers.mlflow.
  void add_to_summary(nlohmann::ordered_json& summary) override;
  // The artifacts, in what is left of the end's deadline (none for a preempted run).
  void on_train_end(const nlohmann::json& summary) override;

  struct Sender;  // the background thread and its queue (mlflow.cpp)

 private:
  void print_warnings();
  TrackConfig track_;
  double add_s_ = 0;  // the trainer thread's time handing points to the sender
  bool preempted_ = false;
  MlflowRunFacts facts_;
  std::unique_ptr<Sender> sender_;
};

}  // namespace frugal
