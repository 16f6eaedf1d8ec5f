// `frugal config [--list] [CONFIG] [--set ...]`: print every key, or the resolved configuration.
// Also the options every command shares: --set, and the checks of numeric options (commands.h).
#include <fmt/format.h>

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>

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

// `text` as a whole number or a finite number, all of it; nullopt where it is not one.
std::optional<int64_t> whole_number(const std::string& text) {
  if (text.empty() || std::isspace(static_cast<unsigned char>(text.front()))) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (*end != '\0' || errno != 0) return std::nullopt;
  return static_cast<int64_t>(v);
}
std::optional<double> number(const std::string& text) {
  if (text.empty() || std::isspace(static_cast<unsigned char>(text.front()))) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(text.c_str(), &end);
  if (*end != '\0' || errno != 0 || !std::isfinite(v)) return std::nullopt;
  return v;
}

// CLI11 prefixes the message with the flag: "--gpus: must be ..., not 0".
std::string must_be(const std::string& what, const std::string& input) {
  return fmt::format("must be {}, not {}", what, input.empty() ? "''" : input);
}

}  // namespace

CLI::Validator positive(bool whole) {
  const std::string what = whole ? "a positive integer (1 or more)" : "a positive number (above 0)";
  return CLI::Validator(
      [whole, what](std::string& in) {
        const bool ok = whole ? whole_number(in).value_or(0) >= 1 : number(in).value_or(0) > 0;
        return ok ? std::string() : must_be(what, in);
      },
      "POSITIVE");
}

CLI::Validator non_negative(bool whole) {
  const std::string what = whole ? "a whole number (0 or more)" : "a number (0 or more)";
  return CLI::Validator(
      [whole, what](std::string& in) {
        const bool ok = whole ? whole_number(in).value_or(-1) >= 0 : number(in).value_or(-1) >= 0;
        return ok ? std::string() : must_be(what, in);
      },
      "NONNEGATIVE");
}

CLI::Validator whole_range(int64_t lo, int64_t hi) {
  const std::string what = fmt::format("a whole number from {} to {}", lo, hi);
  return CLI::Validator(
      [lo, hi, what](std::string& in) {
        const auto v = whole_number(in);
        return v && *v >= lo && *v <= hi ? std::string() : must_be(what, in);
      },
      fmt::format("INT in [{} - {}]", lo, hi));
}

CLI::Validator number_range(double lo, double hi) {
  const std::string what = fmt::format("a number from {:g} to {:g}", lo, hi);
  return CLI::Validator(
      [lo, hi, what](std::string& in) {
        const auto v = number(in);
        return v && *v >= lo && *v <= hi ? std::string() : must_be(what, in);
      },
      fmt::format("FLOAT in [{:g} - {:g}]", lo, hi));
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
