// Resolves a Config from defaults, environment, a TOML file and --set overrides (see the header).
// toml++ trips a GCC 12 -Warray-bounds false positive in its inline table storage.
#pragma GCC diagnostic push  // popped at the end: the file may share a unity translation unit
#pragma GCC diagnostic ignored "-Warray-bounds"
#define TOML_HEADER_ONLY 1
#define TOML_EXCEPTIONS 1
#include <toml++/toml.h>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <sstream>

#include "frugal/core/atomic_file.h"
#include "frugal/core/config_loader.h"
#include "frugal/core/config_values.h"
#include "frugal/core/errors.h"

extern char** environ;

namespace frugal {

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1])});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

namespace {

const char* type_name(ValueType t) {
  switch (t) {
    case ValueType::kBool:
      return "a boolean";
    case ValueType::kInt:
      return "an integer";
    case ValueType::kFloat:
      return "a number";
    case ValueType::kString:
      return "a string";
    case ValueType::kEnum:
      return "a string";
  }
  return "?";
}

// The first key of the section whose name starts with the typed one (train.warmup ->
// train.warmup_steps), else the nearest key (edit distance under 4).
std::string suggestion(const std::string& key) {
  const KeySpec* best = nullptr;
  size_t best_d = 4;
  for (const auto& k : config_schema()) {
    size_t d = std::min(edit_distance(key, k.key), edit_distance(key, k.name()) + 1);
    if (key.size() > k.section().size() + 1 && k.key.rfind(key, 0) == 0) d = 0;  // a name cut short
    if (d < best_d) best_d = d, best = &k;
  }
  return best ? fmt::format("; did you mean '{}'?", best->key) : "";
}

[[noreturn]] void unknown_key(const std::string& key, const std::string& where) {
  throw ConfigError(fmt::format("unknown config key '{}' ({}){}\n  hint: `frugal config --list` prints every key", key,
                                where, suggestion(key)));
}

[[noreturn]] void bad_value(const KeySpec& k, const std::string& shown, const std::string& where,
                            const std::string& why) {
  throw ConfigError(fmt::format("config key {} = {} ({}): {}; allowed: {}", k.key, shown, where, why, k.allowed()));
}

// Checks range, choices and the custom check; throws with the origin on failure.
void check_value(const KeySpec& k, const ConfigValue& v, const std::string& where) {
  const std::string shown = format_value(v);
  if (k.type == ValueType::kInt || k.type == ValueType::kFloat) {
    double x = k.type == ValueType::kInt ? static_cast<double>(std::get<int64_t>(v)) : std::get<double>(v);
    if (!std::isfinite(x) || x < *k.min || x > *k.max) bad_value(k, shown, where, "out of range");
  }
  if (k.type == ValueType::kEnum) {
    const auto& s = std::get<std::string>(v);
    if (std::find(k.choices.begin(), k.choices.end(), s) == k.choices.end())
      bad_value(k, shown, where, "not a known choice");
  }
  if (k.check) {
    std::string why = k.check(v);
    if (!why.empty()) bad_value(k, shown, where, why);
  }
}

// A list key's value given as a TOML list in an environment variable or a --set value (--set
// 'lora.targets=["q_proj", "v_proj"]'): its strings joined with ", ", as a config file's list is.
std::string list_text(const KeySpec& k, const std::string& text, const std::string& where) {
  auto fail = [&](const std::string& why) {
    throw ConfigError(fmt::format(
        "config key {} = '{}' ({}): {}; give a TOML list of quoted strings, the whole argument in single "
        "quotes so that the shell keeps the double ones (--set '{}=[\"a\", \"b\"]'), or the names separated "
        "by commas (--set {}=a,b); allowed: {}",
        k.key, text, where, why, k.key, k.key, k.allowed()));
  };
  toml::table t;
  try {
    t = toml::parse("v = " + text);
  } catch (const toml::parse_error& e) {
    fail(text.find('"') == std::string::npos && text.find('\'') == std::string::npos
             ? "a list of unquoted names (the shell removes quotes not inside single quotes)"
             : fmt::format("not a TOML list ({})", e.description()));
  }
  const toml::array* list = t.get("v") ? t.get("v")->as_array() : nullptr;
  if (!list || !(list->empty() || list->is_homogeneous<std::string>()))
    fail("a TOML list of something other than strings");
  std::string joined;
  for (const auto& item : *list) joined += (joined.empty() ? "" : ", ") + *item.value_exact<std::string>();
  return joined;
}

// Parses the text of an environment variable or a --set value for key k.
ConfigValue parse_text(const KeySpec& k, std::string text, const std::string& where) {
  auto fail = [&](const char* what) {
    throw ConfigError(fmt::format("config key {} = '{}' ({}): {}; allowed: {}", k.key, text, where, what, k.allowed()));
  };
  switch (k.type) {
    case ValueType::kBool: {
      std::string t = text;
      std::transform(t.begin(), t.end(), t.begin(), ::tolower);
      if (t == "true" || t == "1" || t == "yes" || t == "on") return true;
      if (t == "false" || t == "0" || t == "no" || t == "off") return false;
      fail("not a boolean");
      break;
    }
    case ValueType::kInt: {
      errno = 0;
      char* end = nullptr;
      long long x = std::strtoll(text.c_str(), &end, 10);
      if (text.empty() || *end != '\0' || errno == ERANGE) fail("not an integer");
      return static_cast<int64_t>(x);
    }
    case ValueType::kFloat: {
      char* end = nullptr;
      double x = std::strtod(text.c_str(), &end);
      if (text.empty() || *end != '\0') fail("not a number");
      return x;
    }
    case ValueType::kString:
    case ValueType::kEnum:
      if (k.list && text.size() >= 2 && text.front() == '[' && text.back() == ']') return list_text(k, text, where);
      if (text.size() >= 2 && text.front() == '"' && text.back() == '"') text = text.substr(1, text.size() - 2);
      return text;
  }
  fail("unsupported");
  return {};
}

// Converts a TOML node for key k; throws naming the file and line on a type mismatch.
ConfigValue from_toml(const KeySpec& k, const toml::node& node, const std::string& where) {
  switch (k.type) {
    case ValueType::kBool:
      if (auto b = node.value_exact<bool>()) return *b;
      break;
    case ValueType::kInt:
      if (auto i = node.value_exact<int64_t>()) return *i;
      if (auto d = node.value_exact<double>(); d && std::floor(*d) == *d && std::fabs(*d) < 9e15)
        return static_cast<int64_t>(*d);
      break;
    case ValueType::kFloat:
      if (auto d = node.value_exact<double>()) return *d;
      if (auto i = node.value_exact<int64_t>()) return static_cast<double>(*i);
      break;
    case ValueType::kString:
    case ValueType::kEnum:
      if (auto s = node.value_exact<std::string>()) return *s;
      if (const auto* list = node.as_array();
          list && k.list && (list->empty() || list->is_homogeneous<std::string>())) {
        std::string joined;  // a list key (train.freeze): its strings joined with ", "
        for (const auto& item : *list) joined += (joined.empty() ? "" : ", ") + *item.value_exact<std::string>();
        return joined;
      }
      break;
  }
  std::ostringstream shown, got;
  node.visit([&](const auto& n) { shown << n; });
  got << node.type();
  throw ConfigError(fmt::format("config key {} = {} ({}): expected {}, got {}; allowed: {}", k.key, shown.str(), where,
                                type_name(k.type), got.str(), k.allowed()));
}

std::string section_suggestion(const std::string& section) {
  std::string best;
  size_t best_d = 3;
  for (const auto& k : config_schema()) {
    size_t d = edit_distance(section, k.section());
    if (d < best_d) best_d = d, best = k.section();
  }
  return best.empty() ? "" : fmt::format("; did you mean [{}]?", best);
}

bool known_section(const std::string& s) {
  for (const auto& k : config_schema())
    if (k.section() == s) return true;
  return false;
}

void apply_env(ResolvedConfig& rc, const std::map<std::string, std::string>& env) {
  // Every FRUGAL_<SECTION>_* variable must name a key, so a typo is not silently ignored.
  for (const auto& [name, text] : env) {
    if (name.rfind("FRUGAL_", 0) != 0) continue;
    const KeySpec* match = nullptr;
    bool in_section = false;
    for (const auto& k : config_schema()) {
      if (k.env_name() == name) match = &k;
      std::string prefix = "FRUGAL_" + k.section() + "_";
      std::transform(prefix.begin(), prefix.end(), prefix.begin(), ::toupper);
      if (name.rfind(prefix, 0) == 0) in_section = true;
    }
    if (!match) {
      if (in_section)
        throw ConfigError(
            fmt::format("environment variable {} names no config key\n  hint: `frugal config --list` prints "
                        "every key with its variable name",
                        name));
      continue;
    }
    std::string where = "env " + name;
    ConfigValue v = parse_text(*match, text, where);
    check_value(*match, v, where);
    match->set(rc.config, v);
    rc.origins[match->key] = {ValueOrigin::Kind::kEnv, name};
  }
}

void apply_file(ResolvedConfig& rc, const std::string& path) {
  toml::table root;
  try {
    root = toml::parse(read_small_file(path), path);
  } catch (const frugal::Error& e) {  // not a regular file, too large, unreadable: bad input
    throw ConfigError(fmt::format("config file {}: {}", path, e.what()));
  } catch (const toml::parse_error& e) {
    const auto& b = e.source().begin;
    throw ConfigError(fmt::format("cannot parse config file {}:{}:{}: {}", path, b.line, b.column, e.description()));
  }
  for (const auto& [section_key, section_node] : root) {
    std::string section(section_key.str());
    std::string where = fmt::format("{}:{}", path, section_node.source().begin.line);
    const toml::table* table = section_node.as_table();
    if (!table) {
      throw ConfigError(
          fmt::format("config file {}: '{}' must be a [section] table (keys look like [train] lr = 0.001){}", where,
                      section, known_section(section) ? "" : section_suggestion(section)));
    }
    if (!known_section(section))
      throw ConfigError(
          fmt::format("unknown config section [{}] ({}){}\n  hint: `frugal config --list` prints every key", section,
                      where, section_suggestion(section)));
    for (const auto& [name, node] : *table) {
      std::string key = section + "." + std::string(name.str());
      std::string at = fmt::format("{}:{}", path, node.source().begin.line);
      const KeySpec* k = find_key(key);
      if (!k) unknown_key(key, at);
      ConfigValue v = from_toml(*k, node, at);
      check_value(*k, v, at);
      k->set(rc.config, v);
      rc.origins[key] = {ValueOrigin::Kind::kFile, at};
    }
  }
}

void apply_override(ResolvedConfig& rc, const std::string& text) {
  auto eq = text.find('=');
  if (eq == std::string::npos || eq == 0)
    throw ConfigError(fmt::format("--set '{}': expected section.key=value, e.g. --set train.lr=1e-3", text));
  std::string key = text.substr(0, eq);
  const KeySpec* k = find_key(key);
  if (!k) unknown_key(key, "--set " + text);
  std::string where = "--set " + key;
  ConfigValue v = parse_text(*k, text.substr(eq + 1), where);
  check_value(*k, v, where);
  k->set(rc.config, v);
  rc.origins[key] = {ValueOrigin::Kind::kOverride, "--set"};
}

}  // namespace

ConfigValue parse_config_value(const KeySpec& k, const std::string& text, const std::string& where) {
  ConfigValue v = parse_text(k, text, where);
  check_value(k, v, where);
  return v;
}

ConfigValue parse_toml_value(const KeySpec& k, const std::string& literal, const std::string& where) {
  toml::table t;
  try {
    t = toml::parse("v = " + literal);
  } catch (const toml::parse_error& e) {
    throw ConfigError(fmt::format("config key {} = {} ({}): not a TOML value ({}); allowed: {}", k.key, literal, where,
                                  e.description(), k.allowed()));
  }
  const toml::node* node = t.get("v");
  ConfigValue v = from_toml(k, *node, where);
  check_value(k, v, where);
  return v;
}

std::string format_value(const ConfigValue& v) {
  return std::visit(
      [](const auto& x) -> std::string {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, bool>) {
          return x ? "true" : "false";
        } else if constexpr (std::is_same_v<T, int64_t>) {
          return std::to_string(x);
        } else if constexpr (std::is_same_v<T, double>) {
          if (!std::isfinite(x)) return std::isnan(x) ? "nan" : (x > 0 ? "inf" : "-inf");
          std::string s = fmt::format("{}", x);                       // shortest text that reads back exactly
          if (s.find_first_of(".e") == std::string::npos) s += ".0";  // TOML floats need one
          return s;
        } else {
          std::ostringstream os;
          os << toml::value<std::string>(x);
          return os.str();
        }
      },
      v);
}

std::string ValueOrigin::describe() const {
  switch (kind) {
    case Kind::kDefault:
      return "default";
    case Kind::kEnv:
      return "env " + where;
    case Kind::kFile:
      return "file " + where;
    case Kind::kOverride:
      return "--set";
    case Kind::kCode:
      return "code";
    case Kind::kTool:
      return where;
    case Kind::kRun:  // a checkpoint, or the run's config.toml where it had none (a start over)
      return (where.size() >= 11 && where.compare(where.size() - 11, 11, "config.toml") == 0
                  ? "the run's own "
                  : "the run's checkpoint ") +
             where;
  }
  return "";
}

std::map<std::string, std::string> process_environment() {
  std::map<std::string, std::string> env;
  for (char** e = environ; e && *e; ++e) {
    std::string kv(*e);
    auto eq = kv.find('=');
    if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return env;
}

int64_t accumulation_steps(const Config& c) {
  if (c.train.accum > 0) return c.train.accum;
  if (c.train.global_batch > 0) return c.train.global_batch / c.data.micro_batch;
  return 1;
}

void check_config_value(const KeySpec& k, const ConfigValue& v, const std::string& where) { check_value(k, v, where); }

void validate_config(const Config& c) {
  const int64_t mb = c.data.micro_batch, gb = c.train.global_batch;
  FRUGAL_CHECK(gb == 0 || gb % mb == 0, ConfigError,
               fmt::format("train.global_batch = {} is not a multiple of data.micro_batch = {}; accumulation needs "
                           "global_batch = micro_batch x accum (e.g. global_batch = {})",
                           gb, mb, (gb / mb + 1) * mb));
  FRUGAL_CHECK(gb == 0 || c.train.accum == 0 || gb == c.train.accum * mb, ConfigError,
               fmt::format("train.global_batch = {} disagrees with train.accum = {} x data.micro_batch = {}; set "
                           "one of them",
                           gb, c.train.accum, mb));
  if (c.profile.capture_steps > 0 && c.profile.every_steps > 0 && c.profile.every_steps < c.profile.capture_steps)
    throw ConfigError(
        fmt::format("profile.every_steps = {} is shorter than profile.capture_steps = {}: windows would "
                    "overlap; set every_steps >= capture_steps (or 0 to capture once)",
                    c.profile.every_steps, c.profile.capture_steps));
  if (!c.monitor.http.empty()) {
    const HttpAddress a = parse_http_address(c.monitor.http);
    if (!is_loopback_host(a.host) && !c.monitor.allow_remote)
      throw ConfigError(
          fmt::format("monitor.http = \"{}\" listens beyond this machine; anyone who reaches it sees the run. "
                      "Use 127.0.0.1 (and an SSH tunnel), or set monitor.allow_remote = true and a monitor.token",
                      c.monitor.http));
    if (!is_loopback_host(a.host) && c.monitor.token.empty())
      throw ConfigError(
          fmt::format("monitor.http = \"{}\" with monitor.allow_remote = true needs monitor.token (a shared "
                      "secret; set it with FRUGAL_MONITOR_TOKEN so it stays out of config files)",
                      c.monitor.http));
  }
  if (c.checkpoint.deadline_action == DeadlineAction::kDecay && c.train.schedule != LrSchedule::kWsd)
    throw ConfigError(
        "checkpoint.deadline_action = \"decay\" moves the end of a warmup-stable-decay schedule; with train.schedule "
        "= \"cosine\" every rate already used would change. Set train.schedule = \"wsd\", or "
        "checkpoint.deadline_action = \"requeue\"");
  validate_model_config(c.model);
}

ResolvedConfig resolve_config(const std::string& file, const std::vector<std::string>& overrides,
                              const std::map<std::string, std::string>& env) {
  ResolvedConfig rc;
  for (const auto& k : config_schema()) rc.origins[k.key] = {ValueOrigin::Kind::kDefault, ""};
  apply_env(rc, env);
  if (!file.empty()) apply_file(rc, file);
  for (const auto& o : overrides) apply_override(rc, o);
  validate_config(rc.config);
  return rc;
}

void apply_overrides(ResolvedConfig& rc, const std::vector<std::string>& overrides) {
  for (const auto& o : overrides) apply_override(rc, o);
  validate_config(rc.config);
}

void mark_written_by(ResolvedConfig& rc, const std::vector<std::string>& sets, const std::string& tool) {
  for (const auto& s : sets) {
    const auto it = rc.origins.find(s.substr(0, s.find('=')));
    if (it != rc.origins.end()) it->second = {ValueOrigin::Kind::kTool, tool};
  }
}

ResolvedConfig resolve_config(const Config& config) {
  ResolvedConfig rc;
  rc.config = config;
  const Config defaults;
  for (const auto& k : config_schema()) {
    const ConfigValue v = k.get(config);
    check_value(k, v, "code");
    const bool changed = v != k.get(defaults);
    rc.origins[k.key] = {changed ? ValueOrigin::Kind::kCode : ValueOrigin::Kind::kDefault, ""};
  }
  validate_config(rc.config);
  return rc;
}

std::string format_value_shown(const KeySpec& k, const Config& c) {
  ConfigValue v = k.get(c);
  if (k.secret && std::holds_alternative<std::string>(v) && !std::get<std::string>(v).empty()) return "'<redacted>'";
  return format_value(v);
}

std::string ResolvedConfig::to_toml() const {
  std::string out = "# frugal resolved configuration; each value is followed by where it came from\n";
  std::string section;
  for (const auto& k : config_schema()) {
    if (k.section() != section) {
      section = k.section();
      out += fmt::format("\n[{}]\n", section);
    }
    if (k.secret && !std::get<std::string>(k.get(config)).empty()) {
      out += fmt::format("# {} = (secret, not written)  # {}\n", k.name(), origins.at(k.key).describe());
      continue;
    }
    out += fmt::format("{} = {}  # {}\n", k.name(), format_value(k.get(config)), origins.at(k.key).describe());
  }
  return out;
}

std::string ResolvedConfig::summary() const {
  std::string out;
  size_t width = 0;
  for (const auto& k : config_schema())
    if (origins.at(k.key).kind != ValueOrigin::Kind::kDefault) width = std::max(width, k.key.size());
  for (const auto& k : config_schema()) {
    const auto& o = origins.at(k.key);
    if (o.kind == ValueOrigin::Kind::kDefault) continue;
    out += fmt::format("  {:<{}} = {}   ({})\n", k.key, width, format_value_shown(k, config), o.describe());
  }
  return out.empty() ? "  (all defaults)\n" : out;
}

}  // namespace frugal
#pragma GCC diagnostic pop
