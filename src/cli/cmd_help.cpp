// `frugal help [--markdown]`: the command-line reference, generated from the CLI's own option
// tables (every subcommand, positional argument and flag with its help text). docs/cli.md is this
// command's --markdown output; tests/cli/cli_reference_test.cpp fails when the two drift apart.
#include <fmt/format.h>

#include <memory>
#include <string>

#include "cli/commands.h"

namespace frugal::cli {

namespace {

// A table cell: pipes escaped, line breaks as <br>.
std::string cell(const std::string& s) {
  std::string out;
  for (char ch : s) {
    if (ch == '|') out += "\\|";
    else if (ch == '\n') out += "<br>";
    else out += ch;
  }
  return out;
}

// A default value as typed on a command line: control characters escaped.
std::string shown_default(const std::string& s) {
  std::string out;
  for (char ch : s) {
    if (ch == '\n') out += "\\n";
    else if (ch == '\t') out += "\\t";
    else out += ch;
  }
  return out;
}

std::string option_names(const CLI::Option& o) {
  if (o.get_positional()) return "`" + o.get_name() + "` (positional)";
  std::string names;
  for (const auto& s : o.get_snames()) names += (names.empty() ? "`-" : ", `-") + s + "`";
  for (const auto& l : o.get_lnames()) names += (names.empty() ? "`--" : ", `--") + l + "`";
  return names;
}

std::string option_argument(const CLI::Option& o) {
  if (o.get_type_size() == 0) return "";  // a flag
  std::string t = o.get_type_name();
  if (o.get_expected_max() > 1) t += " ...";
  return cell(t);
}

void describe_command(const CLI::App& app, const std::string& path, std::string& out) {
  out += fmt::format("\n## {}\n\n{}\n", path, app.get_description());
  std::string rows;
  for (const CLI::Option* o : app.get_options()) {
    if (o == app.get_help_ptr() || o->get_name().empty()) continue;
    std::string desc = o->get_description();
    if (!o->get_default_str().empty()) desc += fmt::format(" (default: `{}`)", shown_default(o->get_default_str()));
    if (o->get_required()) desc += " (required)";
    if (o->get_expected_max() > 1 && !o->get_positional() && desc.find("repeatable") == std::string::npos)
      desc += " (repeatable)";
    rows += fmt::format("| {} | {} | {} |\n", option_names(*o), option_argument(*o), cell(desc));
  }
  if (!rows.empty()) out += "\n| Option | Argument | Description |\n|---|---|---|\n" + rows;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; }))
    describe_command(*sub, path + " " + sub->get_name(), out);
}

}  // namespace

std::string cli_reference_markdown(const CLI::App& app) {
  std::string out =
      "# frugal command-line reference\n\n"
      "Generated from the CLI's own option tables by `frugal help --markdown > docs/cli.md`; a test\n"
      "fails when this file and the binary disagree. Every flag is also shown by `frugal <command>\n"
      "--help`. Config keys (`--set section.key=value`) are listed in [config.md](config.md).\n\n" +
      app.get_description() + "\n";
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; }))
    describe_command(*sub, "frugal " + sub->get_name(), out);
  return out;
}

void add_help_command(CLI::App& app, Run* run) {
  auto markdown = std::make_shared<bool>(false);
  auto* cmd = app.add_subcommand("help", "Print the reference of every command and flag (docs/cli.md).");
  cmd->add_flag("--markdown", *markdown, "print it as Markdown (docs/cli.md is this output)");
  CLI::App* root = &app;
  cmd->callback([markdown, root, run] {
    *run = [markdown, root] {
      if (*markdown)
        fmt::print("{}", cli_reference_markdown(*root));
      else
        fmt::print("{}", root->help("frugal", CLI::AppFormatMode::All));
      return 0;
    };
  });
}

}  // namespace frugal::cli
