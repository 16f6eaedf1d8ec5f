// The MLflow tracker's sender: the queue the trainer thread fills, and the background thread
// that makes or continues the MLflow run and sends the queue in batches (monitor/mlflow.h says
// what it does; mlflow_sender.cpp holds the thread's side).
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "frugal/core/wall_clock.h"
#include "frugal/monitor/mlflow.h"
#include "frugal/monitor/trackers.h"
#include "monitor/internal/mlflow_client.h"

namespace frugal {
namespace detail {

struct MlflowPoint {  // one metric value, queued for the sender
  std::string key;
  double value;
  int64_t step, ms;
};

namespace mlflow {
using Clock = std::chrono::steady_clock;
constexpr size_t kBatchMetrics = 1000;  // MLflow's limit per log-batch request
constexpr size_t kBatchParams = 100;
// The sender gathers points for up to this long (or a full batch) before a request: a few
// requests a second at most, whatever the log rate, so that neither the sender nor the server
// takes much of the machine.
constexpr std::chrono::milliseconds kGather{1000};
// How often mlflow.json records the step the server has every point through (at most).
constexpr std::chrono::seconds kRunFileEvery{5};

inline int64_t unix_ms() { return std::llround(unix_now() * 1000); }
}  // namespace mlflow

}  // namespace detail

struct MlflowTracker::Sender {
  using Clock = detail::mlflow::Clock;
  using MlflowError = detail::MlflowError;

  Sender(const TrackConfig& t, const MlflowRunFacts& f)
      : track(t), facts(f), client(parse_http_url(t.mlflow_uri, "track.mlflow_uri"), [this] { return give_up(); }) {}

  // --- the trainer thread's side ---
  void add(const nlohmann::ordered_json& line, int64_t step) {
    const int64_t ms = detail::mlflow::unix_ms();
    std::lock_guard<std::mutex> lock(mu);
    const bool was_empty = queue.empty();
    for (const TrackedScalar& s : tracked_scalars(line)) {
      if (static_cast<int64_t>(queue.size()) >= track.mlflow_queue) {
        ++dropped;
        continue;
      }
      queue.push_back({s.tag, s.value, step, ms});
    }
    // The sender wakes for the first point (to start its gathering window) and for a full batch.
    if (was_empty || queue.size() >= detail::mlflow::kBatchMetrics) cv.notify_one();
  }
  void start(int64_t resume_step) {
    start_step = resume_step;
    thread = std::thread([this] { run(); });
  }
  // The run's end: stop taking points; within `budget_s` from now, send the run's `status` (when
  // not empty; from this thread, beside whatever request the sender has in flight), then what is
  // queued; join.
  void finish(const std::string& status, double budget_s) {
    if (!thread.joinable()) return;
    bool run_made;
    {
      std::lock_guard<std::mutex> lock(mu);
      closing = true;
      signalled_at_end = facts.stop_requested && facts.stop_requested();
      deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(budget_s));
      run_made = ready;
    }
    cv.notify_all();
    if (run_made && !status.empty()) send_status(status);
    thread.join();
    if (!run_made && ready && !status.empty() && seconds_left() > 0) send_status(status);  // made during the end
  }
  void send_status(const std::string& status) {
    try {
      client.post("runs/update", {{"run_id", run_id}, {"status", status}, {"end_time", detail::mlflow::unix_ms()}},
                  std::max(0.05, seconds_left()));
    } catch (const MlflowError& e) {
      say(fmt::format("warning: mlflow: the run's status ({}) was not recorded: {}", status, e.what()));
    }
  }
  // Seconds left of the end's deadline (the artifacts), and more of it for a large upload.
  double seconds_left() {
    std::lock_guard<std::mutex> lock(mu);
    return std::chrono::duration<double>(deadline - Clock::now()).count();
  }
  void extend_deadline(double s) {
    std::lock_guard<std::mutex> lock(mu);
    deadline += std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
  }
  // The client's watchdog asks this every 20 ms: a request is cut once the run's end is over.
  bool give_up() {
    std::lock_guard<std::mutex> lock(mu);
    return end_is_over();
  }
  // With `mu` held: the run's end is past its deadline, or a stop signal came during it (not the
  // one that ended a preempted run).
  bool end_is_over() const {
    if (!closing) return false;
    return Clock::now() >= deadline || (!signalled_at_end && facts.stop_requested && facts.stop_requested());
  }
  std::vector<std::string> take_messages() {
    std::lock_guard<std::mutex> lock(mu);
    return std::exchange(messages, {});
  }

  // --- the sender thread ---
  void run();
  void set_up_run();
  bool continue_run();
  void create_run();
  void send_params();
  bool wait_before_retry(double& backoff);
  void resend_unsent(int64_t sent_through);
  void save_run_file(bool force);
  std::string this_run_dir() const {
    return std::filesystem::weakly_canonical(std::filesystem::absolute(facts.run_dir)).string();
  }
  double request_timeout() {
    std::lock_guard<std::mutex> lock(mu);
    if (!closing) return track.mlflow_timeout_s;
    return std::max(0.05, std::chrono::duration<double>(deadline - Clock::now()).count());
  }
  void say(std::string text) {
    std::lock_guard<std::mutex> lock(mu);
    messages.push_back(std::move(text));
  }
  void went_down(const std::string& why) {
    if (down) return;
    down = true;
    say(
        fmt::format("warning: mlflow: {} did not answer ({}); training goes on, metrics wait in a queue of {} "
                    "points (more are dropped, counted in summary.json)",
                    client.base(), why, track.mlflow_queue));
  }
  void came_back() {
    if (!down) return;
    down = false;
    say(fmt::format("mlflow: {} answers again; the queued metrics are being sent", client.base()));
  }

  TrackConfig track;
  MlflowRunFacts facts;
  detail::MlflowClient client;
  int64_t start_step = 0;
  std::thread thread;
  std::mutex mu;
  std::condition_variable cv;
  std::deque<detail::MlflowPoint> queue;
  bool closing = false, signalled_at_end = false;
  Clock::time_point deadline;
  int64_t sent = 0, dropped = 0;
  std::vector<std::string> messages;
  // The sender thread's own; the trainer thread reads them once `ready` (under `mu`) says the
  // run is made, or after finish().
  std::string experiment_id, run_id, artifact_uri;
  size_t params_sent = 0;
  bool ready = false, disabled = false, down = false;
  // The step through which the server has every point (under `mu`; -1: not known), and what
  // mlflow.json says of it.
  int64_t acked_step = -1, saved_step = -1;
  Clock::time_point saved_at{};
};

}  // namespace frugal
