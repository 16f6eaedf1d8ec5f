// `frugal compare`: two runs side by side, from their summary.json and config.toml; see report.h.
#include "frugal/monitor/report.h"

#include <cmath>
#include <filesystem>
#include <optional>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "frugal/ckpt/run_dir.h"
#include "frugal/core/config_loader.h"
#include "frugal/data/token_dataset.h"
#include "frugal/monitor/levers.h"
#include "monitor/internal/run_files.h"

namespace frugal {
using detail::get;
using detail::read_json;
using detail::with_commas;

namespace {
using Json = nlohmann::json;

// The tokenizer behind a run's per-token losses: a token dataset's (its manifest), bytes for
// the text and arithmetic sources, none for record datasets (losses per sample).
std::string run_tokenizer(const Config& c) {
  const DataSource& src = c.data.source;
  if (src.kind == DataSource::Kind::kRecords) return "none (records)";
  if (src.kind == DataSource::Kind::kShards) {
    const auto t = manifest_tokenizer(src.path);
    return t ? fmt::format("{} ({} symbols)", t->name, t->vocab) : "unknown (" + to_string(src) + ")";
  }
  return "bytes (256 symbols)";
}

// The keys whose resolved values differ, as shown (run.name and run.out_dir aside). A
// train.global_batch of 0 ("data.micro_batch x train.accum x processes") against the number it
// came to is no difference: the summaries' global batch, what the runs trained with, decides.
std::vector<const KeySpec*> config_differences(const Config& ca, const Config& cb, const Json& a, const Json& b) {
  std::vector<const KeySpec*> out;
  for (const auto& k : config_schema()) {
    if (k.key == "run.name" || k.key == "run.out_dir") continue;
    if (k.key == "train.global_batch" && a.contains("global_batch") &&
        a.value("global_batch", Json()) == b.value("global_batch", Json()))
      continue;
    if (format_value_shown(k, ca) != format_value_shown(k, cb)) out.push_back(&k);
  }
  return out;
}

// A key's value as a JSON value (compare --json): a string without TOML's quotes, a number, true
// or false. A secret shows as "<redacted>"; a non-finite number, which JSON cannot hold, as its
// TOML spelling ("inf", "nan").
Json json_value(const KeySpec& k, const Config& c) {
  const ConfigValue v = k.get(c);
  if (k.secret && std::holds_alternative<std::string>(v) && !std::get<std::string>(v).empty()) return "<redacted>";
  return std::visit(
      [](const auto& x) -> Json {
        if constexpr (std::is_same_v<std::decay_t<decltype(x)>, double>)
          if (!std::isfinite(x)) return format_value(ConfigValue(x));
        return Json(x);
      },
      v);
}

std::optional<ResolvedConfig> run_config(const std::string& dir) {
  const std::string path = RunDir(dir).config();
  if (!std::filesystem::exists(path)) return std::nullopt;
  return resolve_config(path, {}, {});
}
}  // namespace

namespace {
constexpr const char* kCompareFigures[] = {
    "tokens_per_s", "wall_s", "cost_usd", "kg_co2", "final_val_loss", "best_val_loss", "final_train_loss",
    "answer_accuracy", "peak_tensor_mb", "peak_rss_mb", "steps",
    // train.target_loss: what reaching it took (rows appear when either run set a target)
    "tokens_to_target", "wall_s_to_target", "usd_to_target", "kwh_to_target"};
constexpr const char* kCompareLabels[] = {"precision", "activation_checkpointing", "stop_reason"};
}  // namespace

Json compare_runs_json(const std::string& a_dir, const std::string& b_dir) {
  Json a = read_json(RunDir(a_dir).summary()), b = read_json(RunDir(b_dir).summary());
  Json out = {{"a", {{"run_dir", a_dir}, {"run_name", a.value("run_name", "")}}},
              {"b", {{"run_dir", b_dir}, {"run_name", b.value("run_name", "")}}}};
  auto value = [](double v) { return std::isfinite(v) ? Json(v) : Json(nullptr); };
  for (const char* k : kCompareFigures) {
    const double x = get(a, k), y = get(b, k);
    out["figures"][k] = {{"a", value(x)},
                         {"b", value(y)},
                         {"b_over_a", std::isfinite(x) && x != 0 && std::isfinite(y) ? Json(y / x) : Json(nullptr)}};
  }
  for (const char* k : kCompareLabels) out["labels"][k] = {{"a", a.value(k, "")}, {"b", b.value(k, "")}};
  out["labels"]["model"] = {{"a", a.value("model", "")}, {"b", b.value("model", "")}};
  for (const char* k : {"optimizer", "schedule"})
    out["labels"][k] = {{"a", lever_label(a.value("levers", Json()), k)},
                        {"b", lever_label(b.value("levers", Json()), k)}};
  out["config_differences"] = Json::object();
  const auto ca = run_config(a_dir), cb = run_config(b_dir);
  if (ca && cb) {
    for (const KeySpec* k : config_differences(ca->config, cb->config, a, b))
      out["config_differences"][k->key] = {{"a", json_value(*k, ca->config)}, {"b", json_value(*k, cb->config)}};
    out["tokenizers_differ"] = run_tokenizer(ca->config) != run_tokenizer(cb->config);
  }
  return out;
}

std::string compare_runs(const std::string& a_dir, const std::string& b_dir) {
  Json a = read_json(RunDir(a_dir).summary()), b = read_json(RunDir(b_dir).summary());
  std::string out =
      fmt::format("{:<24} {:>16} {:>16} {:>10}\n", "", a.value("run_name", "A"), b.value("run_name", "B"), "B / A");
  auto row = [&](const char* k) {
    double x = get(a, k), y = get(b, k);
    if (!std::isfinite(x) && !std::isfinite(y)) return;
    // A count is a whole number ("steps 60", not "60.0").
    const bool count = std::string(k) == "steps" || std::string(k) == "tokens_to_target";
    auto shown = [&](double v) { return count && std::isfinite(v) ? with_commas(v) : format_figure(v); };
    // wall_s_to_target is billed time (every session, start-ups included), not the run's wall_s.
    const std::string label = std::string(k) == "wall_s_to_target" ? "billed_s_to_target" : k;
    out += fmt::format("{:<24} {:>16} {:>16} {:>10}\n", label, shown(x), shown(y),
                       std::isfinite(x) && x != 0 && std::isfinite(y) ? fmt::format("{:.3f}", y / x) : "-");
  };
  for (const char* k : kCompareFigures) row(k);
  for (const char* k : kCompareLabels)
    out += fmt::format("{:<24} {:>16} {:>16}\n", k, a.value(k, "-"), b.value(k, "-"));
  for (const char* k : {"optimizer", "schedule"})
    out += fmt::format("{:<24} {:>16} {:>16}\n", k, lever_label(a.value("levers", Json()), k),
                       lever_label(b.value("levers", Json()), k));
  if (a.contains("model") || b.contains("model"))
    out += fmt::format("model  A: {}\n       B: {}\n", a.value("model", "-"), b.value("model", "-"));
  // The verdict: where both reached their target, the time and money to it decide (a run that
  // trains slower per token may still get there first); otherwise the training speed.
  const double sa = get(a, "tokens_per_s"), sb = get(b, "tokens_per_s");
  const double to_a = get(a, "wall_s_to_target"), to_b = get(b, "wall_s_to_target");
  const double ua = get(a, "usd_to_target"), ub = get(b, "usd_to_target");
  if (to_a > 0 && to_b > 0) {
    out += fmt::format("\nB reaches the target in {:.2f}x A's billed time{}{}.\n", to_b / to_a,
                       ua > 0 && ub > 0 ? fmt::format(" and {:.2f}x A's cost", ub / ua) : "",
                       sa > 0 && sb > 0 ? fmt::format(" (per token it trains {:.2f}x A's speed)", sb / sa) : "");
  } else if (sa > 0 && sb > 0) {
    out += fmt::format("\nB trains {:.2f}x {} than A (tokens/s).\n", sb >= sa ? sb / sa : sa / sb,
                       sb >= sa ? "faster" : "slower");
  }
  // What was changed between the two (their resolved config.toml), and whether their losses can
  // be compared at all.
  const auto ca = run_config(a_dir), cb = run_config(b_dir);
  if (ca && cb) {
    std::string diff;
    for (const KeySpec* k : config_differences(ca->config, cb->config, a, b))
      diff += fmt::format("  {:<30} {:>20} {:>20}\n", k->key, format_value_shown(*k, ca->config),
                          format_value_shown(*k, cb->config));
    out += diff.empty() ? "\nconfig: the same (run.name and run.out_dir aside)\n"
                        : "\nconfig differences (A, B):\n" + diff;
    const std::string ta = run_tokenizer(ca->config), tb = run_tokenizer(cb->config);
    if (ta != tb)
      out += fmt::format(
          "\nwarning: A's tokenizer is {}, B's is {}: losses per token are not comparable between "
          "them (a token is a different amount of text); compare speeds and costs only\n",
          ta, tb);
  }
  return out;
}

}  // namespace frugal
