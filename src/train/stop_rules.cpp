// The stop rules; see stop_rules.h.
#include "frugal/train/stop_rules.h"

#include <cmath>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "frugal/monitor/cost_meter.h"

namespace frugal {

void TimeLimit::check(double elapsed_s, Control& control) const {
  if (max_minutes_ > 0 && elapsed_s >= max_minutes_ * 60)
    control.request_stop(fmt::format("train.max_minutes = {} reached", max_minutes_), StopKind::kMaxMinutes);
}

void NonFiniteLossStop::on_step_end(const StepMetrics& m, Control& control) {
  if (m.logged && !m.loss_scaling && !std::isfinite(m.loss))
    control.request_stop(fmt::format("loss became {} at step {}", m.loss, m.step));
}

void TargetLoss::on_eval_end(const EvalMetrics& m, Control& control) {
  if (reached_ || !(m.val_loss <= target_)) return;
  reached_ = true;
  step_ = m.step;
  val_loss_ = m.val_loss;
  elapsed_s_ = m.elapsed_s;
  control.request_stop(fmt::format("target reached: validation loss {:.4f} <= train.target_loss = {} at step {}",
                                   m.val_loss, target_, m.step),
                       StopKind::kTarget);
}

void TargetLoss::on_resume(const StepMetrics&, Control& control) {
  if (!reached_) return;
  if (!(val_loss_ <= target_)) {  // the target was lowered: train on toward it
    reached_ = false;
    return;
  }
  control.request_stop(fmt::format("target already reached: validation loss {:.4f} <= train.target_loss = {} at step "
                                   "{}; nothing left to train (lower train.target_loss, or set it to 0, to train on)",
                                   val_loss_, target_, step_),
                       StopKind::kTarget);
}

void TargetLoss::add_to_summary(nlohmann::ordered_json& summary) {
  nlohmann::ordered_json t;
  t["target_loss"] = target_;
  t["reached"] = reached_;
  if (reached_) {
    // The cost meter's own arithmetic at the moment of the target (its rates, this wall time).
    const CostFigures f =
        cost_ ? cost_at(elapsed_s_, step_, step_, cost_->usd_per_hour(), cost_->watts(), 0) : CostFigures{};
    t["step"] = step_;
    t["val_loss"] = val_loss_;
    t["tokens"] = step_ * tokens_per_step_;
    t["wall_s"] = elapsed_s_;
    t["usd"] = cost_ && cost_->usd_per_hour() > 0 ? nlohmann::ordered_json(f.usd) : nullptr;
    t["kwh"] = cost_ && cost_->watts() > 0 ? nlohmann::ordered_json(f.kwh) : nullptr;
    // Flat copies for `frugal compare` and search's ranking.
    summary["tokens_to_target"] = t["tokens"];
    summary["wall_s_to_target"] = elapsed_s_;
    summary["usd_to_target"] = t["usd"];
    summary["kwh_to_target"] = t["kwh"];
  }
  summary["to_target"] = t;
}

void TargetLoss::save_state(nlohmann::json& out) const {
  out = {{"reached", reached_}, {"step", step_}, {"val_loss", val_loss_}, {"elapsed_s", elapsed_s_}};
}

void TargetLoss::load_state(const nlohmann::json& in) {
  reached_ = in.value("reached", false);
  step_ = in.value("step", int64_t{0});
  val_loss_ = in.value("val_loss", 0.0);
  elapsed_s_ = in.value("elapsed_s", 0.0);
}

}  // namespace frugal
