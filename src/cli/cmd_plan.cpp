// `frugal plan [CONFIG] [--from RUN_DIR] [--instance NAME] [--peak-tflops X] [--json] [--json-out FILE] [--set ...]`:
// the projected wall time, dollars (on demand and spot), kWh and kg CO2 of the configured run,
// with a range, from a short probe on this machine or a run directory (tune/plan.h), and
// plan.before_train's check in `frugal train`.
#include <unistd.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "cli/commands.h"
#include "frugal/ckpt/run_dir.h"
#include "frugal/core/atomic_file.h"
#include "frugal/core/config_loader.h"
#include "frugal/core/console.h"
#include "frugal/core/dir_lock.h"
#include "frugal/core/errors.h"
#include "frugal/core/exit_code.h"
#include "frugal/train/preemption.h"
#include "frugal/tune/plan.h"
#include "frugal/tune/zero_advice.h"
#include "frugal/train/run_config.h"

namespace frugal::cli {

namespace fs = std::filesystem;

double process_age_s() {
  // /proc/self/stat field 22 is the start time in clock ticks since boot (after the command name,
  // which may hold spaces, in parentheses); /proc/uptime's first field is seconds since boot.
  std::ifstream stat("/proc/self/stat"), uptime("/proc/uptime");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  double up = 0;
  const size_t paren = text.rfind(')');
  if (paren == std::string::npos || !(uptime >> up)) return 0;
  std::istringstream fields(text.substr(paren + 2));
  std::string field;
  for (int i = 3; i <= 22 && (fields >> field); ++i) {
    if (i == 22) return std::max(0.0, up - std::stod(field) / static_cast<double>(sysconf(_SC_CLK_TCK)));
  }
  return 0;
}

void plan_before_training(const std::string& config, const std::vector<std::string>& sets,
                          const std::map<std::string, std::string>& env, double launch_s, bool quiet,
                          std::vector<std::shared_ptr<Callback>>& callbacks) {
  auto& con = Console::get();
  CostPlanOptions o;
  o.launch_s = launch_s;
  if (!quiet) o.progress = console_tune_progress();
  const CostPlan plan = make_cost_plan(config, sets, env, o);
  con.finish_status();
  if (!quiet) con.line(plan.table());
  // A refusal writes nothing: no run directory, no plan.json; the message carries the figures.
  if (const std::string why = budget_shortfall(plan); !why.empty())
    throw GuardStop("plan.before_train: " + why +
                    "; nothing was trained and nothing written (`frugal plan` "
                    "prints the whole projection)");
  callbacks.push_back(plan_callback(plan));  // writes runs/<name>/plan.json once the run directory is made
}

namespace {
// runs/<run.name>/plan.json; "" (said why) while that run is training: it writes its own plan.json
// (plan.before_train), which this one is not put over.
std::string default_plan_path(const Config& config) {
  const RunDir dir = RunDir::of(config);
  if (!locked_by_another_process(dir.root())) return dir.plan();
  Console::get().line(fmt::format(
      "{} is training now: its plan.json is left as it is (--json-out FILE writes this plan elsewhere)", dir.root()));
  return "";
}

struct PlanArgs {
  std::string config;
  std::vector<std::string> sets;
  std::string from;
  std::string instance;
  double peak_tflops = 0;
  bool json = false;
  std::string json_out;
  int64_t gpus = 0;
  double gpu_memory_gb = 0;
};

// `frugal plan` once its command line is parsed.
int run_plan(const PlanArgs& a) {
  const double launch_s = process_age_s();
  Console::get().set_json_mode(a.json);  // stdout carries only the JSON object
  const auto env = process_environment();
  std::string config = a.config;
  if (config.empty() && !a.from.empty() && fs::exists(RunDir(a.from).config())) config = RunDir(a.from).config();
  if (a.peak_tflops > 0 && a.instance.empty())
    throw ConfigError(
        "--peak-tflops is the peak of the --instance the run is projected onto; name one with --instance");
  CostPlanOptions o;
  o.from_run = a.from;
  o.instance = a.instance;
  o.peak_tflops = a.peak_tflops;
  o.launch_s = launch_s;
  o.progress = console_tune_progress();
  if ((a.gpus > 0) != (a.gpu_memory_gb > 0))
    throw ConfigError("--gpus and --gpu-memory-gb go together: name how many GPUs and each one's memory");
  // Where the plan goes is checked before anything is measured.
  check_output_file(a.json_out.empty() ? "the plan's default path (--json-out)" : "--json-out",
                    a.json_out.empty() ? RunDir::of(resolve_run_config(config, a.sets, env).config).plan() : a.json_out,
                    "plan.json");
  // A stop signal ends the probe at its step's end; make_cost_plan then throws Interrupted (exit
  // 75) and the probe's temporary folder goes as it unwinds.
  const auto signals = stop_signals_for("frugal plan");
  const CostPlan plan = make_cost_plan(config, a.sets, env, o);
  auto& con = Console::get();
  con.finish_status();
  con.line(plan.table());
  nlohmann::json plan_json = plan.to_json();
  if (a.gpus > 0) {
    const ZeroAdvice advice = zero_advice(plan.figures, a.gpus, a.gpu_memory_gb);
    con.line(advice.table());
    plan_json["zero"] = advice.to_json();
  }
  const std::string path =
      a.json_out.empty() ? default_plan_path(resolve_run_config(config, a.sets, env).config) : a.json_out;
  if (!path.empty()) {
    write_file_atomic(path, plan_json.dump(2) + "\n");
    con.line("wrote " + path);
  }
  if (a.json) fmt::print("{}\n", plan_json.dump());
  const std::string why = budget_shortfall(plan);
  if (why.empty()) return exit_status(ExitCode::kDone);
  con.line("budget: " + why);
  return exit_status(ExitCode::kGuardStop);
}
}  // namespace

void add_plan_command(CLI::App& app, Run* run) {
  auto args = std::make_shared<PlanArgs>();
  auto* cmd = app.add_subcommand(
      "plan",
      "Project the configured run before paying for it: wall time, steps, $ on demand and on spot, "
      "kWh and kg CO2, each with a low-central-high range, and where the time goes (start-up, steps, "
      "evaluations, checkpoints, with the Young-Daly interval and the expected preemption loss on spot). "
      "The figures come from a short probe on this machine (plan.probe_steps steps through the real "
      "trainer, its own time reported) or from a run directory (--from).\n"
      "Exit 3 when budget.limit_usd is below the central projected cost (what `frugal train` with "
      "plan.before_train = true refuses). See docs/plan.md.");
  cmd->add_option("config", args->config,
                  "TOML config file (default: the built-in demo, or RUN_DIR/config.toml with --from)")
      ->check(CLI::ExistingFile);
  add_set_option(cmd, args->sets, "train.steps=5000");
  cmd->add_option("--from", args->from,
                  "measure from this finished or partial run directory (metrics.jsonl, summary.json) "
                  "instead of probing")
      ->type_name("RUN_DIR")
      ->check(CLI::ExistingDirectory);
  cmd->add_option("--instance", args->instance,
                  "project onto this row of the price table (data/prices.toml): its prices and watts, "
                  "step and evaluation times scaled by peak FLOP/s measured here over its peak_tflops "
                  "(a rough model: the range widens 3x each way)")
      ->type_name("NAME");
  cmd->add_option("--peak-tflops", args->peak_tflops,
                  "the instance's peak TFLOP/s, instead of its peak_tflops in the price table")
      ->check(positive(false));
  cmd->add_option("--gpus", args->gpus,
                  "with --gpu-memory-gb: say which dist.zero the model needs on this many GPUs (what one rank "
                  "holds at each ZeRO stage, with the probe's activations)")
      ->check(positive(true))
      ->type_name("N");
  cmd->add_option("--gpu-memory-gb", args->gpu_memory_gb, "the memory of each of the --gpus GPUs, in GB (e.g. 80)")
      ->check(positive(false))
      ->type_name("GB");
  cmd->add_flag("--json", args->json, "print the plan as one JSON object on stdout; the table goes to stderr");
  cmd->add_option("--json-out", args->json_out, "write the plan as JSON here (default: runs/<run.name>/plan.json)")
      ->type_name("FILE");
  cmd->callback([args, run] { *run = [args] { return run_plan(*args); }; });
}

}  // namespace frugal::cli
