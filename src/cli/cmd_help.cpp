// `frugal help [COMMAND...] [--markdown]`: the command-line reference, generated from the CLI's own
// option tables (every subcommand, positional argument and flag with its help text), or one
// command's help. docs/cli.md is the --markdown output; tests/cli/cli_reference_test.cpp fails when
// the two drift apart. Also the check of words the parser would misread (unknown_words_message).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "frugal/core/config_loader.h"  // edit_distance
#include "frugal/core/errors.h"

#include "cli/commands.h"

namespace frugal::cli {

namespace {

// A table cell: pipes escaped, line breaks as <br>.
std::string cell(const std::string& s) {
  std::string out;
  for (char ch : s) {
    if (ch == '|')
      out += "\\|";
    else if (ch == '\n')
      out += "<br>";
    else
      out += ch;
  }
  return out;
}

// A default value as typed on a command line: control characters escaped.
std::string shown_default(const std::string& s) {
  std::string out;
  for (char ch : s) {
    if (ch == '\n')
      out += "\\n";
    else if (ch == '\t')
      out += "\\t";
    else
      out += ch;
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
  if (!app.get_footer().empty()) out += fmt::format("\n```text\n{}```\n", app.get_footer());
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; }))
    describe_command(*sub, path + " " + sub->get_name(), out);
}

std::vector<const CLI::App*> subcommands_of(const CLI::App& app) {
  return app.get_subcommands([](const CLI::App*) { return true; });
}

// " (did you mean 'x'?)" for the closest of `choices` within a third of the word's length, or "".
std::string suggestion(const std::string& word, const std::vector<std::string>& choices) {
  std::string best;
  size_t best_d = std::max<size_t>(2, word.size() / 3) + 1;
  for (const auto& c : choices) {
    const size_t d = edit_distance(word, c);
    if (d < best_d) best_d = d, best = c;
  }
  return best.empty() ? "" : fmt::format(" (did you mean '{}'?)", best);
}

// The subcommand of `app` named `name`, or null.
const CLI::App* find_subcommand(const CLI::App& app, const std::string& name) {
  for (const CLI::App* s : subcommands_of(app))
    if (s->get_name() == name) return s;
  return nullptr;
}

std::vector<std::string> command_names(const CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::App* sub : subcommands_of(app)) names.push_back(sub->get_name());
  return names;
}

// The option of `app` (or of an enclosing command: --help, --version) that `word` names, or null.
const CLI::Option* find_option(const CLI::App* app, const std::string& word) {
  for (; app; app = app->get_parent()) {
    for (const CLI::Option* o : app->get_options()) {
      if (word.rfind("--", 0) == 0) {
        for (const auto& l : o->get_lnames())
          if (word.compare(2, std::string::npos, l) == 0) return o;
      } else {
        for (const auto& sn : o->get_snames())
          if (word.compare(1, std::string::npos, sn) == 0) return o;
      }
    }
  }
  return nullptr;
}

bool looks_numeric(const std::string& w) {
  char* end = nullptr;
  std::strtod(w.c_str(), &end);
  return end && *end == '\0' && end != w.c_str();
}

}  // namespace

std::string unknown_words_message(const CLI::App& app, const std::vector<std::string>& args) {
  const CLI::App* at = &app;
  std::string path = "frugal";
  bool command_seen = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& w = args[i];
    if (w == "--") break;  // what follows belongs to another program (frugal launch -- ...)
    if (w.size() > 1 && w[0] == '-' && !looks_numeric(w)) {
      // --name or --name=value; -x, or -xVALUE (a short option with its value attached)
      const std::string name = w[1] == '-' ? w.substr(0, w.find('=')) : w.substr(0, 2);
      const CLI::Option* o = find_option(at, name);
      if (!o) {
        std::vector<std::string> choices;
        for (const CLI::App* a = at; a; a = a->get_parent())
          for (const CLI::Option* opt : a->get_options())
            for (const auto& l : opt->get_lnames()) choices.push_back("--" + l);
        return fmt::format("unknown option '{}' for `{}`{}; `{} --help` lists its options", name, path,
                           suggestion(name, choices), path);
      }
      // An option that takes a value: the next word is that value, whatever it looks like.
      if (o->get_type_size_max() > 0 && name == w && i + 1 < args.size()) ++i;
      continue;
    }
    if (const CLI::App* sub = find_subcommand(*at, w)) {
      at = sub;
      path += " " + w;
      command_seen = true;
    } else if (!command_seen && at == &app) {
      const auto names = command_names(app);
      return fmt::format("unknown command '{}'{}; the commands are: {} (`frugal help` describes each)", w,
                         suggestion(w, names), fmt::join(names, ", "));
    }
  }
  return "";
}

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
  auto words = std::make_shared<std::vector<std::string>>();
  auto* cmd =
      app.add_subcommand("help", "Print the reference of every command and flag (docs/cli.md), or of one command.");
  cmd->add_option("command", *words, "a command (`frugal help train`): print its help only");
  cmd->add_flag("--markdown", *markdown, "print it as Markdown (docs/cli.md is this output)");
  CLI::App* root = &app;
  cmd->callback([markdown, words, root, run] {
    *run = [markdown, words, root] {
      const CLI::App* at = root;
      std::string path = "frugal";
      for (const std::string& w : *words) {
        const CLI::App* next = find_subcommand(*at, w);
        if (!next) {
          const auto names = command_names(*at);
          throw ConfigError(fmt::format(
              "frugal help: '{}' is not a command of `{}`{}; {}", w, path, suggestion(w, names),
              names.empty() ? "it has no subcommands" : fmt::format("the commands are: {}", fmt::join(names, ", "))));
        }
        at = next;
        path += " " + w;
      }
      if (*markdown && at == root)
        fmt::print("{}", cli_reference_markdown(*root));
      else if (*markdown)
        throw ConfigError("frugal help --markdown prints the whole reference; leave out the command");
      else  // the formatter directly: App::help() would show the help of the command being run (help)
        fmt::print("{}", at->get_formatter()->make_help(
                             at, path, at == root ? CLI::AppFormatMode::All : CLI::AppFormatMode::Normal));
      return 0;
    };
  });
}

}  // namespace frugal::cli
