// The building blocks of the configuration schema (src/core/config_schema.cpp): a key bound to
// its field, spelled once, with its type, range and help. Used by src/core/config_keys.cpp, where
// every key of every section is declared.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "frugal/core/config_loader.h"
#include "frugal/core/config_values.h"

namespace frugal::schema {

constexpr double kBig = 1e12;  // "no practical upper bound" for a count or a size

// Accessor for the field a key binds to.
template <class T>
using Field = T& (*)(Config&);

// A key and its field, spelled once: the key "section.name" is the field config.section.name, so
// the two cannot drift apart. FRUGAL_FIELD_AS is for a key whose name is a C++ keyword.
#define FRUGAL_FIELD(section, name) \
#section "." #name, [](Config & c) -> auto& { return c.section.name; }
#define FRUGAL_FIELD_AS(section, name, key) \
  key, [](Config & c) -> auto& { return c.section.name; }

// A key bound to a field of type T (int64_t, double, std::string or bool).
template <class T>
KeySpec field_key(std::string key, ValueType type, Field<T> f, std::string help) {
  KeySpec k;
  k.key = std::move(key);
  k.type = type;
  k.help = std::move(help);
  k.get = [f](const Config& c) { return ConfigValue(f(const_cast<Config&>(c))); };
  k.set = [f](Config& c, const ConfigValue& v) { f(c) = std::get<T>(v); };
  return k;
}

inline KeySpec int_key(std::string key, Field<int64_t> f, double min, double max, std::string help) {
  KeySpec k = field_key<int64_t>(std::move(key), ValueType::kInt, f, std::move(help));
  k.min = min;
  k.max = max;
  return k;
}

inline KeySpec float_key(std::string key, Field<double> f, double min, double max, std::string help) {
  KeySpec k = field_key<double>(std::move(key), ValueType::kFloat, f, std::move(help));
  k.min = min;
  k.max = max;
  return k;
}

inline KeySpec string_key(std::string key, Field<std::string> f, std::string help,
                          std::function<std::string(const ConfigValue&)> check = nullptr) {
  KeySpec k = field_key<std::string>(std::move(key), ValueType::kString, f, std::move(help));
  k.check = std::move(check);
  return k;
}

// A string key a config file may also give as a TOML list of strings (joined with ", "): names or
// globs separated by commas, `what` saying which in the error for a line break or tab.
inline KeySpec list_key(std::string key, Field<std::string> f, std::string help, std::string what) {
  KeySpec k = string_key(std::move(key), f, std::move(help), [what](const ConfigValue& v) -> std::string {
    const std::string& t = std::get<std::string>(v);
    return t.find_first_of("\n\r\t") != std::string::npos ? "must be " + what + " separated by commas" : "";
  });
  k.list = true;
  return k;
}

inline KeySpec bool_key(std::string key, Field<bool> f, std::string help) {
  return field_key<bool>(std::move(key), ValueType::kBool, f, std::move(help));
}

// An enum class field spelled as one of `names` in the config.
template <class E>
KeySpec enum_key(std::string key, Field<E> f, std::vector<std::pair<std::string, E>> names, std::string help) {
  KeySpec k;
  k.key = std::move(key);
  k.type = ValueType::kEnum;
  k.help = std::move(help);
  for (const auto& n : names) k.choices.push_back(n.first);
  k.get = [f, names](const Config& c) {
    for (const auto& n : names)
      if (n.second == f(const_cast<Config&>(c))) return ConfigValue(n.first);
    return ConfigValue(std::string("?"));
  };
  k.set = [f, names](Config& c, const ConfigValue& v) {
    for (const auto& n : names)
      if (n.first == std::get<std::string>(v)) f(c) = n.second;
  };
  return k;
}

// A field whose type has a spelling of its own (to_string / parse_*), written as a string in
// TOML and --set: `allowed` says what parses.
template <class T>
KeySpec spelled_key(std::string key, Field<T> f, std::optional<T> (*parse)(const std::string&), std::string allowed,
                    std::string help) {
  KeySpec k;
  k.key = std::move(key);
  k.type = ValueType::kString;
  k.help = std::move(help);
  k.get = [f](const Config& c) { return ConfigValue(to_string(f(const_cast<Config&>(c)))); };
  k.set = [f, parse](Config& c, const ConfigValue& v) { f(c) = *parse(std::get<std::string>(v)); };
  k.check = [parse, allowed](const ConfigValue& v) {
    return parse(std::get<std::string>(v)) ? std::string() : allowed;
  };
  return k;
}

// An enum class field spelled as its integer value (dist.zero = 1).
template <class E>
KeySpec int_enum_key(std::string key, Field<E> f, double min, double max, std::string help) {
  KeySpec k;
  k.key = std::move(key);
  k.type = ValueType::kInt;
  k.help = std::move(help);
  k.min = min;
  k.max = max;
  k.get = [f](const Config& c) { return ConfigValue(static_cast<int64_t>(f(const_cast<Config&>(c)))); };
  k.set = [f](Config& c, const ConfigValue& v) { f(c) = static_cast<E>(std::get<int64_t>(v)); };
  return k;
}

// A key that runs a command or contacts a host (KeySpec::reaches_out).
inline KeySpec reaches_out(KeySpec k) {
  k.reaches_out = true;
  return k;
}

// A section's keys, each declared with whether a resume may change it (KeySpec::OnResume):
//   k.fixed(int_key(...))  the trained state depends on it (model, data, batch, optimizer, schedule);
//   k.may(int_key(...))    a resume may change it (steps, cadences, checkpoints, budgets, monitors).
struct KeyList {
  std::vector<KeySpec>& s;
  void fixed(KeySpec k) {
    k.on_resume = KeySpec::OnResume::kFixed;
    s.push_back(std::move(k));
  }
  void may(KeySpec k) {
    k.on_resume = KeySpec::OnResume::kMayChange;
    s.push_back(std::move(k));
  }
};

inline const std::vector<std::pair<std::string, Metric>> kMetrics = {
    {"val_loss", Metric::kValLoss}, {"loss", Metric::kLoss}, {"grad_norm", Metric::kGradNorm}};
inline const std::vector<std::pair<std::string, MetricMode>> kMetricModes = {{"min", MetricMode::kMin},
                                                                             {"max", MetricMode::kMax}};

// Each section's keys, in the order docs/config.md lists them (src/core/config_keys.cpp).
void add_run_keys(std::vector<KeySpec>& s);
void add_model_keys(std::vector<KeySpec>& s);
void add_data_keys(std::vector<KeySpec>& s);
void add_train_keys(std::vector<KeySpec>& s);
void add_lora_keys(std::vector<KeySpec>& s);  // config_keys_lora.cpp
void add_precision_keys(std::vector<KeySpec>& s);
void add_memory_keys(std::vector<KeySpec>& s);
void add_checkpoint_keys(std::vector<KeySpec>& s);
void add_early_stop_keys(std::vector<KeySpec>& s);
void add_guard_keys(std::vector<KeySpec>& s);
void add_budget_keys(std::vector<KeySpec>& s);
void add_dist_keys(std::vector<KeySpec>& s);
void add_profile_keys(std::vector<KeySpec>& s);
void add_monitor_keys(std::vector<KeySpec>& s);
void add_track_keys(std::vector<KeySpec>& s);
void add_tune_keys(std::vector<KeySpec>& s);  // config_keys_tools.cpp
void add_plan_keys(std::vector<KeySpec>& s);  // config_keys_tools.cpp

}  // namespace frugal::schema
