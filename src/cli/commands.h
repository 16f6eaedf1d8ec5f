// Subcommands of the `frugal` tool. Each add_*_command registers its options on the app and sets
// *run to the function main() calls after a successful parse. Commands throw frugal errors;
// main() maps them to exit codes (errors.h).
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "frugal/core/callback.h"
#include "frugal/train/preemption.h"
#include "frugal/tune/tuner.h"

namespace frugal::cli {

using Run = std::function<int()>;

void add_train_command(CLI::App& app, Run* run);
void add_sample_command(CLI::App& app, Run* run);
void add_doctor_command(CLI::App& app, Run* run);
void add_config_command(CLI::App& app, Run* run);
void add_report_commands(CLI::App& app, Run* run);  // report, compare
void add_smoke_command(CLI::App& app, Run* run);
void add_prepare_command(CLI::App& app, Run* run);
// `frugal inspect DIR`: a chat or prompt-completion dataset's documents as the model sees them.
void add_inspect_command(CLI::App& app, Run* run);
void add_archive_commands(CLI::App& app, Run* run);  // archive, restore
void add_launch_command(CLI::App& app, Run* run);
// `frugal help [--markdown]`: every command and flag, from the registered tables (register last).
void add_help_command(CLI::App& app, Run* run);
// "" when every option word of `args` (argv without the program) is one the commands on its
// path know and the first non-option word is a command; otherwise the message to print: the word
// that was not understood, the closest choice, and where the choices are listed. Words after
// "--" are not looked at.
std::string unknown_words_message(const CLI::App& app, const std::vector<std::string>& args);
std::string cli_reference_markdown(const CLI::App& app);
void add_tune_command(CLI::App& app, Run* run);
void add_search_command(CLI::App& app, Run* run);

void add_plan_command(CLI::App& app, Run* run);
// `frugal export RUN_DIR --out DIR`: a run's GPT in the Hugging Face GPT-2 layout (cmd_export.cpp).
void add_export_command(CLI::App& app, Run* run);
// Seconds since this process started (its launch: exec, libraries, the OpenMP re-exec), from
// /proc; 0 where that cannot be read (cmd_plan.cpp).
double process_age_s();
// plan.before_train for `frugal train` (cmd_plan.cpp): plans the run (progress and table on the
// console unless quiet), throws GuardStop when budget.limit_usd is below the central projected
// cost (nothing written), else adds the plan's callback: the banner line, runs/<name>/plan.json
// and summary.json's "plan".
void plan_before_training(const std::string& config, const std::vector<std::string>& sets,
                          const std::map<std::string, std::string>& env, double launch_s, bool quiet,
                          std::vector<std::shared_ptr<Callback>>& callbacks);

// The --set option, declared here once for every command that takes it: "override one key, e.g.
// --set EXAMPLE (repeatable; wins over ...)"; `scope` says whose config it overrides where that is
// not the command's own ("for every trial").
CLI::Option* add_set_option(CLI::App* cmd, std::vector<std::string>& sets, const std::string& example,
                            const std::string& scope = "");
// Checks of numeric options (cmd_config.cpp), whose message names the flag, what it takes and the
// value given: "--gpus: must be a positive integer (1 or more), not 0". CLI11's own (PositiveNumber,
// NonNegativeNumber, Range) print their bounds with %f: "Value 0 not in range 0.000000 to" a
// 309-digit number. `whole`: the option is an integer. The names shown in the help stay CLI11's
// (POSITIVE, NONNEGATIVE, INT in [1 - 65535]).
CLI::Validator positive(bool whole);
CLI::Validator non_negative(bool whole);
CLI::Validator whole_range(int64_t lo, int64_t hi);
CLI::Validator number_range(double lo, double hi);
template <class T>
CLI::Validator in_range(T lo, T hi) {
  if constexpr (std::is_integral_v<T>)
    return whole_range(static_cast<int64_t>(lo), static_cast<int64_t>(hi));
  else
    return number_range(static_cast<double>(lo), static_cast<double>(hi));
}
// " --set K=V" for each of `sets`, shell-quoted (console.h: shell_word).
std::string set_flags(const std::vector<std::string>& sets);
// Refuses (ConfigError, exit 2) an output file path `path` given by `flag` before any work: a
// folder (the message suggests `example` in it), a path below a file, or one in a folder this
// process cannot write to. "" passes.
void check_output_file(const std::string& flag, const std::string& path, const std::string& example);
// The stop-signal handlers of a command with nothing to continue from (`command`: "frugal tune",
// "frugal plan"): the flag cleared, and a second Ctrl-C's line naming it; installed while held.
std::unique_ptr<SignalHandlers> stop_signals_for(const std::string& command);
// Tune progress on the console: permanent lines, and a status line on a TTY (cmd_tune.cpp).
TuneProgress console_tune_progress();

}  // namespace frugal::cli
