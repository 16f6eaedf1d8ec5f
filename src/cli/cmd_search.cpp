// `frugal search SEARCH.toml [--out DIR] [--parallel N] [--max-usd X] [--max-hours H]
//  [--resume auto] [--overwrite] [--set KEY=VALUE]...`: architecture and hyper-parameter search by
// successive halving (tune/search.h, docs/search.md).
//
// Exit codes: 0 done, 3 a budget (search.max_usd, search.max_hours) stopped it (what was measured
// is ranked and written), 75 a stop signal or a preempted trial stopped it (continue with
// --resume auto), 2 a bad search file.
#include <fmt/format.h>

#include <filesystem>
#include <memory>

#include "cli/commands.h"
#include "frugal/core/console.h"
#include "frugal/core/errors.h"
#include "frugal/core/exit_code.h"
#include "frugal/search/search.h"
#include "frugal/search/search_space.h"

namespace frugal::cli {

std::string set_flags(const std::vector<std::string>& sets) {
  std::string out;
  for (const auto& s : sets) out += " --set " + shell_word(s);
  return out;
}

void add_search_command(CLI::App& app, Run* run) {
  struct Args {
    SearchOptions options;
    bool quiet = false;
  };
  auto args = std::make_shared<Args>();
  SearchOptions& o = args->options;
  auto* cmd = app.add_subcommand(
      "search",
      "Search a space of config values (model shape, learning rate, batch, precision, ...) by successive "
      "halving: every trial is a `frugal train` run in <out>/trials/<id>/, trained to the first rung; at each "
      "rung the best 1/eta go on from their checkpoints, the rest stop. Ranks the trials by the metric and "
      "their cost, and writes <out>/search.json, search.html (table and Pareto charts) and best.toml.\n"
      "Exit 3: search.max_usd or search.max_hours was reached (the outputs rank what was measured). Exit 75: "
      "stopped by a signal; continue with --resume auto. See docs/search.md.");
  std::string keys = "[search] keys of the search file (every one optional):\n";
  for (const auto& [key, help] : search_keys()) keys += fmt::format("  {:<11} {}\n", key, help);
  cmd->footer(keys);
  cmd->add_option("space", o.file,
                  "the search file: [search] options, [space] keys and values, and config "
                  "sections fixed for every trial (examples/search.toml)")
      ->required()
      ->check(CLI::ExistingFile);
  add_set_option(cmd, o.sets, "train.steps=300", "for every trial");
  cmd->add_option("--out", o.out, "the search folder (default: search.out, else runs/<file name>)")->type_name("DIR");
  cmd->add_option("--parallel", o.parallel,
                  "trials trained at once (default: search.parallel, else 1); the cores are shared out "
                  "through run.threads unless it is set")
      ->type_name("N")
      ->check(positive(true));
  cmd->add_option("--max-usd", o.max_usd, "stop once the trials have spent this many dollars (default: search.max_usd)")
      ->type_name("USD")
      ->check(non_negative(false));
  cmd->add_option("--max-hours", o.max_hours,
                  "stop once the search has run this many hours, over all its sessions (default: search.max_hours)")
      ->type_name("H")
      ->check(non_negative(false));
  cmd->add_option("--resume", o.resume,
                  "\"auto\": continue the search in the folder from its state file (after a kill, a budget stop or "
                  "exit 75), repeating no finished trial-rung; starts one when there is none")
      ->type_name("auto");
  cmd->add_flag("--overwrite", o.overwrite, "replace a search already in the folder");
  cmd->add_flag("-q,--quiet", args->quiet, "no progress lines; only the table and errors");
  cmd->callback([args, run] {
    *run = [args] {
      auto& con = Console::get();
      SearchOptions opts = args->options;
      std::error_code ec;
      opts.trainer = std::filesystem::read_symlink("/proc/self/exe", ec).string();
      if (ec) throw IoError("frugal search: cannot find its own program (/proc/self/exe): " + ec.message());
      if (!args->quiet) opts.progress = [&con](const std::string& line) { con.line(line); };
      const SearchOutcome r = run_search(opts);
      con.line(r.table);
      con.line(fmt::format(
          "wrote {0}/search.json, {0}/search.html{1}", r.dir,
          r.best_toml.empty() ? ""
                              : fmt::format(", {} (train it: frugal train {})", r.best_toml, shell_word(r.best_toml))));
      if (r.end == SearchEnd::kInterrupted) {
        // The same file, folder and --set flags: a resume must search the same space.
        con.line(fmt::format("stopped: {}; continue with: frugal search {} --resume auto{}{}", r.reason,
                             shell_word(opts.file), opts.out.empty() ? "" : " --out " + shell_word(opts.out),
                             set_flags(opts.sets)));
        return exit_status(ExitCode::kPreempted);
      }
      if (r.end == SearchEnd::kBudget)
        throw GuardStop(
            fmt::format("{}; the outputs rank what was measured (raise the budget and continue with: "
                        "frugal search {} --resume auto{}{} --max-usd USD or --max-hours H)",
                        r.reason, shell_word(opts.file), opts.out.empty() ? "" : " --out " + shell_word(opts.out),
                        set_flags(opts.sets)));
      return 0;
    };
  });
}

}  // namespace frugal::cli
