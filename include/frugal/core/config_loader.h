// Resolving a Config: built-in defaults < environment (FRUGAL_<SECTION>_<KEY>) < TOML file <
// --set section.key=value. Every key is declared once in the schema (config_keys.cpp) with its
// type, allowed values and help; the loader validates against it and remembers where each value
// came from, so the resolved file says "# file demo.toml:12" or "# env FRUGAL_TRAIN_LR".
//
// Errors are ConfigError with the key, the value, what is allowed and the file and line.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "frugal/core/config.h"

namespace frugal {

using ConfigValue = std::variant<bool, int64_t, double, std::string>;

enum class ValueType { kBool, kInt, kFloat, kString, kEnum };

// One configuration key: the single source of truth for docs, env names, parsing and checks.
struct KeySpec {
  std::string key;  // "train.lr"
  ValueType type = ValueType::kString;
  std::string help;           // one line: meaning, unit, trade-off
  std::optional<double> min;  // numbers: inclusive bounds
  std::optional<double> max;
  std::vector<std::string> choices;  // enums: the allowed spellings
  std::function<ConfigValue(const Config&)> get;
  std::function<void(Config&, const ConfigValue&)> set;
  // Extra check beyond type/range/choices (e.g. the prefix of data.source). Returns an error
  // text ("must be ...") or "" when the value is fine.
  std::function<std::string(const ConfigValue&)> check;
  // A secret (monitor.token): never written to the resolved config.toml, checkpoints or logs.
  bool secret = false;
  // Whether a resume (--resume) may change it: kFixed for what the trained state depends on (the
  // model, the data and its order, the batch, the optimizer and its schedule: changed, the run
  // would not be the one its checkpoint continues), kMayChange for the rest (steps, cadences,
  // checkpoints, budgets, monitors, devices). Declared with each key (config_keys.cpp); kUnset
  // only for a key declared without a rule, which a test catches.
  enum class OnResume { kUnset, kFixed, kMayChange };
  OnResume on_resume = OnResume::kUnset;
  // A command run or a host contacted (budget.alert_command, track.mlflow_uri,
  // checkpoint.notice_url, monitor.http): a resume takes it from a checkpoint only when the
  // checkpoint is the run's own (under its run directory), so resuming a copied checkpoint never
  // runs its author's command or contacts their servers.
  bool reaches_out = false;
  // A string key that a config file may also give as a TOML list of strings: they are joined
  // with ", " (train.freeze).
  bool list = false;

  std::string section() const { return key.substr(0, key.find('.')); }
  std::string name() const { return key.substr(key.find('.') + 1); }
  std::string env_name() const;  // FRUGAL_TRAIN_LR
  std::string allowed() const;   // "a number in [0, 10]", "one of fp32, bf16"
};

// All keys, in documentation order.
const std::vector<KeySpec>& config_schema();
const KeySpec* find_key(const std::string& key);

// Where a resolved value came from.
struct ValueOrigin {
  // kRun: a resume took the run's own value from its checkpoint (train/run_config.h).
  // kTool: a value a command chose and wrote (`frugal tune`'s setting, `frugal search`'s trial).
  enum class Kind { kDefault, kEnv, kFile, kOverride, kCode, kRun, kTool } kind = Kind::kDefault;
  std::string where;  // "FRUGAL_TRAIN_LR", "examples/demo.toml:12", "--set", a checkpoint directory, the tool
  std::string describe() const;
};

struct ResolvedConfig {
  Config config;
  std::map<std::string, ValueOrigin> origins;  // by key

  // The resolved config as TOML, each value followed by a comment naming its origin. Loading it
  // back gives the same Config.
  std::string to_toml() const;
  // A short human table for the start of a run: the values that are not defaults, each with its
  // origin ("  (all defaults)" when none); the whole resolved config is to_toml()'s.
  std::string summary() const;
};

// The process environment as a map (tests pass their own).
std::map<std::string, std::string> process_environment();

// Resolves the configuration. `file` may be empty (no file). Throws ConfigError.
ResolvedConfig resolve_config(const std::string& file, const std::vector<std::string>& overrides,
                              const std::map<std::string, std::string>& env);

// A Config a program filled in directly (every field of config.h is a lever): each value is
// checked against the schema as if it came from a file, then the cross-key checks run. Values
// that differ from the built-in defaults get the origin "code". Throws ConfigError naming the key.
//   frugal::Config c;  c.precision.mode = frugal::PrecisionMode::kBf16;  c.train.steps = 200;
//   frugal::Trainer t(frugal::resolve_config(c), task);
ResolvedConfig resolve_config(const Config& config);
// Applies "section.key=value" overrides to an already resolved config as --set would (origin
// "--set"), then the cross-key checks. Throws ConfigError naming the override.
void apply_overrides(ResolvedConfig& rc, const std::vector<std::string>& overrides);
// The keys of `sets` ("section.key=value", as applied) take the origin `tool` (Kind::kTool, e.g.
// "frugal tune"): what to_toml() says of the values a command chose, rather than "--set".
void mark_written_by(ResolvedConfig& rc, const std::vector<std::string>& sets, const std::string& tool);
// One value for key k as `--set` reads it (type, range, choices, the key's own check), without the
// cross-key checks; `where` names its origin in the error. Throws ConfigError.
ConfigValue parse_config_value(const KeySpec& k, const std::string& text, const std::string& where);
// Range, choices and the key's own check for one value of key k, as the loader applies them; the
// error names `where` (a file and field that value came from). Throws ConfigError.
void check_config_value(const KeySpec& k, const ConfigValue& v, const std::string& where);
// One value for key k written as a TOML literal, as format_value writes it (a checkpoint's
// config_values): type, range, choices and the key's own check. Throws ConfigError naming `where`.
ConfigValue parse_toml_value(const KeySpec& k, const std::string& literal, const std::string& where);
// Cross-key checks (heads divide embd, ...). Called by resolve_config; exposed for tests.
void validate_config(const Config& c);
// The [model] part of validate_config: the family's own keys only on its family, heads dividing
// embd (or model.head_dim set), kv_heads dividing heads, an even head width for the rotation.
// Also run on what a Hugging Face config.json sets (model/hf_checkpoint.h).
void validate_model_config(const ModelConfig& m);

// docs/config.md, generated from the schema (`frugal config --markdown`).
std::string config_reference_markdown();

// Levenshtein distance (insertions, deletions, substitutions), for "did you mean" suggestions of
// config keys and of command-line words.
size_t edit_distance(const std::string& a, const std::string& b);

// Formats a value as TOML would write it.
std::string format_value(const ConfigValue& v);
// The same, but a secret key's non-empty value shows as '<redacted>'.
std::string format_value_shown(const KeySpec& k, const Config& c);

}  // namespace frugal
