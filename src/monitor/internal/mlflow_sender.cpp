// The MLflow tracker's sender thread; see mlflow_sender.h.
#include "monitor/internal/mlflow_sender.h"

#include <sstream>

#include "frugal/ckpt/run_dir.h"
#include "frugal/core/atomic_file.h"
#include "frugal/monitor/metrics_writer.h"
#include "frugal/monitor/trackers.h"

namespace frugal {

using namespace detail::mlflow;  // NOLINT(google-build-using-namespace): this file's constants

// Continues the run named in mlflow.json (a resume on the same server); false when there is none.
bool MlflowTracker::Sender::continue_run() {
  const std::string path = RunDir(facts.run_dir).mlflow();
  if (!facts.resuming || !std::filesystem::exists(path)) return false;
  const auto kept = nlohmann::json::parse(read_file(path), nullptr, false);
  const auto text = [&kept](const char* key) {
    const auto it = kept.is_object() ? kept.find(key) : kept.end();
    return it != kept.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  if (text("uri") != track.mlflow_uri || text("run_id").empty()) return false;
  // A copied (or moved) run dir, or another experiment, is a run of its own: the original's
  // MLflow run is left as it is. (An mlflow.json of an older frugal names neither.)
  const std::string here = this_run_dir();
  if (!text("run_dir").empty() && text("run_dir") != here) {
    say(
        fmt::format("mlflow: {} names the MLflow run of {}, and this run dir is {} (a copy, or moved): a new "
                    "MLflow run is made",
                    path, text("run_dir"), here));
    return false;
  }
  if (!text("experiment").empty() && text("experiment") != track.mlflow_experiment) {
    say(
        fmt::format("mlflow: track.mlflow_experiment is now \"{}\" (the run was in \"{}\"): a new MLflow run is "
                    "made in \"{}\"",
                    track.mlflow_experiment, text("experiment"), track.mlflow_experiment));
    return false;
  }
  nlohmann::json run;
  try {
    run = client.get("runs/get", {{"run_id", text("run_id")}}, request_timeout());
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
  const auto through = kept.is_object() ? kept.find("sent_through_step") : kept.end();
  const bool known = through != kept.end() && through->is_number_integer();
  {
    std::lock_guard<std::mutex> lock(mu);
    acked_step = known ? std::min(through->get<int64_t>(), start_step) : start_step;
  }
  if (known) resend_unsent(through->get<int64_t>());
  save_run_file(/*force=*/true);
  return true;
}

// The points of steps after `sent_through` and up to the resume's step, from metrics.jsonl: the
// killed session had them queued, unsent (the resumed session logs only the steps after its
// checkpoint). They go before the new points; one sent twice is harmless (a reader takes each
// step's newest point).
void MlflowTracker::Sender::resend_unsent(int64_t sent_through) {
  if (sent_through >= start_step) return;
  const std::string path = RunDir(facts.run_dir).metrics();
  std::istringstream in;
  try {
    in.str(read_file(path));
  } catch (const std::exception& e) {
    say(fmt::format("warning: mlflow: the points the run's last session had not sent are not sent: {}", e.what()));
    return;
  }
  std::vector<detail::MlflowPoint> points;
  const int64_t ms = unix_ms();
  for (std::string text; std::getline(in, text);) {
    const auto line = nlohmann::ordered_json::parse(text, nullptr, false);
    if (!line.is_object() || !line.contains("step") || !line["step"].is_number_integer()) continue;
    const int64_t step = line["step"].get<int64_t>();
    if (step <= sent_through || step > start_step) continue;
    for (const TrackedScalar& sc : tracked_scalars(line)) points.push_back({sc.tag, sc.value, step, ms});
  }
  if (points.empty()) return;
  say(fmt::format("mlflow: sending the {} points of steps {} to {} that the run's last session had not sent",
                  points.size(), points.front().step, points.back().step));
  std::lock_guard<std::mutex> lock(mu);
  queue.insert(queue.begin(), points.begin(), points.end());
}

// runs/<name>/mlflow.json: the server, experiment and run this run dir logs to, and the step
// through which the server has every point (rewritten every few seconds while points are sent).
void MlflowTracker::Sender::save_run_file(bool force) {
  int64_t through;
  {
    std::lock_guard<std::mutex> lock(mu);
    through = acked_step;
  }
  if (!force && (through == saved_step || Clock::now() - saved_at < kRunFileEvery)) return;
  nlohmann::json j = {{"uri", track.mlflow_uri},
                      {"experiment", track.mlflow_experiment},
                      {"experiment_id", experiment_id},
                      {"run_id", run_id},
                      {"run_dir", this_run_dir()}};
  if (through >= 0) j["sent_through_step"] = through;
  try {
    write_file_atomic(RunDir(facts.run_dir).mlflow(), j.dump(2) + "\n");
    saved_step = through;
    saved_at = Clock::now();
  } catch (const std::exception& e) {
    say(fmt::format("warning: mlflow: {}", e.what()));
  }
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
  {
    std::lock_guard<std::mutex> lock(mu);
    acked_step = start_step;  // a new run: the steps before this session's (none, or a resume's) are not sent
  }
  save_run_file(/*force=*/true);
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
  std::lock_guard<std::mutex> lock(mu);
  ready = true;
}

// Waits before trying a server that did not answer again (doubling up to 2 s); false when the
// run's end has no time left for it.
bool MlflowTracker::Sender::wait_before_retry(double& backoff) {
  std::unique_lock<std::mutex> lock(mu);
  auto until = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(backoff));
  backoff = std::min(backoff * 2, 2.0);
  if (closing) until = std::min(until, deadline);
  // In slices: a stop signal does not wake the condition variable.
  while (!end_is_over() && Clock::now() < until)
    cv.wait_until(lock, std::min(until, Clock::now() + std::chrono::milliseconds(50)));
  return !end_is_over();
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
      if (queue.empty() || end_is_over()) break;
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
      {
        std::lock_guard<std::mutex> lock(mu);
        sent += static_cast<int64_t>(batch.size());
        // The queue runs in step order: a step is complete once no point of it is left queued.
        const int64_t last = batch.back().step;
        acked_step = std::max(acked_step, queue.empty() || queue.front().step > last ? last : last - 1);
      }
      save_run_file(/*force=*/false);
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
  if (ready) save_run_file(/*force=*/true);
  std::lock_guard<std::mutex> lock(mu);
  dropped += static_cast<int64_t>(queue.size());
  queue.clear();
}

}  // namespace frugal
