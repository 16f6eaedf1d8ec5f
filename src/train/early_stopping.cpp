// Early stopping; see early_stopping.h.
#include "frugal/train/early_stopping.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cmath>

#include "frugal/core/errors.h"

namespace frugal {

EarlyStopDecision next_early_stop(const EarlyStopState& s, double value, int64_t step, const EarlyStopConfig& c) {
  EarlyStopDecision d{s, false, ""};
  const std::string watched = c.task_metric.empty() ? std::string(metric_name(c.metric)) : c.task_metric;
  EarlyStopState& n = d.state;
  ++n.seen;
  if (n.seen <= c.warmup) return d;
  const bool finite = std::isfinite(value);
  if (!n.has_best && finite) {
    n.has_best = true;
    n.best = value;
    n.best_step = step;
    n.bad = 0;
    return d;
  }
  const bool improved =
      finite && (c.mode == MetricMode::kMin ? value < n.best - c.min_delta : value > n.best + c.min_delta);
  if (improved) {
    n.best = value;
    n.best_step = step;
    n.bad = 0;
    return d;
  }
  ++n.bad;
  if (n.bad >= c.patience) {
    d.stop = true;
    d.reason = n.has_best ? fmt::format(
                                "early stop: {} did not improve on {:.6g} (step {}) by more than "
                                "{} for {} evaluations",
                                watched, n.best, n.best_step, c.min_delta, n.bad)
                          : fmt::format("early stop: {} was not finite for {} evaluations", watched, n.bad);
  }
  return d;
}

void EarlyStopping::observe(double value, int64_t step, Control& control) {
  EarlyStopDecision d = next_early_stop(state_, value, step, config_);
  state_ = d.state;
  if (d.stop) control.request_stop(d.reason, StopKind::kEarlyStop);
}

void EarlyStopping::on_step_end(const StepMetrics& m, Control& control) {
  if (!m.logged || config_.metric == Metric::kValLoss || !config_.task_metric.empty()) return;
  observe(config_.metric == Metric::kLoss ? m.loss : m.grad_norm, m.step, control);
}

void EarlyStopping::on_eval_end(const EvalMetrics& m, Control& control) {
  if (!config_.task_metric.empty()) {
    auto it = m.task.find(config_.task_metric);
    if (it == m.task.end()) {
      std::string names;
      for (const auto& kv : m.task) names += (names.empty() ? "" : ", ") + kv.first;
      throw ConfigError(
          fmt::format("early_stop.task_metric = \"{}\" but the task's evaluation reported {}; name one "
                      "of the figures its TaskHooks::eval_metrics returns",
                      config_.task_metric, names.empty() ? "no figures of its own" : "{" + names + "}"));
    }
    observe(it->second, m.step, control);
    return;
  }
  if (config_.metric == Metric::kValLoss) observe(m.val_loss, m.step, control);
}

void EarlyStopping::save_state(nlohmann::json& out) const {
  out = {{"seen", state_.seen},
         {"has_best", state_.has_best},
         {"best", state_.best},
         {"best_step", state_.best_step},
         {"bad", state_.bad}};
}

void EarlyStopping::load_state(const nlohmann::json& in) {
  state_.seen = in.at("seen").get<int64_t>();
  state_.has_best = in.at("has_best").get<bool>();
  state_.best = in.at("best").get<double>();
  state_.best_step = in.at("best_step").get<int64_t>();
  state_.bad = in.at("bad").get<int64_t>();
}

}  // namespace frugal
