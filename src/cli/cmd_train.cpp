// `frugal train [CONFIG] [--set section.key=value]... [--overwrite] [--quiet]`
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <memory>

#include "cli/commands.h"
#include "frugal/core/errors.h"
#include "frugal/monitor/console.h"
#include "frugal/train/trainer.h"

namespace frugal::cli {

namespace {
struct TrainArgs {
  std::string config;
  std::vector<std::string> sets;
  bool overwrite = false;
  bool quiet = false;
};

void print_summary(const nlohmann::json& s) {
  auto& con = Console::get();
  con.line("summary:");
  auto num = [&](const char* key, const char* f) {
    if (s.contains(key) && s[key].is_number()) con.line(fmt::format(fmt::runtime(f), key, s[key].get<double>()));
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
  if (s.value("usd_per_hour", 0.0) > 0 || s.value("watts", 0.0) > 0)
    con.line(fmt::format("  {:<22} ${:.4f} | {:.4f} kWh | {:.4f} kg CO2", "cost", s["cost_usd"].get<double>(),
                         s["energy_kwh"].get<double>(), s["kg_co2"].get<double>()));
  if (s.contains("answer_accuracy"))
    con.line(fmt::format("  {:<22} {:.1f}% of {} held-out problems", "answer_accuracy",
                         100.0 * s["answer_accuracy"].get<double>(), s["answer_samples"].get<int64_t>()));
  con.line(fmt::format("  {:<22} {}", "stop_reason", s["stop_reason"].get<std::string>()));
}
}  // namespace

void add_train_command(CLI::App& app, Run* run) {
  auto args = std::make_shared<TrainArgs>();
  auto* cmd = app.add_subcommand(
      "train",
      "Train a model. Without CONFIG, trains the built-in demo (examples/demo.toml): a small GPT "
      "on seeded arithmetic problems.\nWrites runs/<name>/: config.toml, metrics.jsonl, "
      "summary.json, final/model.safetensors.");
  cmd->add_option("config", args->config, "TOML config file (see `frugal config --list`)")
      ->check(CLI::ExistingFile);
  cmd->add_option("--set", args->sets,
                  "override one key, e.g. --set train.steps=200 (repeatable; wins over the file "
                  "and FRUGAL_* environment variables)")
      ->type_name("KEY=VALUE");
  cmd->add_flag("--overwrite", args->overwrite, "replace an existing runs/<name>/ directory");
  cmd->add_flag("-q,--quiet", args->quiet, "no banner or progress; only errors");
  cmd->callback([args, run] {
    *run = [args] {
      Trainer trainer(resolve_config(args->config, args->sets, process_environment()),
                      TrainerOptions{args->overwrite, args->quiet, {}});
      auto summary = trainer.fit();
      print_summary(summary);
      Console::get().line(fmt::format("wrote {}/summary.json", trainer.run_dir()));
      // A guard (budget, divergence) ended the run on purpose: exit code 3.
      return summary.value("stopped_by_guard", false) ? static_cast<int>(kExitGuard) : 0;
    };
  });
}

}  // namespace frugal::cli
