// JSON progress lines; see json_progress.h.
#include "frugal/monitor/json_progress.h"

#include <nlohmann/json.hpp>

#include "frugal/core/console.h"
#include "frugal/monitor/metrics_writer.h"

namespace frugal {

void JsonProgress::on_train_begin(const RunInfo& info) {
  nlohmann::ordered_json j;
  j["event"] = "start";
  j["run_name"] = info.config ? info.config->run.name : "";
  j["total_steps"] = info.total_steps();
  j["run_dir"] = info.run_dir;
  j["params"] = info.params;
  j["peak_flops"] = info.peak_flops;
  j["dashboard"] = info.dashboard_url;
  Console::get().json(j.dump());
}

void JsonProgress::on_step_end(const StepMetrics& m, Control&) {
  if (m.logged) Console::get().json(step_json(m).dump());
}

void JsonProgress::on_eval_end(const EvalMetrics& m, Control&) { Console::get().json(eval_json(m).dump()); }

void JsonProgress::on_train_end(const nlohmann::json& summary) {
  nlohmann::ordered_json j;
  j["event"] = "summary";
  for (const auto& [k, v] : summary.items()) j[k] = v;
  Console::get().json(j.dump());
}

}  // namespace frugal
