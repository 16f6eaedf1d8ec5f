// What a CostPlan shows: the table of `frugal plan`, its JSON, the budget check and the training
// banner's line with summary.json's projected-against-measured figures; see plan.h.
#include <algorithm>
#include <cmath>
#include <functional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "frugal/ckpt/run_dir.h"
#include "frugal/core/atomic_file.h"
#include "frugal/monitor/progress.h"  // format_usd
#include "frugal/monitor/report.h"    // format_figure
#include "frugal/tune/plan.h"

namespace frugal {

namespace {

std::string usd(double x) {
  if (!std::isfinite(x)) return "never";
  if (x >= 100) return fmt::format("${:.0f}", x);
  return format_usd(x);  // $12.34, $0.0312, and 3 significant digits below a cent
}

std::string row(const std::string& label, const Range& r, const std::function<std::string(double)>& f,
                const std::string& note = "") {
  return fmt::format("  {:<28} {:>12} {:>12} {:>12}{}\n", label, f(r.low), f(r.central), f(r.high),
                     note.empty() ? "" : "   " + note);
}

// {"low", "central", "high"}; an infinite time (a spot run that never finishes) is null.
template <class Json = nlohmann::json>
Json range_json(const Range& r) {
  auto v = [](double x) { return std::isfinite(x) ? Json(x) : Json(nullptr); };
  Json j;
  j["low"] = v(r.low);
  j["central"] = v(r.central);
  j["high"] = v(r.high);
  return j;
}

nlohmann::json scenario_json(const Scenario& s) {
  nlohmann::json j = {{"priced", s.priced},
                      {"usd_per_hour", s.usd_per_hour},
                      {"seconds", range_json(s.seconds)},
                      {"expected_preemptions", s.expected_preemptions},
                      {"lost_s", s.lost_s},
                      {"converges", s.converges}};
  if (s.priced) j["usd"] = range_json(s.usd);
  if (s.kwh.central > 0) {
    j["kwh"] = range_json(s.kwh);
    j["kg_co2"] = range_json(s.kg_co2);
  }
  return j;
}

// Where the central time goes.
std::string breakdown(const CostPlan& plan) {
  const Projection& p = plan.projection;
  const ProjectionInputs& in = plan.inputs;
  std::string out = "where the time goes (central):\n";
  out += fmt::format(
      "  {:<20} {:>10}   launch {}, trainer start-up {}\n", "start-up", describe_duration(p.launch_s + p.startup_s),
      plan.figures.source == "run" ? "not recorded" : describe_duration(p.launch_s), describe_duration(p.startup_s));
  out += fmt::format("  {:<20} {:>10}   first step {}, then {} x {} (range {} to {})\n", "steps",
                     describe_duration(p.first_step_s + p.steps_s), describe_duration(p.first_step_s),
                     std::max<int64_t>(0, plan.steps - 1), describe_duration(p.step_s.central),
                     describe_duration(p.step_s.low), describe_duration(p.step_s.high));
  out += fmt::format("  {:<20} {:>10}   {} x {} (train.eval_every = {}, the final one included)\n", "evaluations",
                     describe_duration(p.evals_s), p.evals,
                     describe_duration(p.evals ? p.evals_s / static_cast<double>(p.evals) : 0.0), in.eval_every);
  const std::string cadence =
      !in.checkpoint.enabled ? "checkpoint.enabled = false"
      : p.saves > 1          ? "one every " + describe_duration(p.checkpoint_interval_s) + ", the final one included"
                             : "the final one only";
  out += fmt::format("  {:<20} {:>10}   {} x {} stall ({})\n", "checkpoints", describe_duration(p.saves_s), p.saves,
                     describe_duration(in.save_s), cadence);
  out += fmt::format("  {:<20} {:>10}   after the last step: summary, final weights, report\n", "finish",
                     describe_duration(p.finish_s));
  return out;
}

// How the range was made, and what the spot figure assumes.
std::string notes(const CostPlan& plan) {
  const Projection& p = plan.projection;
  const ProjectionInputs& in = plan.inputs;
  std::string out = fmt::format(
      "range: the step time's quarter medians spread {:.1f}% over the measured steps; every term at least "
      "+-{:.0f}% (plan.margin), summed end by end\n",
      100 * p.probe_spread, 100 * in.margin);
  if (in.mtbf_s > 0 && in.checkpoint.enabled)
    out += fmt::format(
        "Young-Daly: for a {} save and an MTBF of {}, the cheapest checkpoint interval is {}{}\n",
        describe_duration(in.save_s), describe_duration(in.mtbf_s), describe_duration(p.young_daly_s),
        in.checkpoint.auto_interval ? " (checkpoint.auto = true uses it)" : "; checkpoint.auto = true would use it");
  if (in.scale_spread > 1)
    out +=
        "instance: scaled by peak FLOP/s, which assumes the step is compute bound there; a model too small to keep "
        "the accelerator busy (kernel launches, memory bandwidth) takes longer than this. Probe on the target for a "
        "measured figure\n";
  if (p.spot.priced)
    out += fmt::format(
        "spot: preemptions every {} on average (checkpoint.mtbf_minutes) without a usable notice; each "
        "loses half a checkpoint interval and a {} restart: {:.2f} expected, +{} (central)\n",
        describe_duration(in.mtbf_s), describe_duration(p.restart_s), p.spot.expected_preemptions,
        describe_duration(p.spot.lost_s));
  return out;
}

// The schedule's phases in time, a target's early end, and how far a deadline lets the run go.
std::string schedule_lines(const CostPlan& plan) {
  const PlanSchedule& s = plan.schedule;
  std::string out;
  if (s.kind == "wsd")
    out += fmt::format(
        "schedule: wsd: warm-up {} steps, the peak rate to step {}, then the decay to step {} (it starts about {} "
        "in; a larger train.steps on resume before then moves it later)\n",
        s.warmup_steps, s.decay_start - 1, plan.steps, describe_duration(s.decay_start_s));
  else
    out += fmt::format("schedule: cosine: warm-up {} steps, then the decay over the other {} (from about {} in)\n",
                       s.warmup_steps, std::max<int64_t>(0, plan.steps - s.warmup_steps),
                       describe_duration(s.decay_start_s));
  if (s.target_loss > 0)
    out += fmt::format(
        "target: train.target_loss = {} ends the run (exit 0) when the validation loss reaches it; this plan "
        "is for all of train.steps, the most it can cost\n",
        s.target_loss);
  if (s.deadline_source.empty()) return out;
  if (s.deadline_steps < 0)
    return out + fmt::format("deadline ({}) in {}: the whole run fits\n", s.deadline_source,
                             describe_duration(s.deadline_in_s));
  out += fmt::format("deadline ({}) in {}: about {} of the {} steps fit; ", s.deadline_source,
                     describe_duration(s.deadline_in_s), s.deadline_steps, plan.steps);
  if (s.deadline_action != "decay")
    return out +
           "the run checkpoints there and exits 75 for a requeue to finish (checkpoint.deadline_action = "
           "\"requeue\")\n";
  out += "checkpoint.deadline_action = \"decay\": the decay moves to end there and the run finishes (exit 0)\n";
  // The rows above price all of train.steps; the run ends at the deadline, so say what that costs.
  const Scenario& b = plan.billed();
  const double share = b.seconds.central > 0 ? std::min(1.0, s.deadline_in_s / b.seconds.central) : 1.0;
  out += fmt::format("  so the run takes about {}, {:.0f}% of the wall time above (which is for all {} steps)",
                     describe_duration(std::min(s.deadline_in_s, b.seconds.central)), 100 * share, plan.steps);
  if (b.priced)
    out += fmt::format(", and costs about {} of the central {}", usd(b.usd.central * share), usd(b.usd.central));
  return out + "\n";
}

}  // namespace

std::string CostPlan::table() const {
  const Projection& p = projection;
  std::string out = fmt::format("plan: {} steps of {} on {}\n", steps, run_name, target);
  if (tokens > 0) out += fmt::format("  {} {}s ({} a step)\n", tokens, figures.item, figures.tokens_per_step);
  out += fmt::format("measured from {}\n", figures.describe);
  if (figures.params > 0) {
    out += fmt::format("  holds {} parameters", format_figure(static_cast<double>(figures.params)));
    if (figures.trainable_params >= 0 && figures.trainable_params < figures.params)
      out += fmt::format(", {} of them train (the rest frozen: train.freeze or [lora])",
                         format_figure(static_cast<double>(figures.trainable_params)));
    if (figures.optimizer_state_mb >= 0) out += fmt::format("; optimizer state {:.1f} MB", figures.optimizer_state_mb);
    if (figures.checkpoint_bytes >= 0) out += fmt::format("; a checkpoint {:.1f} MB", figures.checkpoint_bytes / 1e6);
    out += "\n";
  }
  out += fmt::format("  {:<28} {:>12} {:>12} {:>12}\n", "", "low", "central", "high");
  out += row("wall time", p.on_demand.seconds, describe_duration);
  if (p.on_demand.priced)
    out += row(fmt::format("on demand at {}/h", usd(p.on_demand.usd_per_hour)), p.on_demand.usd, usd,
               spot_billed ? "" : "(billed)");
  else
    out += "  on demand                    n/a: no price (set budget.usd_per_hour or budget.instance, or --instance)\n";
  if (p.spot.priced) {
    out += row("spot wall time", p.spot.seconds, describe_duration);
    out += row(fmt::format("spot at {}/h", usd(p.spot.usd_per_hour)), p.spot.usd, usd, spot_billed ? "(billed)" : "");
  }
  if (p.on_demand.kwh.central > 0) {
    out += row(fmt::format("energy at {:.0f} W, kWh", inputs.prices.watts), p.on_demand.kwh,
               [](double x) { return fmt::format("{:.4g}", x); });
    out += row(fmt::format("carbon at {:.0f} g/kWh, kg CO2", inputs.prices.grid_g_per_kwh), p.on_demand.kg_co2,
               [](double x) { return fmt::format("{:.4g}", x); });
  } else {
    out += "  energy, carbon               n/a: no power draw (set budget.watts or budget.instance)\n";
  }
  out += breakdown(*this) + notes(*this) + schedule_lines(*this);
  const Scenario& b = billed();
  if (limit_usd > 0 && b.priced && b.usd.central <= limit_usd && b.usd.high > limit_usd)
    out += fmt::format(
        "budget: budget.limit_usd = {} covers the central {} but not the high end {}: the run may stop "
        "at the limit (exit 3) before it finishes\n",
        usd(limit_usd), usd(b.usd.central), usd(b.usd.high));
  if (figures.probe_s > 0) out += fmt::format("the probe took {}", describe_duration(figures.probe_s));
  return out;
}

nlohmann::json CostPlan::to_json() const {
  const Projection& p = projection;
  const PlanFigures& f = figures;
  nlohmann::json j;
  j["run_name"] = run_name;
  j["steps"] = steps;
  j["tokens"] = tokens;
  j["tokens_per_step"] = figures.tokens_per_step;
  j["item"] = figures.item;
  j["target"] = target;
  j["figures"] = {{"source", f.source},
                  {"describe", f.describe},
                  {"step_s", f.step_s},
                  {"first_step_s", f.first_step_s},
                  {"launch_s", f.launch_s},
                  {"startup_s", f.startup_s},
                  {"eval_s", f.eval_s},
                  {"save_s", f.save_s},
                  {"saved", f.saved},
                  {"finish_s", f.finish_s},
                  {"peak_tflops", f.peak_flops / 1e12},
                  {"device", f.device},
                  {"probe_s", f.probe_s},
                  {"params", f.params},
                  {"trainable_params", f.trainable_params},
                  {"optimizer_state_mb", f.optimizer_state_mb},
                  {"checkpoint_bytes", f.checkpoint_bytes}};
  j["terms"] = {{"launch_s", p.launch_s},
                {"startup_s", p.startup_s},
                {"first_step_s", p.first_step_s},
                {"steps_s", p.steps_s},
                {"evals_s", p.evals_s},
                {"saves_s", p.saves_s},
                {"finish_s", p.finish_s},
                {"evals", p.evals},
                {"saves", p.saves},
                {"step_s", range_json(p.step_s)},
                {"probe_spread", p.probe_spread},
                {"checkpoint_interval_s", p.checkpoint_interval_s},
                {"young_daly_s", p.young_daly_s},
                {"restart_s", p.restart_s}};
  j["margin"] = inputs.margin;
  j["compute_scale"] = inputs.compute_scale;
  j["scale_spread"] = inputs.scale_spread;
  j["mtbf_s"] = inputs.mtbf_s;
  j["seconds"] = range_json(p.on_demand.seconds);
  j["trainer_seconds"] = range_json(p.trainer_seconds);
  j["on_demand"] = scenario_json(p.on_demand);
  j["spot"] = scenario_json(p.spot);
  j["billed"] = spot_billed ? "spot" : "on_demand";
  j["watts"] = inputs.prices.watts;
  j["grid_g_per_kwh"] = inputs.prices.grid_g_per_kwh;
  j["limit_usd"] = limit_usd;
  j["within_limit"] = budget_shortfall(*this).empty();
  const PlanSchedule& s = schedule;
  j["schedule"] = {{"kind", s.kind},
                   {"warmup_steps", s.warmup_steps},
                   {"decay_start_step", s.decay_start},
                   {"decay_start_s", s.decay_start_s},
                   {"target_loss", s.target_loss}};
  if (!s.deadline_source.empty())
    j["deadline"] = {{"source", s.deadline_source},
                     {"in_s", s.deadline_in_s},
                     {"steps_that_fit", s.deadline_steps < 0 ? steps : s.deadline_steps},
                     {"whole_run_fits", s.deadline_steps < 0},
                     {"action", s.deadline_action}};
  return j;
}

std::string CostPlan::banner_line() const {
  const Scenario& b = billed();
  std::string line = fmt::format("plan: projected {} ({} to {})", describe_duration(b.seconds.central),
                                 describe_duration(b.seconds.low), describe_duration(b.seconds.high));
  if (b.priced)
    line += fmt::format(", {} ({} to {}) at {}/h{}", usd(b.usd.central), usd(b.usd.low), usd(b.usd.high),
                        usd(b.usd_per_hour), spot_billed ? " spot" : "");
  if (figures.probe_s > 0) line += fmt::format("; the probe took {}", describe_duration(figures.probe_s));
  return line;
}

std::string budget_shortfall(const CostPlan& plan) {
  const Scenario& b = plan.billed();
  if (plan.limit_usd <= 0 || !b.priced || b.usd.central <= plan.limit_usd) return "";
  const Projection& p = plan.projection;
  // About how many steps the limit pays for: what is left after the fixed terms, at the step's cost.
  const double per_s = b.usd_per_hour / 3600;
  const double fixed_s = p.launch_s + p.startup_s + p.evals_s + p.saves_s + p.finish_s;
  const double steps_fit = p.step_s.central > 0 ? (plan.limit_usd / per_s - fixed_s) / p.step_s.central : 0;
  const std::string fit =
      steps_fit >= 1 ? fmt::format("lower train.steps to about {:.0f} (what the limit covers)", std::floor(steps_fit))
                     : std::string("the start-up alone costs more than the limit");
  return fmt::format(
      "the projected run costs {} (central; {} to {}) at {}/h{}, more than budget.limit_usd = {}. "
      "Raise budget.limit_usd to at least {}, {}, or compare cheaper machines with `frugal plan "
      "--instance NAME`",
      usd(b.usd.central), usd(b.usd.low), usd(b.usd.high), usd(b.usd_per_hour), plan.spot_billed ? " spot" : "",
      usd(plan.limit_usd), usd(b.usd.central), fit);
}

namespace {

// plan.before_train's callback: the banner line, and summary.json's "plan".
class PlanReport final : public Callback {
 public:
  explicit PlanReport(CostPlan plan) : plan_(std::move(plan)) {}
  void on_train_begin(const RunInfo& info) override {
    if (!info.run_dir.empty()) write_file_atomic(RunDir(info.run_dir).plan(), plan_.to_json().dump(2) + "\n");
  }
  void add_to_banner(std::vector<std::string>& lines) const override { lines.push_back(plan_.banner_line()); }
  void add_to_summary(nlohmann::ordered_json& summary) override {
    const Range& t = plan_.projection.trainer_seconds;
    nlohmann::ordered_json j;
    j["projected_s"] = range_json<nlohmann::ordered_json>(plan_.billed().seconds);
    if (plan_.billed().priced) j["projected_usd"] = range_json<nlohmann::ordered_json>(plan_.billed().usd);
    j["probe_s"] = plan_.figures.probe_s;
    // summary.json's startup_s + wall_s cover start-up, steps, evaluations and saves.
    j["trainer_s_projected"] = range_json<nlohmann::ordered_json>(t);
    if (summary.contains("wall_s") && summary.contains("startup_s")) {
      const double measured = summary["wall_s"].get<double>() + summary["startup_s"].get<double>();
      j["trainer_s_measured"] = measured;
      if (summary.value("steps", int64_t{0}) == plan_.steps)
        j["trainer_s_within_range"] = measured >= t.low && measured <= t.high;
    }
    summary["plan"] = j;
  }

 private:
  CostPlan plan_;
};

}  // namespace

std::shared_ptr<Callback> plan_callback(const CostPlan& plan) { return std::make_shared<PlanReport>(plan); }

}  // namespace frugal
