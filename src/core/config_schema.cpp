// Every configuration key, declared once. Docs (docs/config.md, `frugal config --list`), env
// variable names, parsing and range checks all come from this table, so they cannot drift.
#include <fmt/format.h>

#include <cctype>

#include "frugal/core/config_loader.h"

namespace frugal {
namespace {

// Accessor for the field a key binds to.
template <class T>
using Field = T& (*)(Config&);

KeySpec int_key(std::string key, Field<int64_t> f, double min, double max, std::string help) {
  KeySpec k;
  k.key = std::move(key);
  k.type = ValueType::kInt;
  k.help = std::move(help);
  k.min = min;
  k.max = max;
  k.get = [f](const Config& c) { return ConfigValue(f(const_cast<Config&>(c))); };
  k.set = [f](Config& c, const ConfigValue& v) { f(c) = std::get<int64_t>(v); };
  return k;
}

KeySpec float_key(std::string key, Field<double> f, double min, double max, std::string help) {
  KeySpec k;
  k.key = std::move(key);
  k.type = ValueType::kFloat;
  k.help = std::move(help);
  k.min = min;
  k.max = max;
  k.get = [f](const Config& c) { return ConfigValue(f(const_cast<Config&>(c))); };
  k.set = [f](Config& c, const ConfigValue& v) { f(c) = std::get<double>(v); };
  return k;
}

KeySpec string_key(std::string key, Field<std::string> f, std::string help,
                   std::function<std::string(const ConfigValue&)> check = nullptr) {
  KeySpec k;
  k.key = std::move(key);
  k.type = ValueType::kString;
  k.help = std::move(help);
  k.get = [f](const Config& c) { return ConfigValue(f(const_cast<Config&>(c))); };
  k.set = [f](Config& c, const ConfigValue& v) { f(c) = std::get<std::string>(v); };
  k.check = std::move(check);
  return k;
}

std::string check_run_name(const ConfigValue& v) {
  const auto& s = std::get<std::string>(v);
  if (s.empty()) return "must not be empty";
  for (char ch : s) {
    if (!(std::isalnum(static_cast<unsigned char>(ch)) || ch == '-' || ch == '_' || ch == '.'))
      return "may contain only letters, digits, '-', '_' and '.' (it names a folder)";
  }
  if (s == "." || s == "..") return "must not be '.' or '..'";
  return "";
}

std::string check_source(const ConfigValue& v) {
  const auto& s = std::get<std::string>(v);
  if (s == "builtin:arith") return "";
  if (s.rfind("text:", 0) == 0 && s.size() > 5) return "";
  if (s.rfind("shards:", 0) == 0 && s.size() > 7) return "";
  return "must be \"builtin:arith\", \"text:PATH\" or \"shards:DIR\"";
}

std::string check_device(const ConfigValue& v) {
  const auto& s = std::get<std::string>(v);
  if (s == "cpu" || s == "cuda" || s.rfind("cuda:", 0) == 0) return "";
  return "must be \"cpu\", \"cuda\" or \"cuda:N\"";
}

std::vector<KeySpec> build_schema() {
  constexpr double kBig = 1e12;
  std::vector<KeySpec> s;
  // [run]
  s.push_back(string_key("run.name", [](Config& c) -> std::string& { return c.run.name; },
                         "run name; the run writes to <out_dir>/<name>/", check_run_name));
  s.push_back(string_key("run.out_dir", [](Config& c) -> std::string& { return c.run.out_dir; },
                         "parent folder of run directories"));
  s.push_back(int_key("run.seed", [](Config& c) -> int64_t& { return c.run.seed; }, 0, 9.0e15,
                      "seed for initialisation, data order and dropout"));
  s.push_back(int_key("run.threads", [](Config& c) -> int64_t& { return c.run.threads; }, 0, 1024,
                      "intra-op and BLAS threads; 0 = auto (physical cores)"));
  s.push_back(string_key("run.device", [](Config& c) -> std::string& { return c.run.device; },
                         "\"cpu\", \"cuda\" or \"cuda:N\"", check_device));
  // [model]
  s.push_back(int_key("model.layers", [](Config& c) -> int64_t& { return c.model.layers; }, 1,
                      1024, "transformer blocks"));
  s.push_back(int_key("model.heads", [](Config& c) -> int64_t& { return c.model.heads; }, 1, 1024,
                      "attention heads; must divide model.embd"));
  s.push_back(int_key("model.embd", [](Config& c) -> int64_t& { return c.model.embd; }, 8, 65536,
                      "residual width"));
  s.push_back(int_key("model.block", [](Config& c) -> int64_t& { return c.model.block; }, 2,
                      1 << 20, "context length in tokens"));
  s.push_back(int_key("model.vocab", [](Config& c) -> int64_t& { return c.model.vocab; }, 2,
                      1 << 24, "vocabulary size (256 for byte-level data)"));
  s.push_back(float_key("model.dropout", [](Config& c) -> double& { return c.model.dropout; }, 0,
                        0.9, "dropout probability; 0 = off"));
  // [data]
  s.push_back(string_key("data.source", [](Config& c) -> std::string& { return c.data.source; },
                         "\"builtin:arith\", \"text:PATH\" or \"shards:DIR\" (docs/data.md)",
                         check_source));
  s.push_back(int_key("data.micro_batch", [](Config& c) -> int64_t& { return c.data.micro_batch; },
                      1, 1 << 20, "sequences per forward/backward pass"));
  s.push_back(float_key("data.val_fraction",
                        [](Config& c) -> double& { return c.data.val_fraction; }, 0.001, 0.5,
                        "text: fraction of the file held out (its end) for validation"));
  s.push_back(int_key("data.arith_digits",
                      [](Config& c) -> int64_t& { return c.data.arith_digits; }, 1, 9,
                      "arith: operands have 1..N digits"));
  s.push_back(int_key("data.arith_lines", [](Config& c) -> int64_t& { return c.data.arith_lines; },
                      10, 1e8, "arith: training problems generated"));
  s.push_back(int_key("data.workers", [](Config& c) -> int64_t& { return c.data.workers; }, 0, 64,
                      "shards: loader threads; 0 = build batches inline on the trainer thread"));
  s.push_back(int_key("data.prefetch", [](Config& c) -> int64_t& { return c.data.prefetch; }, 1,
                      1024, "shards: batches built ahead of the trainer at most"));
  // [train]
  s.push_back(int_key("train.steps", [](Config& c) -> int64_t& { return c.train.steps; }, 1, kBig,
                      "optimizer steps"));
  s.push_back(float_key("train.lr", [](Config& c) -> double& { return c.train.lr; }, 0, 10,
                        "peak learning rate"));
  s.push_back(int_key("train.warmup_steps",
                      [](Config& c) -> int64_t& { return c.train.warmup_steps; }, 0, kBig,
                      "linear warm-up steps before the cosine decay"));
  s.push_back(float_key("train.min_lr_ratio",
                        [](Config& c) -> double& { return c.train.min_lr_ratio; }, 0, 1,
                        "final learning rate as a fraction of train.lr"));
  s.push_back(float_key("train.weight_decay",
                        [](Config& c) -> double& { return c.train.weight_decay; }, 0, 10,
                        "AdamW decoupled weight decay on weight matrices"));
  s.push_back(float_key("train.beta1", [](Config& c) -> double& { return c.train.beta1; }, 0,
                        0.999999, "AdamW first-moment decay"));
  s.push_back(float_key("train.beta2", [](Config& c) -> double& { return c.train.beta2; }, 0,
                        0.999999, "AdamW second-moment decay"));
  s.push_back(float_key("train.grad_clip", [](Config& c) -> double& { return c.train.grad_clip; },
                        0, 1e6, "global gradient-norm clip; 0 = off"));
  s.push_back(int_key("train.eval_every", [](Config& c) -> int64_t& { return c.train.eval_every; },
                      0, kBig, "evaluate every N steps (and at the end); 0 = only at the end"));
  s.push_back(int_key("train.eval_batches",
                      [](Config& c) -> int64_t& { return c.train.eval_batches; }, 1, 1 << 20,
                      "validation batches per evaluation"));
  s.push_back(int_key("train.log_every", [](Config& c) -> int64_t& { return c.train.log_every; }, 1,
                      kBig, "write a metrics.jsonl line every N steps"));
  s.push_back(int_key("train.answer_samples",
                      [](Config& c) -> int64_t& { return c.train.answer_samples; }, 0, 1 << 20,
                      "arith: held-out problems completed for answer_accuracy; 0 = skip"));
  return s;
}

}  // namespace

const std::vector<KeySpec>& config_schema() {
  static const std::vector<KeySpec> schema = build_schema();
  return schema;
}

const KeySpec* find_key(const std::string& key) {
  for (const auto& k : config_schema()) {
    if (k.key == key) return &k;
  }
  return nullptr;
}

std::string config_reference_markdown() {
  std::string out =
      "# Configuration reference\n\n"
      "Generated by `frugal config --markdown` from the schema in src/core/config_schema.cpp; a test\n"
      "fails when this file and the code disagree.\n\n"
      "Values resolve as: built-in default < environment variable < TOML file < `--set KEY=VALUE`.\n"
      "`frugal config [FILE] [--set ...]` prints the resolved configuration with each value's origin.\n";
  Config defaults;
  std::string section;
  for (const auto& k : config_schema()) {
    if (k.section() != section) {
      section = k.section();
      out += fmt::format("\n## [{}]\n\n| key | default | allowed | environment | meaning |\n"
                         "| --- | --- | --- | --- | --- |\n",
                         section);
    }
    out += fmt::format("| `{}` | `{}` | {} | `{}` | {} |\n", k.name(), format_value(k.get(defaults)),
                       k.allowed(), k.env_name(), k.help);
  }
  return out;
}

std::string KeySpec::env_name() const {
  std::string out = "FRUGAL_";
  for (char ch : key) out += ch == '.' ? '_' : static_cast<char>(std::toupper(ch));
  return out;
}

std::string KeySpec::allowed() const {
  auto num = [](double x) { return fmt::format("{:g}", x); };
  switch (type) {
    case ValueType::kBool:
      return "true or false";
    case ValueType::kInt:
      return fmt::format("an integer in [{}, {}]", num(*min), num(*max));
    case ValueType::kFloat:
      return fmt::format("a number in [{}, {}]", num(*min), num(*max));
    case ValueType::kEnum:
      return fmt::format("one of {}", fmt::join(choices, ", "));
    case ValueType::kString:
      return "a string";
  }
  return "";
}

}  // namespace frugal
