// `frugal plan`: the figures (a probe through the real Trainer, or a run directory), the prices
// and the projection; see plan.h. The table, the JSON and the training callback are in
// plan_report.cpp.
#include "frugal/tune/plan.h"

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "frugal/ckpt/run_dir.h"
#include "frugal/core/atomic_file.h"
#include "frugal/core/console.h"
#include "frugal/core/errors.h"
#include "frugal/core/wall_clock.h"
#include "frugal/monitor/cost_meter.h"
#include "frugal/train/deadline.h"
#include "frugal/train/lr_schedule.h"
#include "frugal/train/preemption.h"
#include "frugal/train/trainer.h"
#include "frugal/train/run_config.h"
#include "tune/internal/temp_root.h"

namespace frugal {
namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;
double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// Measures the probe run: the wall time between consecutive step ends with the evaluations and
// saves between them taken out, each evaluation and save, and what follows the last step.
class PlanProbe final : public Callback {
 public:
  PlanProbe(double max_probe_s, PlanProgress progress) : max_probe_s_(max_probe_s), progress_(std::move(progress)) {}

  void on_train_begin(const RunInfo& info) override {
    peak_flops = info.peak_flops;
    tokens_per_step = info.tokens_per_step;
    item = info.item;
    last_ = begun = Clock::now();
  }
  void on_step_end(const StepMetrics& m, Control& control) override {
    const auto now = Clock::now();
    const double dt = std::max(0.0, seconds(now - last_) - between_s_);
    between_s_ = 0;
    last_ = now;
    if (m.step == 1) {
      first_step_s = dt;
    } else {
      step_s.push_back(dt);
      measured_s_ += dt;
    }
    if (progress_) progress_(fmt::format("plan: probe step {}/{} ({:.1f} ms)", m.step, m.total_steps, 1e3 * dt), false);
    if (step_s.size() >= 3 && measured_s_ > max_probe_s_ && m.step < m.total_steps)
      control.request_stop(fmt::format("plan.max_probe_s = {} s reached", max_probe_s_));
  }
  void on_eval_end(const EvalMetrics& e, Control&) override {
    eval_s.push_back(e.eval_s);
    between_s_ += e.eval_s;
  }
  void on_checkpoint(const CheckpointEvent& e) override {
    save_s.push_back(e.stall_s);
    between_s_ += e.stall_s;
  }
  // After the run: the time since the last step's end, less its evaluations and saves.
  double finish_s(Clock::time_point end) const { return std::max(0.0, seconds(end - last_) - between_s_); }

  Clock::time_point begun;
  double peak_flops = 0, first_step_s = -1;
  int64_t tokens_per_step = 0;
  std::string item = "token";
  std::vector<double> step_s, eval_s, save_s;

 private:
  double max_probe_s_;
  PlanProgress progress_;
  Clock::time_point last_;
  double between_s_ = 0, measured_s_ = 0;
};

// The probe's overrides: its own run directory, 1 + probe_steps steps (TrainerOptions::probe
// leaves out what would stop, roll back, serve or profile it). Evaluation and checkpoint settings
// stay as configured.
// Every step logs (probe_overrides), so that on a GPU every step waits for its device work and is
// timed alone.
std::vector<std::string> plan_probe_sets(const Config& c, const std::string& root) {
  return probe_overrides(root, "plan-probe", c.plan.probe_steps + 1);
}

std::vector<nlohmann::json> read_json_lines(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::error_code ec;
  if (!fs::exists(path, ec)) return out;
  std::istringstream in(read_file(path));  // a regular file only: a FIFO would hang an ifstream
  std::string line;
  while (std::getline(in, line)) {
    nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_object()) out.push_back(std::move(j));
  }
  return out;
}

double number(const nlohmann::json& j, const char* key, double fallback = 0) {
  return j.contains(key) && j[key].is_number() ? j[key].get<double>() : fallback;
}

// What follows the last step besides the final evaluation and save, in a finished run: the last
// line of metrics.jsonl is the final evaluation's, and summary.json is written after the final
// save, the task's figures and the final weights. -1 when the file times say nothing (a copy
// that did not keep them).
double finish_from_files(const std::string& dir, double save_s) {
  std::error_code e1, e2;
  const auto metrics = fs::last_write_time(RunDir(dir).metrics(), e1);
  const auto summary = fs::last_write_time(RunDir(dir).summary(), e2);
  if (e1 || e2) return -1;
  const double s = std::chrono::duration<double>(summary - metrics).count() - save_s;
  return s >= 0 && s < 3600 ? s : -1;
}

}  // namespace

std::string describe_duration(double s) {
  if (!std::isfinite(s)) return "never";
  if (s < 0.01) return fmt::format("{:.2f} ms", 1e3 * s);
  if (s < 1) return fmt::format("{:.0f} ms", 1e3 * s);
  if (s < 120) return fmt::format("{:.1f} s", s);
  if (s < 7200) return fmt::format("{:.1f} min", s / 60);
  return fmt::format("{:.2f} h", s / 3600);
}

MachinePrices resolve_prices(const BudgetConfig& b, const std::string& instance, double* peak_tflops) {
  MachinePrices p;
  p.grid_g_per_kwh = b.grid_g_per_kwh;
  const std::string name = instance.empty() ? b.instance : instance;
  PriceEntry row;
  if (!name.empty()) {
    const std::string path = default_price_table_path();
    const std::vector<PriceEntry> table = load_price_table(path);
    std::string names;
    for (const auto& e : table) names += (names.empty() ? "" : ", ") + e.name;
    const auto hit = std::find_if(table.begin(), table.end(), [&](const PriceEntry& e) { return e.name == name; });
    if (hit == table.end())
      throw ConfigError(
          fmt::format("{} \"{}\" is not in the price table {}; known: {} (add a row, or point "
                      "FRUGAL_PRICE_TABLE at your own table)",
                      instance.empty() ? "budget.instance =" : "--instance", name, path, names));
    row = *hit;
    p.name = name;
  }
  p.usd_per_hour = row.usd_per_hour;
  p.spot_usd_per_hour = row.spot_usd_per_hour;
  p.watts = row.watts;
  if (instance.empty() && b.usd_per_hour > 0) (b.spot ? p.spot_usd_per_hour : p.usd_per_hour) = b.usd_per_hour;
  if (b.watts > 0) p.watts = b.watts;
  if (peak_tflops) *peak_tflops = row.peak_tflops;
  return p;
}

namespace {
// The whole model's parameter bytes from summary.json `s`, whose state_bytes_per_rank.parameters
// (f.param_bytes) is one rank's: under ZeRO-3 on several ranks that is the rank's shard of the
// trainable fp32 masters with the parts kept whole and the frozen ones. Every trainable parameter
// is an fp32 master (4 bytes), so with nothing frozen the whole is 4 x params, exactly; with a
// frozen base (its width unknown here: fp32, bf16 or NF4) the smaller of 4 x params and the rank's
// bytes with the other ranks' (1 - 1/W) of the masters added, both upper bounds.
int64_t whole_parameter_bytes(const nlohmann::json& s, const PlanFigures& f) {
  const nlohmann::json levers = s.contains("levers") && s["levers"].is_object() ? s["levers"] : nlohmann::json();
  const nlohmann::json batch =
      levers.contains("batch") && levers["batch"].is_object() ? levers["batch"] : nlohmann::json();
  const nlohmann::json dist = s.contains("dist") && s["dist"].is_object() ? s["dist"] : nlohmann::json();
  const double zero = std::max(number(levers, "zero"), number(dist, "zero"));
  const double world = std::max({1.0, number(batch, "world_size", 1), number(dist, "world_size", 1)});
  if (zero < 3 || world <= 1 || f.param_bytes < 0 || f.params < 0) return f.param_bytes;
  const double all_fp32 = 4.0 * static_cast<double>(f.params);
  const double trainable = static_cast<double>(f.trainable_params >= 0 ? f.trainable_params : f.params);
  if (trainable >= static_cast<double>(f.params)) return static_cast<int64_t>(all_fp32);
  const double sharded = static_cast<double>(f.param_bytes) + 4.0 * trainable * (1.0 - 1.0 / world);
  return static_cast<int64_t>(std::min(all_fp32, sharded));
}
}  // namespace

// The sizes summary.json `s` gives (PlanFigures::params and after).
void take_sizes(const nlohmann::json& s, PlanFigures& f) {
  f.params = static_cast<int64_t>(number(s, "params", -1));
  f.trainable_params = static_cast<int64_t>(number(s, "trainable_params", static_cast<double>(f.params)));
  f.optimizer_state_mb = number(s, "optimizer_state_mb", -1);
  f.peak_tensor_mb = number(s, "peak_tensor_mb", -1);
  if (s.contains("state_bytes_per_rank") && s["state_bytes_per_rank"].is_object()) {
    f.param_bytes = static_cast<int64_t>(number(s["state_bytes_per_rank"], "parameters", -1));
    f.state_bytes = static_cast<int64_t>(number(s["state_bytes_per_rank"], "total", -1));
    f.param_bytes = whole_parameter_bytes(s, f);
  }
  if (s.contains("checkpoint") && s["checkpoint"].is_object())
    f.checkpoint_bytes = static_cast<int64_t>(number(s["checkpoint"], "bytes", -1));
  if (!s.contains("levers") || !s["levers"].is_object()) return;
  const nlohmann::json& l = s["levers"];
  if (l.contains("optimizer") && l["optimizer"].is_object() && l["optimizer"].contains("kind") &&
      l["optimizer"]["kind"].is_string())
    f.optimizer = l["optimizer"]["kind"].get<std::string>();
  if (l.contains("precision") && l["precision"].is_object())
    f.bf16 = l["precision"].value("mode", std::string()) == "bf16";
  if (number(l, "zero") >= 1 && l.contains("batch") && l["batch"].is_object())
    f.optimizer_state_ranks = std::max<int64_t>(1, static_cast<int64_t>(number(l["batch"], "world_size", 1)));
}

PlanFigures probe_figures(const std::string& file, const std::vector<std::string>& overrides,
                          const std::map<std::string, std::string>& env, const PlanProgress& progress) {
  const Config target = resolve_run_config(file, overrides, env).config;
  detail::TempRoot root("frugal-plan");
  std::vector<std::string> sets = overrides;
  for (auto& s : plan_probe_sets(target, root.path())) sets.push_back(std::move(s));
  auto probe = std::make_shared<PlanProbe>(target.plan.max_probe_s, progress);
  TrainerOptions opts;
  opts.quiet = true;
  opts.overwrite = true;
  opts.probe = true;
  opts.callbacks.push_back(probe);
  auto& con = Console::get();
  const bool was_quiet = con.quiet(), was_json = con.json_mode();
  const auto t0 = Clock::now();
  Clock::time_point end;
  nlohmann::json summary;
  try {
    {
      Trainer trainer(resolve_run_config(file, sets, env), opts);
      summary = trainer.fit();
    }  // its end (loader threads joined, memory returned) is part of a run's end too
    end = Clock::now();
  } catch (...) {
    con.set_quiet(was_quiet);
    con.set_json_mode(was_json);
    throw;
  }
  con.set_quiet(was_quiet);
  con.set_json_mode(was_json);
  if (const int sig = preemption_signal(); sig != 0)  // the probe stopped at its step's end
    throw Interrupted(fmt::format("the plan's probe was stopped by {}; nothing written (run the same command again)",
                                  stop_signal_name(sig)));
  if (probe->step_s.empty())  // another stop before a measured step
    throw Error("plan: the probe was stopped before it measured a step after the warm-up; nothing to project from");
  PlanFigures f;
  f.source = "probe";
  f.step_s = probe->step_s;
  f.first_step_s = probe->first_step_s;
  f.startup_s = seconds(probe->begun - t0);
  f.eval_s = median_of(probe->eval_s);
  f.saved = !probe->save_s.empty();
  f.save_s = median_of(probe->save_s);
  f.finish_s = probe->finish_s(end);
  f.peak_flops = probe->peak_flops;
  f.tokens_per_step = probe->tokens_per_step;
  f.item = probe->item;
  f.device = target.run.device;
  f.probe_s = seconds(end - t0);
  take_sizes(summary, f);
  f.describe = fmt::format("a probe on this machine ({}): 1 + {} steps, {} evaluation(s), {} save(s) in {}", f.device,
                           f.step_s.size(), probe->eval_s.size(), probe->save_s.size(), describe_duration(f.probe_s));
  return f;
}

// A run directory's figures; see plan.h.
PlanFigures run_dir_figures(const std::string& dir) {
  std::vector<nlohmann::json> steps, evals;
  for (auto& j : read_json_lines(RunDir(dir).metrics())) {
    const std::string event = j.value("event", "");
    if (event == "step" && j.contains("step") && j.contains("elapsed_s")) steps.push_back(std::move(j));
    if (event == "eval") evals.push_back(std::move(j));
  }
  if (steps.size() < 2)
    throw ConfigError(
        fmt::format("--from {}: {}/metrics.jsonl holds {} step line(s); a step time needs two (a run "
                    "logs one every train.log_every steps)",
                    dir, dir, steps.size()));
  PlanFigures f;
  f.source = "run";
  // One figure per log window: its wall time less its evaluations and saves, per step.
  std::vector<double> saves;
  for (size_t i = 1; i < steps.size(); ++i) {
    const auto &a = steps[i - 1], &b = steps[i];
    const double n = number(b, "step") - number(a, "step");
    const double t = number(b, "elapsed_s") - number(a, "elapsed_s") - number(b, "eval_s") - number(b, "checkpoint_s");
    if (n > 0 && t > 0) f.step_s.push_back(t / n);
    if (number(b, "checkpoint_s") > 0) saves.push_back(number(b, "checkpoint_s"));
  }
  if (f.step_s.empty())
    throw ConfigError(fmt::format("--from {}: no log window of metrics.jsonl moves forward in steps and time", dir));
  std::vector<double> eval_s;
  for (const auto& e : evals) eval_s.push_back(number(e, "eval_s"));
  f.eval_s = median_of(eval_s);
  const double step = median_of(f.step_s);
  const nlohmann::json& first = steps.front();
  f.startup_s = std::max(0.0, number(first, "elapsed_s") - number(first, "step") * step - number(first, "eval_s") -
                                  number(first, "checkpoint_s"));
  f.saved = !saves.empty();
  f.save_s = median_of(saves);
  const fs::path summary_path = RunDir(dir).summary();
  std::string end = "a partial run: start-up estimated, its end not measured";
  if (fs::exists(summary_path)) {
    const nlohmann::json s = nlohmann::json::parse(read_small_file(summary_path.string()), nullptr, false);
    if (s.is_object()) {
      take_sizes(s, f);
      f.startup_s = number(s, "startup_s", f.startup_s);
      // The attainable (measured or configured) peak: what scales a run onto another machine.
      f.peak_flops = number(s, "peak_tflops_measured", number(s, "peak_tflops")) * 1e12;
      f.device = s.value("device", "");
      if (number(s, "steps") > 0) f.tokens_per_step = std::llround(number(s, "tokens") / number(s, "steps"));
      if (s.contains("checkpoint") && number(s["checkpoint"], "saves") > 0) {
        f.saved = true;
        f.save_s = number(s["checkpoint"], "stall_s_mean");
      }
      f.finish_s = finish_from_files(dir, f.save_s);
      end = "its end from the file times of metrics.jsonl and summary.json";
      if (f.finish_s < 0) {  // copied without its file times: the summary's own clock, which stops earlier
        f.finish_s = std::max(0.0, number(s, "wall_s") + number(s, "startup_s") - number(steps.back(), "elapsed_s") -
                                       f.eval_s - f.save_s);
        end = "its end up to the summary's wall_s (the task's figures and the final weights not counted)";
      }
    }
  }
  f.describe = fmt::format("run directory {}: {} log windows, {} evaluation(s); {} (its launch is not recorded)", dir,
                           f.step_s.size(), eval_s.size(), end);
  return f;
}

namespace {

// The central projected time from launch to the start of step `step` (1-based).
double projected_time_to(const CostPlan& plan, int64_t step) {
  const Projection& p = plan.projection;
  const double eval_s = p.evals > 0 ? p.evals_s / static_cast<double>(p.evals) : 0.0;
  const int64_t every = plan.inputs.eval_every;
  const int64_t before = std::max<int64_t>(0, step - 1);
  return p.launch_s + p.startup_s + (before > 0 ? p.first_step_s : 0.0) +
         static_cast<double>(std::max<int64_t>(0, before - 1)) * p.step_s.central +
         (every > 0 ? static_cast<double>(before / every) * eval_s : 0.0);
}

// The keys that set what a step does and so its time: a run's measured step time is another
// config's only where these agree.
bool sets_the_step_time(const std::string& key) {
  static const char* const kKeys[] = {"run.device",
                                      "data.source",
                                      "data.micro_batch",
                                      "data.packing",
                                      "train.freeze",
                                      "train.optimizer",
                                      "train.cuda_graphs",
                                      "train.muon_precision",
                                      "precision.mode",
                                      "precision.tf32",
                                      "memory.activation_checkpointing",
                                      "dist.zero",
                                      "dist.offload",
                                      "dist.reshard_after_forward"};
  if (key.rfind("model.", 0) == 0 || key.rfind("lora.", 0) == 0) return true;
  return std::find(std::begin(kKeys), std::end(kKeys), key) != std::end(kKeys);
}

// --from: refuses (ConfigError) a config `c` whose step differs from the run's own (its
// config.toml), which would project the run's measured step time onto another model or batch.
void check_same_step(const Config& c, const std::string& planned, const std::string& dir,
                     const std::map<std::string, std::string>& env) {
  const std::string own = RunDir(dir).config();
  std::error_code ec;
  if (!fs::exists(own, ec)) return;  // a copy without it: nothing to compare
  Config run;
  try {
    run = resolve_run_config(own, {}, env).config;
  } catch (const Error&) {
    return;  // its data or init_from moved since: the check cannot be made
  }
  std::string differ;
  for (const KeySpec& k : config_schema()) {
    if (!sets_the_step_time(k.key) || k.get(c) == k.get(run)) continue;
    differ += fmt::format("{}{} = {} (the run: {})", differ.empty() ? "" : ", ", k.key, format_value(k.get(c)),
                          format_value(k.get(run)));
  }
  // The batch as trained (train.global_batch = 0 and train.accum = 1 say the same, for one).
  if (accumulation_steps(c) != accumulation_steps(run))
    differ += fmt::format("{}{} micro-batches a step (train.global_batch, train.accum; the run: {})",
                          differ.empty() ? "" : ", ", accumulation_steps(c), accumulation_steps(run));
  if (differ.empty()) return;
  throw ConfigError(fmt::format(
      "--from {}: the config planned ({}) differs from the run's own ({}) in what sets the step time: {}; its "
      "measured step time is not this config's. Drop --from to probe this config, or plan the run's own config "
      "(frugal plan --from {}, with --set for train.steps, the cadences and the prices)",
      dir, planned, own, differ, dir));
}

}  // namespace

PlanSchedule plan_schedule(const Config& c, const CostPlan& plan, double now_unix) {
  PlanSchedule s;
  const TrainConfig& t = c.train;
  s.kind = t.schedule == LrSchedule::kWsd ? "wsd" : "cosine";
  s.warmup_steps = t.warmup_steps;
  s.decay_start = t.schedule == LrSchedule::kWsd ? wsd_decay_start(t.steps, t.warmup_steps, t.decay_fraction) + 1
                                                 : std::min(t.steps, t.warmup_steps + 1);
  s.decay_start_s = projected_time_to(plan, s.decay_start);
  s.target_loss = t.target_loss;
  s.deadline_action = c.checkpoint.deadline_action == DeadlineAction::kDecay ? "decay" : "requeue";
  const std::optional<Deadline> deadline = resolve_deadline(c.checkpoint.deadline);
  if (!deadline) return s;
  const Projection& p = plan.projection;
  s.deadline_source = deadline->source;
  s.deadline_in_s = deadline->unix_s - now_unix;
  const double first_done = now_unix + p.launch_s + p.startup_s + p.first_step_s;
  const double eval_s = p.evals > 0 ? p.evals_s / static_cast<double>(p.evals) : 0.0;
  const int64_t fit =
      1 + steps_before_deadline(first_done, deadline->unix_s, p.step_s.central, eval_s, plan.inputs.eval_every,
                                plan.inputs.save_s, c.checkpoint.deadline_margin_s);
  if (fit < t.steps) s.deadline_steps = std::max<int64_t>(0, first_done < deadline->unix_s ? fit : 0);
  return s;
}

CostPlan make_cost_plan(const std::string& file, const std::vector<std::string>& overrides,
                        const std::map<std::string, std::string>& env, const CostPlanOptions& options) {
  const Config c = resolve_run_config(file, overrides, env).config;  // bad input fails before any probe
  CostPlan plan;
  plan.run_name = c.run.name;
  plan.steps = c.train.steps;
  plan.spot_billed = c.budget.spot;
  plan.limit_usd = c.budget.limit_usd;
  double peak_tflops = 0;
  const MachinePrices prices = resolve_prices(c.budget, options.instance, &peak_tflops);
  if (options.peak_tflops > 0) peak_tflops = options.peak_tflops;
  if (!options.instance.empty() && peak_tflops <= 0)
    throw ConfigError(
        fmt::format("--instance {}: the price table gives no peak_tflops for it, so the figures "
                    "measured here cannot be scaled to it; pass --peak-tflops, add peak_tflops "
                    "to its row, or price this machine's figures at its rate with --set "
                    "budget.instance={}",
                    options.instance, options.instance));
  if (options.from_run.empty()) {
    if (options.progress)
      options.progress(fmt::format("plan: probing 1 + {} steps of {} on {} (start-up, steps, evaluation, save)",
                                   c.plan.probe_steps, c.run.name, c.run.device),
                       true);
    plan.figures = probe_figures(file, overrides, env, options.progress);
    plan.figures.launch_s = options.launch_s;
  } else {
    check_same_step(c, (file.empty() ? "the built-in defaults" : file) + (overrides.empty() ? "" : " with --set"),
                    options.from_run, env);
    plan.figures = run_dir_figures(options.from_run);
  }
  if (plan.figures.optimizer.empty())  // a summary without its levers
    plan.figures.optimizer = std::get<std::string>(find_key("train.optimizer")->get(c));
  const PlanFigures& f = plan.figures;
  plan.tokens = plan.steps * f.tokens_per_step;
  ProjectionInputs& in = plan.inputs;
  in.steps = c.train.steps;
  in.step_s = f.step_s;
  in.first_step_s = f.first_step_s;
  in.launch_s = f.launch_s;
  in.startup_s = f.startup_s;
  in.eval_s = f.eval_s;
  in.eval_every = c.train.eval_every;
  in.save_s = f.save_s;
  in.checkpoint = c.checkpoint;
  in.finish_s = f.finish_s;
  in.margin = c.plan.margin;
  in.prices = prices;
  in.mtbf_s = c.checkpoint.mtbf_minutes * 60;
  plan.target = fmt::format("this machine ({})", c.run.device);
  if (!options.instance.empty()) {
    if (f.peak_flops <= 0)
      throw ConfigError(
          fmt::format("--instance {}: the peak FLOP/s where the figures were measured is unknown "
                      "(a partial run directory has no summary.json); set monitor.peak_tflops or probe here",
                      options.instance));
    in.compute_scale = f.peak_flops / (peak_tflops * 1e12);
    in.scale_spread = kCrossMachineSpread;
    plan.target = fmt::format(
        "{} (step and evaluation times x {:.3g}: peak {:.3g} TFLOP/s measured here over its "
        "{:.3g} TFLOP/s; a rough model, range widened {}x each way)",
        options.instance, in.compute_scale, f.peak_flops / 1e12, peak_tflops, kCrossMachineSpread);
  }
  plan.projection = project_run(in);
  plan.schedule = plan_schedule(c, plan, unix_now());
  return plan;
}

}  // namespace frugal
