// The MLflow tracker; see mlflow.h.
#include "frugal/monitor/mlflow.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <mutex>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "frugal/ckpt/run_dir.h"
#include "frugal/core/atomic_file.h"
#include "frugal/core/config_loader.h"
#include "frugal/core/console.h"
#include "frugal/core/errors.h"
#include "frugal/core/wall_clock.h"
#include "frugal/monitor/metrics_writer.h"
#include "frugal/monitor/trackers.h"
#include "monitor/internal/mlflow_client.h"

namespace frugal {
namespace detail {
struct MlflowPoint {  // one metric value, queued for the sender
  std::string key;
  double value;
  int64_t step, ms;
};
}  // namespace detail
namespace {

using Clock = std::chrono::steady_clock;
using detail::MlflowError;

constexpr size_t kBatchMetrics = 1000;  // MLflow's limit per log-batch request
constexpr size_t kBatchParams = 100;
constexpr size_t kMaxParamValue = 6000;
// The sender gathers points for up to this long (or a full batch) before a request: a few
// requests a second at most, whatever the log rate, so that neither the sender nor the server
// takes much of the machine.
constexpr std::chrono::milliseconds kGather{1000};

int64_t unix_ms() { return std::llround(unix_now() * 1000); }

// MLflow's run status for summary.json's stop_kind: a preempted run is KILLED (a resume sets it
// RUNNING again), a diverged one FAILED, every other stop FINISHED.
std::string status_for(const std::string& stop_kind) {
  if (stop_kind == "preempted") return "KILLED";
  if (stop_kind == "guard") return "FAILED";
  return "FINISHED";
}

}  // namespace

std::vector<std::pair<std::string, std::string>> mlflow_params(const Config& c) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const KeySpec& k : config_schema()) {
    if (k.secret) continue;
    const ConfigValue v = k.get(c);
    std::string text = std::holds_alternative<std::string>(v) ? std::get<std::string>(v) : format_value(v);
    if (text.size() > kMaxParamValue) text = text.substr(0, kMaxParamValue - 3) + "...";
    out.emplace_back(k.key, text);
  }
  return out;
}

struct MlflowTracker::Sender {
  Sender(const TrackConfig& t, const MlflowRunFacts& f)
      : track(t), facts(f), client(parse_http_url(t.mlflow_uri, "track.mlflow_uri")) {}

  // --- the trainer thread's side ---
  void add(const nlohmann::ordered_json& line, int64_t step) {
    const int64_t ms = unix_ms();
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
    if (was_empty || queue.size() >= kBatchMetrics) cv.notify_one();
  }
  void start(int64_t resume_step) {
    start_step = resume_step;
    thread = std::thread([this] { run(); });
  }
  // Stop taking points; send what is queued until the deadline; join.
  void finish() {
    if (!thread.joinable()) return;
    {
      std::lock_guard<std::mutex> lock(mu);
      closing = true;
      deadline = Clock::now() +
                 std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(track.mlflow_timeout_s));
    }
    cv.notify_all();
    thread.join();
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
  bool closing = false;
  Clock::time_point deadline;
  int64_t sent = 0, dropped = 0;
  std::vector<std::string> messages;
  // The sender thread's own (read by the trainer thread only after finish()).
  std::string experiment_id, run_id, artifact_uri;
  size_t params_sent = 0;
  bool ready = false, disabled = false, down = false;
};

// Continues the run named in mlflow.json (a resume on the same server); false when there is none.
bool MlflowTracker::Sender::continue_run() {
  const std::string path = RunDir(facts.run_dir).mlflow();
  if (!facts.resuming || !std::filesystem::exists(path)) return false;
  const auto kept = nlohmann::json::parse(read_file(path), nullptr, false);
  if (!kept.is_object() || kept.value("uri", "") != track.mlflow_uri || !kept.contains("run_id")) return false;
  nlohmann::json run;
  try {
    run = client.get("runs/get", {{"run_id", kept.at("run_id").get<std::string>()}}, request_timeout());
  } catch (const MlflowError& e) {
    if (e.retryable) throw;
    say(fmt::format("warning: mlflow: the run {} of {} is gone ({}); a new run is made", kept.at("run_id").dump(), path,
                    e.what()));
    return false;
  }
  const auto& info = run.at("run").at("info");
  run_id = info.at("run_id").get<std::string>();
  experiment_id = info.at("experiment_id").get<std::string>();
  artifact_uri = info.value("artifact_uri", "");
  std::string resumes = fmt::format("{}@{}", start_step, format_utc(unix_now()));
  for (const auto& tag : run.at("run").at("data").value("tags", nlohmann::json::array()))
    if (tag.value("key", "") == "frugal.resumes") resumes = tag.value("value", "") + "," + resumes;
  client.post("runs/update", {{"run_id", run_id}, {"status", "RUNNING"}}, request_timeout());
  client.post("runs/set-tag", {{"run_id", run_id}, {"key", "frugal.resumes"}, {"value", resumes}}, request_timeout());
  params_sent = facts.params.size();  // a run's params are fixed at its start
  say(fmt::format("mlflow: continuing run {} ({}/#/experiments/{}/runs/{})", run_id, client.base(), experiment_id,
                  run_id));
  return true;
}

void MlflowTracker::Sender::create_run() {
  if (experiment_id.empty()) {
    try {
      experiment_id =
          client.get("experiments/get-by-name", {{"experiment_name", track.mlflow_experiment}}, request_timeout())
              .at("experiment")
              .at("experiment_id")
              .get<std::string>();
    } catch (const MlflowError& e) {
      if (e.code != "RESOURCE_DOES_NOT_EXIST") throw;
      experiment_id =
          client.post("experiments/create", {{"name", track.mlflow_experiment}}, request_timeout()).at("experiment_id");
    }
  }
  nlohmann::json tags = nlohmann::json::array();
  for (const auto& [k, v] : facts.tags) tags.push_back({{"key", k}, {"value", v}});
  const nlohmann::json run = client.post(
      "runs/create",
      {{"experiment_id", experiment_id}, {"run_name", facts.run_name}, {"start_time", unix_ms()}, {"tags", tags}},
      request_timeout());
  run_id = run.at("run").at("info").at("run_id").get<std::string>();
  artifact_uri = run.at("run").at("info").value("artifact_uri", "");
  write_file_atomic(
      RunDir(facts.run_dir).mlflow(),
      nlohmann::json{{"uri", track.mlflow_uri}, {"experiment_id", experiment_id}, {"run_id", run_id}}.dump(2) + "\n");
  say(fmt::format("mlflow: run {} ({}/#/experiments/{}/runs/{})", run_id, client.base(), experiment_id, run_id));
}

void MlflowTracker::Sender::send_params() {
  while (params_sent < facts.params.size()) {
    nlohmann::json params = nlohmann::json::array();
    for (size_t i = params_sent; i < std::min(facts.params.size(), params_sent + kBatchParams); ++i)
      params.push_back({{"key", facts.params[i].first}, {"value", facts.params[i].second}});
    client.post("runs/log-batch", {{"run_id", run_id}, {"params", params}}, request_timeout());
    params_sent += params.size();
  }
}

void MlflowTracker::Sender::set_up_run() {
  if (run_id.empty() && !continue_run()) create_run();
  send_params();
  ready = true;
}

// Waits before trying a server that did not answer again (doubling up to 2 s); false when the
// run's end has no time left for it.
bool MlflowTracker::Sender::wait_before_retry(double& backoff) {
  std::unique_lock<std::mutex> lock(mu);
  auto until = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(backoff));
  backoff = std::min(backoff * 2, 2.0);
  if (closing) {
    if (Clock::now() >= deadline) return false;
    until = std::min(until, deadline);
  }
  cv.wait_until(lock, until, [&] { return closing && Clock::now() >= deadline; });
  return !(closing && Clock::now() >= deadline);
}

void MlflowTracker::Sender::run() {
  double backoff = 0.25;
  while (true) {
    if (!ready && !disabled) {
      try {
        set_up_run();
        came_back();
        backoff = 0.25;
      } catch (const MlflowError& e) {
        if (e.retryable) {
          went_down(e.what());
          if (!wait_before_retry(backoff)) break;
          continue;
        }
        disabled = true;
        const bool auth = e.status == 401 || e.status == 403;
        say(
            fmt::format("warning: mlflow: {}; nothing more is sent to it (what is dropped is counted in "
                        "summary.json){}",
                        e.what(),
                        auth ? ". The server wants credentials: set MLFLOW_TRACKING_TOKEN, or "
                               "MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD, in the environment"
                             : ""));
      } catch (const std::exception& e) {
        disabled = true;
        say(fmt::format("warning: mlflow: {}; nothing more is sent to it", e.what()));
      }
    }
    std::vector<detail::MlflowPoint> batch;
    {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return closing || !queue.empty(); });
      cv.wait_until(lock, Clock::now() + kGather, [&] { return closing || queue.size() >= kBatchMetrics; });
      if (queue.empty() || (closing && Clock::now() >= deadline)) break;
      const size_t n = std::min(queue.size(), kBatchMetrics);
      batch.assign(queue.begin(), queue.begin() + static_cast<std::ptrdiff_t>(n));
      queue.erase(queue.begin(), queue.begin() + static_cast<std::ptrdiff_t>(n));
      if (disabled) {
        dropped += static_cast<int64_t>(n);
        continue;
      }
    }
    nlohmann::json metrics = nlohmann::json::array();
    for (const detail::MlflowPoint& p : batch)
      metrics.push_back({{"key", p.key}, {"value", p.value}, {"timestamp", p.ms}, {"step", p.step}});
    try {
      client.post("runs/log-batch", {{"run_id", run_id}, {"metrics", metrics}}, request_timeout());
      came_back();
      backoff = 0.25;
      std::lock_guard<std::mutex> lock(mu);
      sent += static_cast<int64_t>(batch.size());
    } catch (const MlflowError& e) {
      if (!e.retryable) {
        say(fmt::format("warning: mlflow: {}; {} points dropped", e.what(), batch.size()));
        std::lock_guard<std::mutex> lock(mu);
        dropped += static_cast<int64_t>(batch.size());
        continue;
      }
      went_down(e.what());
      {
        std::lock_guard<std::mutex> lock(mu);
        queue.insert(queue.begin(), batch.begin(), batch.end());
      }
      if (!wait_before_retry(backoff)) break;
    }
  }
  std::lock_guard<std::mutex> lock(mu);
  dropped += static_cast<int64_t>(queue.size());
  queue.clear();
}

MlflowTracker::MlflowTracker(const TrackConfig& track, MlflowRunFacts facts)
    : track_(track), facts_(std::move(facts)), sender_(std::make_unique<Sender>(track_, facts_)) {}

MlflowTracker::~MlflowTracker() {
  if (sender_) sender_->finish();
}

void MlflowTracker::print_warnings() {
  for (const std::string& m : sender_->take_messages()) Console::get().line(m);
}

void MlflowTracker::on_train_begin(const RunInfo& info) { sender_->start(info.start_step); }

void MlflowTracker::on_step_end(const StepMetrics& m, Control&) {
  if (m.logged) {
    const auto start = Clock::now();
    sender_->add(step_json(m), m.step);
    add_s_ += seconds_since(start);
  }
  print_warnings();
}

void MlflowTracker::on_eval_end(const EvalMetrics& m, Control&) {
  const auto start = Clock::now();
  sender_->add(eval_json(m), m.step);
  add_s_ += seconds_since(start);
  print_warnings();
}

void MlflowTracker::add_to_summary(nlohmann::ordered_json& summary) {
  sender_->finish();
  print_warnings();
  const Sender& s = *sender_;
  summary["trackers"]["mlflow"] = {{"uri", track_.mlflow_uri}, {"experiment_id", s.experiment_id},
                                   {"run_id", s.run_id},       {"sent", s.sent},
                                   {"dropped", s.dropped},     {"trainer_thread_s", add_s_}};
  if (s.dropped > 0)
    Console::get().line(
        fmt::format("warning: mlflow: {} metric points were not sent to {} (summary.json: "
                    "trackers.mlflow.dropped)",
                    s.dropped, s.client.base()));
}

void MlflowTracker::on_train_end(const nlohmann::json& summary) {
  sender_->finish();
  Sender& s = *sender_;
  if (!s.ready) return;
  const double timeout = track_.mlflow_timeout_s;
  try {
    const std::string prefix = "mlflow-artifacts:/";
    if (s.artifact_uri.rfind(prefix, 0) == 0) {
      const RunDir dir(facts_.run_dir);
      std::vector<std::string> files = {dir.summary(), dir.report(), dir.config()};
      if (track_.mlflow_weights) files.push_back(dir.final_weights());
      for (const std::string& f : files)
        if (std::filesystem::exists(f))
          s.client.put_file(s.artifact_uri.substr(prefix.size()) + "/" + std::filesystem::path(f).filename().string(),
                            f, timeout);
    } else {
      Console::get().line(
          fmt::format("warning: mlflow: no artifacts sent: the server keeps them at {}, which frugal "
                      "cannot write to (start `mlflow server` with --serve-artifacts)",
                      s.artifact_uri));
    }
    s.client.post("runs/update",
                  {{"run_id", s.run_id},
                   {"status", status_for(summary.value("stop_kind", "completed"))},
                   {"end_time", unix_ms()}},
                  timeout);
  } catch (const std::exception& e) {
    Console::get().line(fmt::format("warning: mlflow: the run's end was not recorded: {}", e.what()));
  }
}

}  // namespace frugal
