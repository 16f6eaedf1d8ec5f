// `frugal train [CONFIG] [--set section.key=value]... [--overwrite] [--resume auto|PATH] [--quiet] [--json]
//  [--stop-at-step N]`
//
// Started by `frugal launch`, torchrun, Slurm or mpirun (dist/env.h), it joins the other ranks
// of a data-parallel run first.
//
// Exit codes: 0 done (also an early stop), 75 stopped by a signal with a checkpoint written
// (resume with --resume auto), 3 stopped by the divergence guard.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <memory>

#include "cli/commands.h"
#include "frugal/ckpt/run_dir.h"
#include "frugal/core/atomic_file.h"
#include "frugal/core/console.h"
#include "frugal/core/errors.h"
#include "frugal/core/exit_code.h"
#include "frugal/dist/data_parallel.h"
#include "frugal/dist/env.h"
#include "frugal/dist/process_group.h"
#include "frugal/monitor/progress.h"  // format_usd
#include "frugal/train/preemption.h"
#include "frugal/tune/smoke.h"
#include "frugal/train/trainer.h"

namespace frugal::cli {
namespace fs = std::filesystem;

namespace {
struct TrainArgs {
  std::string config;
  std::vector<std::string> sets;
  bool overwrite = false;
  bool quiet = false;
  bool json = false;
  std::string resume;
  int64_t stop_at_step = 0;
};

void print_summary(const nlohmann::json& s) {
  auto& con = Console::get();
  con.line("summary:");
  // A loss not measured yet (no evaluation ran, the first log window did not close) is said as
  // such, not printed as nan (summary.json has null there).
  auto num = [&](const char* key, const char* f) {
    if (!s.contains(key)) return;
    if (s[key].is_number() && std::isfinite(s[key].get<double>()))
      con.line(fmt::format(fmt::runtime(f), key, s[key].get<double>()));
    else if (s[key].is_null() || s[key].is_number())
      con.line(fmt::format("  {:<22} not measured", key));
  };
  num("steps", "  {:<22} {:.0f}");
  num("tokens", "  {:<22} {:.0f}");
  num("wall_s", "  {:<22} {:.1f}");
  num("tokens_per_s", "  {:<22} {:.0f}");
  num("final_train_loss", "  {:<22} {:.4f}");
  num("final_val_loss", "  {:<22} {:.4f}");
  num("best_val_loss", "  {:<22} {:.4f}");
  num("unigram_baseline_loss", "  {:<22} {:.4f}");
  num("params", "  {:<22} {:.0f}");
  if (s.value("mfu", 0.0) > 0) {
    // Against the datasheet first where frugal knows the GPU, then against the measured peak.
    std::string second;
    if (s.contains("mfu_datasheet") && s["mfu_datasheet"].is_number() && s.contains("mfu_measured") &&
        s.value("peak_tflops_measured", 0.0) != s.value("peak_tflops", 0.0))
      second = fmt::format("; {:.1f}% of the measured {:.3f} TFLOP/s", 100 * s["mfu_measured"].get<double>(),
                           s.value("peak_tflops_measured", 0.0));
    con.line(fmt::format("  {:<22} {:.1f}% of {:.3f} TFLOP/s{}{}", "mfu", 100 * s["mfu"].get<double>(),
                         s.value("peak_tflops", 0.0), second,
                         s.contains("mfu_note") ? " (" + s["mfu_note"].get<std::string>() + ")" : ""));
  }
  if (s.value("usd_per_hour", 0.0) > 0 || s.value("watts", 0.0) > 0)
    con.line(fmt::format("  {:<22} {} | {:.4f} kWh | {:.4f} kg CO2", "cost", format_usd(s["cost_usd"].get<double>()),
                         s["energy_kwh"].get<double>(), s["kg_co2"].get<double>()));
  if (s.contains("answer_accuracy"))
    con.line(fmt::format("  {:<22} {:.1f}% of {} held-out problems", "answer_accuracy",
                         100.0 * s["answer_accuracy"].get<double>(), s["answer_samples"].get<int64_t>()));
  con.line(fmt::format("  {:<22} {}", "stop_reason", s["stop_reason"].get<std::string>()));
}
// train.auto_tune: runs `frugal tune` and returns its report (null when off). The report is kept
// in runs/<name>/auto_tune.json, and a resumed run reuses that choice instead of tuning again,
// so it continues with the settings its checkpoints were written with.
nlohmann::json auto_tune(const ResolvedConfig& rc, const TrainArgs& args,
                         const std::map<std::string, std::string>& env) {
  if (!rc.config.train.auto_tune) return nullptr;
  auto& con = Console::get();
  const std::string path = RunDir::of(rc.config).auto_tune();
  // --quiet: no progress, table or choice (as plan.before_train); --json: Console sends them to stderr.
  auto say = [&](const std::string& text) {
    if (!args.quiet) con.line(text);
  };
  if (!args.resume.empty() && std::filesystem::exists(path)) {
    nlohmann::json j = nlohmann::json::parse(read_small_file(path));
    say(fmt::format("auto_tune: resuming with the earlier choice in {}: {}", path, j["chosen"].dump()));
    return j;
  }
  TuneReport report = run_tune(args.config, args.sets, env, args.quiet ? TuneProgress() : console_tune_progress());
  con.finish_status();
  say(report.table());
  if (report.best < 0) {
    say("auto_tune: no candidate qualified; training with the configuration as given");
    return nullptr;
  }
  nlohmann::json j = report.to_json();
  write_file_atomic(path, j.dump(2) + "\n");
  say("auto_tune: training with " + j["chosen"].get<std::string>());
  return j;
}

// The command that continues this run, verbatim: a resume takes the run's own config, so its
// location is all it needs.
std::string resume_command_for(const Config& c) {
  const Config defaults;
  std::string command = "frugal train";
  if (c.run.out_dir != defaults.run.out_dir) command += " --set run.out_dir=" + shell_word(c.run.out_dir);
  if (c.run.name != defaults.run.name) command += " --set run.name=" + shell_word(c.run.name);
  return command + " --resume auto";
}

// How this run continues after an error the user fixes (a full disk), for the error's advice
// (core/exit_code.h): its own resume command, or, where it writes no checkpoints, that its
// progress is lost.
std::string how_to_continue(const Config& c, bool distributed, const std::string& resume_command) {
  if (!c.checkpoint.enabled)
    return "start the run again (the same command with --overwrite): it writes no checkpoints "
           "(checkpoint.enabled = false), so its progress is lost; set checkpoint.enabled = true to make "
           "a run resumable";
  return fmt::format(
      "continue the run with {}: a checkpoint is written to a temporary file and renamed into place, so "
      "every one it can resume from is whole",
      distributed ? "the same launch command and --resume auto" : "`" + resume_command + "`");
}

// A run directory this invocation created, left by a failure before any step was logged or saved
// (data that failed its checksum at the first batch, say): removed, so that the same command runs
// again once the cause is fixed instead of finding "a run" there. Returns whether it was removed.
bool remove_if_nothing_trained(const std::string& root, bool created_here) {
  std::error_code ec;
  if (!created_here || !fs::is_directory(root, ec)) return false;
  const RunDir dir(root);
  const bool saved = fs::exists(dir.summary(), ec) ||
                     (fs::is_directory(dir.checkpoints(), ec) && !fs::is_empty(dir.checkpoints(), ec));
  if (saved || (fs::exists(dir.metrics(), ec) && fs::file_size(dir.metrics(), ec) > 0)) return false;
  fs::remove_all(root, ec);
  return !ec;
}

// `frugal train`: auto-tune, smoke test and plan when the config asks, join the other ranks when
// launched as one, then the Trainer; the exit code says how the run ended.
int run_train(const TrainArgs& args) {
  const double launch_s = process_age_s();
  Console::get().set_json_mode(args.json);
  const auto penv = process_environment();
  ResolvedConfig rc = resolve_config(args.config, args.sets, penv);
  // Started by frugal launch, torchrun, Slurm or mpirun: join the other ranks.
  const dist::DistEnv env = dist::dist_env_from(penv);
  nlohmann::json tuned;
  if (env.distributed() && rc.config.train.auto_tune)
    Console::get().line(
        "auto_tune: skipped in a multi-process run (ranks must agree on one "
        "setting); run `frugal tune` once and train with its config");
  else
    tuned = auto_tune(rc, args, penv);
  std::vector<std::string> sets = args.sets;
  if (!tuned.is_null()) {
    for (const auto& s : tuned["chosen_sets"]) sets.push_back(s.get<std::string>());
    rc = resolve_config(args.config, sets, penv);
  }
  if (rc.config.train.smoke_first && env.rank == 0) {
    SmokeReport r = run_smoke(rc);
    // A stop signal during it (its trainers stop at once) is not a failed smoke test: exit 75, and
    // the same command (or a requeue with --resume auto) starts the run. (A stop during the
    // auto_tune probes ends the command there, with exit 75 and nothing written, as `frugal tune`.)
    if (preemption_requested()) {
      Console::get().line(
          fmt::format("stopped by signal {} ({}) during train.smoke_first, before training "
                      "began; run the same command again",
                      preemption_signal(), strsignal(preemption_signal())));
      return exit_status(ExitCode::kPreempted);
    }
    if (!args.quiet || !r.ok) Console::get().line(r.describe());  // --quiet: only a failure's report
    if (!r.ok) {  // the cause's kind kept: bad input exits 2 as it would without the smoke test
      const std::string context = "train.smoke_first: the smoke test failed at stage " + r.stage + ": ";
      try {
        if (r.failure) std::rethrow_exception(r.failure);
      } catch (const Error& e) {
        throw_with_context(e, context);
      } catch (...) {  // a LibTorch or standard error: a failure (exit 1), with the report's text
      }
      throw Error(context + r.error);
    }
  }
  TrainerOptions opts;
  opts.overwrite = args.overwrite;
  opts.quiet = args.quiet;
  opts.json = args.json;
  opts.resume = args.resume;
  opts.handle_signals = true;
  if (rc.config.plan.before_train) {
    if (env.distributed() || !args.resume.empty())
      Console::get().line(
          "plan.before_train: skipped in a multi-process or resumed run; the cost meter's "
          "budget.limit_usd still applies (run `frugal plan` once beforehand)");
    else
      plan_before_training(args.config, sets, penv, launch_s, args.quiet, opts.callbacks);
  }
  opts.stop_at_step = args.stop_at_step;
  if (env.distributed()) {
    if (rc.config.run.device == "cuda") rc.config.run.device = fmt::format("cuda:{}", env.local_rank);
    if (!args.quiet) Console::get().line("dist: " + env.describe());
    opts.data_parallel =
        dist::data_parallel_factory(dist::connect(env, rc.config.dist, c10::Device(rc.config.run.device)));
    opts.quiet = opts.quiet || env.rank != 0;  // rank 0 speaks for the run; errors still print
  }
  const std::string resume_command = resume_command_for(rc.config);
  set_interrupt_hint(resume_command);
  const std::string run_root = RunDir::of(rc.config).root();
  std::error_code ec;
  const bool fresh = env.rank == 0 && !fs::exists(run_root, ec);
  set_how_to_continue(how_to_continue(rc.config, env.distributed(), resume_command));
  std::unique_ptr<Trainer> owned;
  nlohmann::ordered_json summary;
  try {
    owned = std::make_unique<Trainer>(std::move(rc), opts);
    summary = owned->fit();
  } catch (...) {
    owned.reset();  // its lock released
    // Nothing left to resume: the same command starts the run (a resume would miss its config file).
    if (remove_if_nothing_trained(run_root, fresh)) set_how_to_continue("run the same command again");
    throw;
  }
  Trainer& trainer = *owned;
  if (!tuned.is_null()) {  // the choice travels with the run's figures
    summary["auto_tune"] = tuned;
    write_file_atomic(RunDir(trainer.run_dir()).summary(), summary.dump(2) + "\n");
  }
  print_summary(summary);
  Console::get().line(fmt::format("wrote {}/summary.json", trainer.run_dir()));
  const ExitCode code = exit_code_for(trainer.stop_kind());
  if (code == ExitCode::kPreempted)
    Console::get().line(fmt::format("preempted: checkpoint {}; continue with: {}",
                                    summary["checkpoint"].value("latest", std::string()),
                                    env.distributed() ? "the same launch command with --resume auto" : resume_command));
  if (code == ExitCode::kGuardStop) throw GuardStop(summary["stop_reason"].get<std::string>());
  return exit_status(code);
}

}  // namespace

void add_train_command(CLI::App& app, Run* run) {
  auto args = std::make_shared<TrainArgs>();
  auto* cmd =
      app.add_subcommand("train",
                         "Train a model. Without CONFIG, trains the built-in demo (examples/demo.toml): a small GPT "
                         "on seeded arithmetic problems.\nWrites runs/<name>/: config.toml, metrics.jsonl, "
                         "summary.json, final/model.safetensors, checkpoints/step-NNNNNNNN/.\nSIGTERM, SIGINT, "
                         "SIGUSR1 or SIGHUP (unless ignored, as under nohup): finish the step, write a checkpoint, "
                         "exit 75 (continue with --resume auto); a second SIGINT exits at once. Exit 3: the "
                         "divergence guard gave up.");
  cmd->add_option("config", args->config, "TOML config file (see `frugal config --list`)")->check(CLI::ExistingFile);
  add_set_option(cmd, args->sets, "train.steps=200");
  cmd->add_flag("--overwrite", args->overwrite, "replace an existing runs/<name>/ directory");
  cmd->add_option("--resume", args->resume,
                  "continue from a checkpoint: \"auto\" = the newest under runs/<name>/checkpoints "
                  "whose checksums verify (a corrupt newer one is reported and skipped; none = "
                  "start from step 0), or a checkpoint directory")
      ->type_name("auto|PATH");
  cmd->add_flag("-q,--quiet", args->quiet, "no banner or progress; only errors");
  cmd->add_flag("--json", args->json,
                "machine-readable progress: one JSON object per line on stdout (start, each log "
                "step as in metrics.jsonl, each evaluation, the summary); human lines go to stderr");
  cmd->add_option("--stop-at-step", args->stop_at_step,
                  "end the run after step N (with its evaluation, a checkpoint and summary.json) "
                  "without changing its schedule, which still follows train.steps; --resume auto "
                  "later continues it exactly (frugal search runs its rungs so)")
      ->type_name("N")
      ->check(positive(true));
  cmd->callback([args, run] { *run = [args] { return run_train(*args); }; });
}

}  // namespace frugal::cli
