// The search file of `frugal search`; see search_space.h.
// toml++ trips a GCC 12 -Warray-bounds false positive in its inline table storage.
#pragma GCC diagnostic push  // popped at the end: the file may share a unity translation unit
#pragma GCC diagnostic ignored "-Warray-bounds"
#define TOML_HEADER_ONLY 1
#define TOML_EXCEPTIONS 1
#include <toml++/toml.h>

#include "frugal/search/search_space.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <random>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "frugal/ckpt/checkpoint.h"  // xxh3_hex
#include "frugal/core/atomic_file.h"
#include "frugal/core/errors.h"
#include "frugal/data/rng.h"
#include "frugal/search/halving.h"
#include "frugal/train/run_config.h"

namespace frugal {
namespace fs = std::filesystem;

const std::vector<std::pair<std::string, std::string>>& search_keys() {
  static const std::vector<std::pair<std::string, std::string>> keys = {
      {"base", "the config file every trial starts from, relative to the search file (default: the built-in defaults)"},
      {"out", "the search folder (default: runs/<file name>; --out overrides it)"},
      {"seed", "fixes which trials are drawn and the decisions (default 1)"},
      {"max_trials", "the number of trials (default 8); invalid and repeated draws do not count"},
      {"rungs", "the number of rungs (default 3); rung k of R ends at step round(train.steps / eta^(R-1-k))"},
      {"eta", "the best 1/eta of each rung goes on (default 2)"},
      {"rung_steps", "the rung steps by hand: increasing, the last equal to train.steps"},
      {"metric",
       "any number in summary.json (default \"val_loss\"); usd_to_target, tokens_to_target or wall_s_to_target "
       "rank by what reaching train.target_loss cost (a trial that has not reached it ranks last)"},
      {"mode", "\"min\" or \"max\"; needed only when the metric's name neither contains loss nor ends in _to_target"},
      {"parallel", "trials trained at once (default 1; --parallel)"},
      {"max_usd", "stop once the trials have spent this many dollars (0: no limit; needs a price in [budget])"},
      {"max_hours", "stop once the search has run this many hours over all its sessions (0: no limit)"}};
  return keys;
}

namespace {

constexpr uint64_t kSearchStream = 0x5ea4c4;  // the sampler's stream id beside data's (data/rng.h)

// [search]'s key names (the error for an unknown one lists them).
std::vector<std::string> search_key_names() {
  std::vector<std::string> names;
  for (const auto& [key, help] : search_keys()) names.push_back(key);
  return names;
}

// Keys a search must not vary: they name the trials' places or are the search's own length.
const std::map<std::string, std::string>& reserved_keys() {
  static const std::map<std::string, std::string> keys = {
      {"run.name", "each trial is named after its id (t000, t001, ...)"},
      {"run.out_dir", "the trials live under the search folder (search.out)/trials"},
      {"train.steps",
       "every trial's full length is train.steps of the base configuration; the rungs "
       "stop and resume it (search.rungs, search.eta, search.rung_steps)"},
      {"checkpoint.enabled", "trials resume from their checkpoints at each rung, so it is always on"}};
  return keys;
}

std::string at(const std::string& file, const toml::node& n) {
  return fmt::format("{}:{}", file, n.source().begin.line);
}

// The closest config key, as "; did you mean 'x'?" ("" when none is close).
std::string closest_key(const std::string& key) {
  std::string best;
  size_t best_d = 4;
  for (const auto& k : config_schema()) {
    const size_t d = std::min(edit_distance(key, k.key), edit_distance(key, k.name()) + 1);
    if (d < best_d) best_d = d, best = k.key;
  }
  return best.empty() ? "" : fmt::format("; did you mean '{}'?", best);
}

const KeySpec& known_key(const std::string& key, const std::string& where) {
  const KeySpec* k = find_key(key);
  if (!k)
    throw ConfigError(fmt::format("unknown config key '{}' ({}){}\n  hint: `frugal config --list` prints every key",
                                  key, where, closest_key(key)));
  return *k;
}

// A TOML scalar as the text --set reads.
std::string scalar_text(const toml::node& n, const std::string& key, const std::string& where) {
  if (auto i = n.value_exact<int64_t>()) return std::to_string(*i);
  if (auto d = n.value_exact<double>()) return format_value(ConfigValue(*d));
  if (auto b = n.value_exact<bool>()) return *b ? "true" : "false";
  if (auto s = n.value_exact<std::string>()) return *s;
  throw ConfigError(fmt::format("{} ({}): expected a number, a string or a boolean", key, where));
}

double toml_number(const toml::node& n, const std::string& what, const std::string& where) {
  if (auto d = n.value<double>()) return *d;
  throw ConfigError(fmt::format("{} ({}): expected a number", what, where));
}

SearchParam choices_param(const KeySpec& k, const toml::array& list, const std::string& where) {
  SearchParam p;
  p.key = k.key;
  p.where = where;
  for (const auto& v : list) {
    const std::string text = scalar_text(v, k.key, where);
    parse_config_value(k, text, "[space] " + where);  // throws naming the key and what it allows
    if (std::find(p.choices.begin(), p.choices.end(), text) == p.choices.end()) p.choices.push_back(text);
  }
  if (p.choices.empty())
    throw ConfigError(
        fmt::format("[space] {} ({}): the list of choices is empty; give at least one value "
                    "(allowed: {})",
                    k.key, where, k.allowed()));
  return p;
}

SearchParam range_param(const KeySpec& k, const toml::node& bounds, bool log, const std::string& where) {
  const char* name = log ? "log_range" : "range";
  const auto* arr = bounds.as_array();
  if (k.type != ValueType::kInt && k.type != ValueType::kFloat)
    throw ConfigError(
        fmt::format("[space] {} ({}): a {} needs a numeric key; {} takes {}: list its choices "
                    "instead, e.g. \"{}\" = [...]",
                    k.key, where, name, k.key, k.allowed(), k.key));
  if (!arr || arr->size() != 2)
    throw ConfigError(fmt::format("[space] {} ({}): {} must be [low, high]", k.key, where, name));
  SearchParam p;
  p.key = k.key;
  p.where = where;
  p.kind = log ? SearchParam::Kind::kLogRange : SearchParam::Kind::kRange;
  p.integer = k.type == ValueType::kInt;
  p.low = toml_number(*arr->get(0), k.key, where);
  p.high = toml_number(*arr->get(1), k.key, where);
  if (p.integer && (p.low != std::floor(p.low) || p.high != std::floor(p.high)))
    throw ConfigError(fmt::format("[space] {} ({}): {} is an integer key; its {} bounds must be integers", k.key, where,
                                  k.key, name));
  if (!(p.low < p.high))
    throw ConfigError(
        fmt::format("[space] {} ({}): the {} [{}, {}] is empty; give low < high (one value belongs "
                    "in the base configuration)",
                    k.key, where, name, p.low, p.high));
  if (log && !(p.low > 0))
    throw ConfigError(fmt::format("[space] {} ({}): a log_range needs low > 0, got {}", k.key, where, p.low));
  for (double b : {p.low, p.high}) {
    const std::string text = p.integer ? std::to_string(static_cast<int64_t>(b)) : format_value(ConfigValue(b));
    parse_config_value(k, text, "[space] " + where);
  }
  return p;
}

SearchParam read_param(const std::string& key, const toml::node& node, const std::string& where) {
  if (auto it = reserved_keys().find(key); it != reserved_keys().end())
    throw ConfigError(fmt::format("[space] {} ({}): cannot be searched over: {}", key, where, it->second));
  const KeySpec& k = known_key(key, "[space] " + where);
  if (const auto* list = node.as_array()) return choices_param(k, *list, where);
  const auto* t = node.as_table();
  if (t && t->size() == 1) {
    if (const auto* c = (*t)["choices"].as_array()) return choices_param(k, *c, where);
    if (const auto* r = t->get("range")) return range_param(k, *r, false, where);
    if (const auto* r = t->get("log_range")) return range_param(k, *r, true, where);
  }
  throw ConfigError(
      fmt::format("[space] {} ({}): expected a list of choices [a, b, ...] or one of "
                  "{{ choices = [...] }}, {{ range = [low, high] }}, {{ log_range = [low, high] }}",
                  key, where));
}

// [space], with quoted keys ("train.lr" = ...) or dotted ones (train.lr = ..., i.e. nested tables).
void read_space(const toml::table& t, const std::string& prefix, const std::string& file,
                std::vector<SearchParam>& out) {
  for (const auto& [name, node] : t) {
    const std::string key = prefix + std::string(name.str());
    const auto* sub = node.as_table();
    const bool nested = sub && !sub->contains("choices") && !sub->contains("range") && !sub->contains("log_range");
    if (nested && key.find('.') == std::string::npos)
      read_space(*sub, key + ".", file, out);
    else
      out.push_back(read_param(key, node, at(file, node)));
  }
}

// The file's ordinary config sections as KEY=VALUE, each checked on its own with the file and line.
void read_fixed(const toml::table& root, const std::string& file, std::vector<std::string>& out) {
  for (const auto& [section, node] : root) {
    const std::string s(section.str());
    if (s == "search" || s == "space") continue;
    const auto* t = node.as_table();
    if (!t) throw ConfigError(fmt::format("{}: '{}' must be a [section] table", at(file, node), s));
    for (const auto& [name, value] : *t) {
      const std::string key = s + "." + std::string(name.str());
      const std::string where = at(file, value);
      if (key == "run.name" || key == "run.out_dir" || key == "checkpoint.enabled")
        throw ConfigError(fmt::format("{} ({}): {}", key, where, reserved_keys().at(key)));
      const KeySpec& k = known_key(key, where);
      const std::string text = scalar_text(value, key, where);
      parse_config_value(k, text, where);
      out.push_back(key + "=" + text);
    }
  }
}

int64_t int_in(const toml::node& n, const std::string& key, int64_t lo, int64_t hi, const std::string& where) {
  const auto v = n.value_exact<int64_t>();
  if (!v || *v < lo || *v > hi)
    throw ConfigError(fmt::format("search.{} ({}): expected an integer in [{}, {}]", key, where, lo, hi));
  return *v;
}

double nonnegative(const toml::node& n, const std::string& key, const std::string& where) {
  const double v = toml_number(n, "search." + key, where);
  if (!(v >= 0) || !std::isfinite(v))
    throw ConfigError(fmt::format("search.{} ({}): expected a number >= 0 (0 = no limit)", key, where));
  return v;
}

std::string text_of(const toml::node& n, const std::string& key, const std::string& where) {
  if (auto s = n.value_exact<std::string>()) return *s;
  throw ConfigError(fmt::format("search.{} ({}): expected a string", key, where));
}

}  // namespace

namespace {

struct SearchKeys {
  int64_t rungs = 3;
  bool mode_given = false;
  bool rung_steps_given = false;
};

// [search]: every key optional; unknown ones are named with the list of known ones.
SearchKeys read_search(const toml::table* t, const std::string& file, SearchSpec& s) {
  SearchKeys got;
  if (!t) return got;
  for (const auto& [name, node] : *t) {
    const std::string key(name.str());
    const std::string where = at(file, node);
    if (key == "base")
      s.base = text_of(node, key, where);
    else if (key == "out")
      s.out = text_of(node, key, where);
    else if (key == "seed")
      s.seed = static_cast<uint64_t>(int_in(node, key, 0, INT64_MAX, where));
    else if (key == "max_trials")
      s.max_trials = int_in(node, key, 1, 100000, where);
    else if (key == "rungs")
      got.rungs = int_in(node, key, 1, 30, where);
    else if (key == "parallel")
      s.parallel = int_in(node, key, 1, 1024, where);
    else if (key == "max_usd")
      s.max_usd = nonnegative(node, key, where);
    else if (key == "max_hours")
      s.max_hours = nonnegative(node, key, where);
    else if (key == "metric")
      s.metric = text_of(node, key, where);
    else if (key == "eta") {
      s.eta = toml_number(node, "search.eta", where);
      if (!(s.eta > 1) || s.eta > 1000)
        throw ConfigError(
            fmt::format("search.eta ({}): expected a number in (1, 1000]: the fraction 1/eta of "
                        "each rung goes on",
                        where));
    } else if (key == "mode") {
      const std::string m = text_of(node, key, where);
      if (m != "min" && m != "max")
        throw ConfigError(fmt::format("search.mode = \"{}\" ({}): expected \"min\" or \"max\"", m, where));
      s.mode = m == "min" ? MetricMode::kMin : MetricMode::kMax;
      got.mode_given = true;
    } else if (key == "rung_steps") {
      const auto* arr = node.as_array();
      if (!arr || arr->empty())
        throw ConfigError(fmt::format("search.rung_steps ({}): expected a list of step counts", where));
      for (const auto& v : *arr) s.rung_steps.push_back(int_in(v, key, 1, INT64_MAX, where));
      got.rung_steps_given = true;
    } else {
      throw ConfigError(fmt::format("unknown key search.{} ({}); [search] knows {}", key, where,
                                    fmt::join(search_key_names(), ", ")));
    }
  }
  return got;
}

// Rung steps from [search] against the base's train.steps.
void resolve_rungs(SearchSpec& s, const SearchKeys& got) {
  const int64_t steps = s.base_config.train.steps;
  if (!got.rung_steps_given) {
    s.rung_steps = rung_steps_for(steps, got.rungs, s.eta);
    return;
  }
  for (size_t k = 1; k < s.rung_steps.size(); ++k)
    if (s.rung_steps[k] <= s.rung_steps[k - 1])
      throw ConfigError(
          fmt::format("search.rung_steps = [{}] in {}: must increase", fmt::join(s.rung_steps, ", "), s.file));
  if (s.rung_steps.back() != steps)
    throw ConfigError(
        fmt::format("search.rung_steps = [{}] in {}: the last rung must be the full length, "
                    "train.steps = {}",
                    fmt::join(s.rung_steps, ", "), s.file, steps));
}

}  // namespace

SearchSpec load_search_spec(const std::string& path, const std::vector<std::string>& sets,
                            const std::map<std::string, std::string>& env) {
  toml::table root;
  try {
    root = toml::parse(read_small_file(path), path);
  } catch (const frugal::Error& e) {  // not a regular file, too large, unreadable: bad input
    throw ConfigError(fmt::format("search file {}: {}", path, e.what()));
  } catch (const toml::parse_error& e) {
    const auto& b = e.source().begin;
    throw ConfigError(fmt::format("cannot parse search file {}:{}:{}: {}", path, b.line, b.column, e.description()));
  }
  SearchSpec s;
  s.file = path;
  s.out = (fs::path("runs") / fs::path(path).stem()).string();
  const SearchKeys got = read_search(root["search"].as_table(), path, s);
  if (!s.base.empty()) {
    fs::path b(s.base);
    if (b.is_relative()) b = fs::path(path).parent_path() / b;
    s.base = b.lexically_normal().string();
    if (!fs::is_regular_file(s.base))
      throw ConfigError(fmt::format("search.base = \"{}\" in {}: no such file ({})", b.string(), path, s.base));
  }
  // A loss, and what reaching train.target_loss took (tokens, time, dollars, energy), are better
  // smaller; any other figure needs its direction said.
  if (!got.mode_given && s.metric.find("loss") == std::string::npos && !s.metric_is_to_target())
    throw ConfigError(
        fmt::format("search.metric = \"{}\" in {}: say whether smaller or larger is better with "
                    "search.mode = \"min\" or \"max\"",
                    s.metric, path));
  read_fixed(root, path, s.fixed);
  for (const auto& o : sets) {
    const std::string key = o.substr(0, o.find('='));
    if (reserved_keys().count(key) && key != "train.steps")
      throw ConfigError(fmt::format("--set {}: {}", o, reserved_keys().at(key)));
    s.fixed.push_back(o);
  }
  const auto* space = root["space"].as_table();
  if (space) read_space(*space, "", path, s.params);
  if (s.params.empty())
    throw ConfigError(
        fmt::format("{} has no [space] entries: list at least one config key to search over, e.g. "
                    "[space] \"train.lr\" = {{ log_range = [1e-4, 1e-2] }}",
                    path));
  std::sort(s.params.begin(), s.params.end(), [](const auto& a, const auto& b) { return a.key < b.key; });
  // A --set of a searched key would be overridden by every trial's value: the two contradict.
  for (const auto& o : sets) {
    const std::string key = o.substr(0, o.find('='));
    for (const auto& p : s.params)
      if (p.key == key)
        throw ConfigError(
            fmt::format("--set {}: it is an axis of the search space in {}; drop it from --set or "
                        "from [space]",
                        key, p.where));
  }
  const ResolvedConfig base = resolve_run_config(s.base, s.fixed, env);  // the base must hold on its own
  s.base_config = base.config;
  s.threads_given = base.origins.at("run.threads").kind != ValueOrigin::Kind::kDefault;
  resolve_rungs(s, got);
  return s;
}

nlohmann::json SearchSpec::identity() const {
  nlohmann::json list = nlohmann::json::array();
  for (const auto& p : params) {
    nlohmann::json j = {{"key", p.key}};
    if (p.kind == SearchParam::Kind::kChoices)
      j["choices"] = p.choices;
    else
      j[p.kind == SearchParam::Kind::kRange ? "range" : "log_range"] = {p.low, p.high};
    list.push_back(j);
  }
  return {{"params", list},
          {"seed", seed},
          {"max_trials", max_trials},
          {"eta", eta},
          {"rung_steps", rung_steps},
          {"metric", metric},
          {"mode", mode == MetricMode::kMin ? "min" : "max"},
          {"base", base},
          {"base_xxh3", base.empty() ? std::string() : xxh3_hex(read_file(base))},
          {"fixed", fixed}};
}

namespace {
// 4 significant digits, kept within [low, high].
double round4(double x, double low, double high) {
  const double r = std::stod(fmt::format("{:.4g}", x));
  return std::clamp(r, low, high);
}
}  // namespace

std::vector<std::pair<std::string, std::string>> sample_point(const SearchSpec& spec, int64_t draw) {
  std::mt19937_64 rng(derive_seed(spec.seed, static_cast<uint64_t>(draw), kSearchStream));
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& p : spec.params) {
    const double u = static_cast<double>(rng() >> 11) * 0x1.0p-53;  // uniform in [0, 1)
    std::string v;
    if (p.kind == SearchParam::Kind::kChoices) {
      const size_t n = p.choices.size();
      v = p.choices[std::min(n - 1, static_cast<size_t>(u * static_cast<double>(n)))];
    } else if (p.kind == SearchParam::Kind::kRange) {
      if (p.integer)
        v = std::to_string(
            std::min(static_cast<int64_t>(p.high), static_cast<int64_t>(p.low + std::floor(u * (p.high - p.low + 1)))));
      else
        v = format_value(ConfigValue(round4(p.low + u * (p.high - p.low), p.low, p.high)));
    } else {
      const double x = std::exp(std::log(p.low) + u * (std::log(p.high) - std::log(p.low)));
      if (p.integer)
        v = std::to_string(std::clamp(static_cast<int64_t>(std::llround(x)), static_cast<int64_t>(p.low),
                                      static_cast<int64_t>(p.high)));
      else
        v = format_value(ConfigValue(round4(x, p.low, p.high)));
    }
    out.emplace_back(p.key, v);
  }
  return out;
}

std::string trial_problem(const SearchSpec& spec, const std::vector<std::pair<std::string, std::string>>& values,
                          const std::map<std::string, std::string>& env, Config* resolved) {
  std::vector<std::string> sets = spec.fixed;
  for (const auto& [k, v] : values) sets.push_back(k + "=" + v);
  Config c;
  try {
    c = resolve_run_config(spec.base, sets, env).config;
  } catch (const ConfigError& e) {
    return e.what();
  }
  if (resolved) *resolved = c;
  // With early stopping, an evaluation the uninterrupted run would not make (at a rung that is not an
  // evaluation step) would count toward its patience: the rungs must be evaluation steps.
  const int64_t every = c.train.eval_every;
  if (c.early_stop.enabled && every > 0)
    for (size_t k = 0; k + 1 < spec.rung_steps.size(); ++k)
      if (spec.rung_steps[k] % every != 0)
        return fmt::format(
            "early_stop.enabled with train.eval_every = {}: rung {} at step {} is not an evaluation "
            "step; choose search.rung_steps that train.eval_every divides",
            every, k, spec.rung_steps[k]);
  return "";
}

}  // namespace frugal
#pragma GCC diagnostic pop
