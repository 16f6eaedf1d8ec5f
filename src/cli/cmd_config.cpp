// `frugal config [--list] [CONFIG] [--set ...]`: print every key, or the resolved configuration.
#include <fmt/format.h>

#include <memory>

#include "cli/commands.h"
#include "frugal/core/config_loader.h"
#include "frugal/core/errors.h"
#include "frugal/train/run_config.h"

namespace frugal::cli {

CLI::Option* add_set_option(CLI::App* cmd, std::vector<std::string>& sets, const std::string& example,
                            const std::string& scope) {
  return cmd
      ->add_option("--set", sets,
                   fmt::format("override one key{}, e.g. --set {} (repeatable; wins over the config file and "
                               "FRUGAL_* environment variables; `frugal config --list` lists the keys)",
                               scope.empty() ? "" : " " + scope, example))
      ->type_name("KEY=VALUE");
}

namespace {
struct ConfigArgs {
  bool list = false;
  bool markdown = false;
  std::string config;
  std::vector<std::string> sets;
};
}  // namespace

void add_config_command(CLI::App& app, Run* run) {
  auto args = std::make_shared<ConfigArgs>();
  auto* cmd =
      app.add_subcommand("config",
                         "Print the resolved configuration as TOML (defaults < FRUGAL_* env < CONFIG < --set), each "
                         "value with its origin; or, with --list, every key with its default, range and variable.");
  cmd->add_flag("--list", args->list, "list every key: default, allowed values, env variable, help");
  cmd->add_flag("--markdown", args->markdown, "print the key reference as Markdown (docs/config.md)");
  cmd->add_option("config", args->config, "TOML config file")->check(CLI::ExistingFile);
  add_set_option(cmd, args->sets, "train.steps=200");
  cmd->callback([args, run] {
    *run = [args] {
      if (args->markdown) {
        fmt::print("{}", config_reference_markdown());
        return 0;
      }
      if (args->list) {
        Config defaults;
        for (const auto& k : config_schema()) {
          fmt::print("{}\n    default {}; {}; env {}\n    {}\n", k.key, format_value(k.get(defaults)), k.allowed(),
                     k.env_name(), k.help);
        }
        return 0;
      }
      // As `frugal train` would run it: model.vocab from a shards dataset, model.* from init_from.
      // What cannot be completed here (a dataset not there yet) is said, and the rest printed.
      ResolvedConfig rc = resolve_config(args->config, args->sets, process_environment());
      try {
        complete_config(rc);
      } catch (const Error& e) {
        fmt::print(stderr, "note: printed without what the data or model.init_from would fill in: {}\n", e.what());
      }
      fmt::print("{}", rc.to_toml());
      return 0;
    };
  });
}

}  // namespace frugal::cli
