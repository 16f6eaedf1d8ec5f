// The MLflow tracker; see mlflow.h.
#include "frugal/monitor/mlflow.h"

#include <algorithm>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "frugal/ckpt/run_dir.h"
#include "frugal/core/config_loader.h"
#include "frugal/core/console.h"
#include "frugal/core/errors.h"
#include "monitor/internal/mlflow_client.h"
#include "monitor/internal/mlflow_sender.h"

namespace frugal {
namespace {

using Clock = std::chrono::steady_clock;
using detail::MlflowError;

constexpr size_t kMaxParamValue = 6000;
// A preempted run's end gives MLflow this long at most (its status): exit 75 comes first.
constexpr double kPreemptedEndS = 0.5;
// The weights' upload gets time for their size on top of the end's deadline, at this rate.
constexpr double kSlowestUploadBytesPerS = 1 << 20;

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

MlflowTracker::MlflowTracker(const TrackConfig& track, MlflowRunFacts facts)
    : track_(track), facts_(std::move(facts)), sender_(std::make_unique<Sender>(track_, facts_)) {}

MlflowTracker::~MlflowTracker() {
  if (sender_) sender_->finish("", track_.mlflow_timeout_s);
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
  const std::string stop_kind = summary.is_object() ? summary.value("stop_kind", "completed") : "completed";
  preempted_ = stop_kind == "preempted";
  const double budget = preempted_ ? std::min(track_.mlflow_timeout_s, kPreemptedEndS) : track_.mlflow_timeout_s;
  sender_->finish(status_for(stop_kind), budget);
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

void MlflowTracker::on_train_end(const nlohmann::json&) {
  Sender& s = *sender_;
  s.finish("", track_.mlflow_timeout_s);  // add_to_summary() has ended the run already: a no-op then
  if (!s.ready || preempted_) return;     // a preempted run's artifacts come at the end of its resume
  const std::string prefix = "mlflow-artifacts:/";
  if (s.artifact_uri.rfind(prefix, 0) != 0) {
    Console::get().line(
        fmt::format("warning: mlflow: no artifacts sent: the server keeps them at {}, which frugal "
                    "cannot write to (start `mlflow server` with --serve-artifacts)",
                    s.artifact_uri));
    return;
  }
  const RunDir dir(facts_.run_dir);
  std::vector<std::string> files = {dir.summary(), dir.report(), dir.config()};
  if (track_.mlflow_weights) files.push_back(dir.final_weights());
  std::vector<std::string> unsent;
  for (const std::string& f : files) {
    if (!std::filesystem::exists(f)) continue;
    const std::string name = std::filesystem::path(f).filename().string();
    if (!unsent.empty()) {
      unsent.push_back(name);
      continue;
    }
    if (f == dir.final_weights())
      s.extend_deadline(static_cast<double>(std::filesystem::file_size(f)) / kSlowestUploadBytesPerS);
    const double left = s.seconds_left();
    try {
      if (left <= 0)
        throw MlflowError(fmt::format("track.mlflow_timeout_s ({:g} s) is spent", track_.mlflow_timeout_s), true);
      s.client.put_file(s.artifact_uri.substr(prefix.size()) + "/" + name, f, left);
    } catch (const std::exception& e) {
      Console::get().line(fmt::format("warning: mlflow: {} was not sent: {}", name, e.what()));
      unsent.push_back(name);
    }
  }
  if (unsent.size() > 1)
    Console::get().line(
        fmt::format("warning: mlflow: not sent either: {}", fmt::join(unsent.begin() + 1, unsent.end(), ", ")));
}

}  // namespace frugal
