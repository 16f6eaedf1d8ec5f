// The HTML run report and run comparison; see report.h.
#include "frugal/monitor/report.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <map>
#include <optional>
#include <sstream>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "frugal/ckpt/run_dir.h"
#include "frugal/core/atomic_file.h"
#include "frugal/core/config_loader.h"
#include "frugal/core/errors.h"
#include "frugal/data/token_dataset.h"
#include "frugal/monitor/levers.h"
#include "frugal/monitor/svg_chart.h"

namespace frugal {

std::vector<double> nice_ticks(double lo, double hi, int max_ticks) {
  if (!std::isfinite(lo) || !std::isfinite(hi)) lo = 0, hi = 1;
  if (hi < lo) std::swap(lo, hi);
  if (hi == lo) {
    const double pad = lo == 0 ? 1 : std::fabs(lo) * 0.1;
    lo -= pad, hi += pad;
  }
  max_ticks = std::max(max_ticks, 2);
  const double raw = (hi - lo) / (max_ticks - 1);
  // The smallest round step whose ticks, rounded outward to cover [lo, hi], number at most
  // max_ticks. 2.5 only for steps of 1 and up: below, it would cost a decimal (0.25).
  for (double mag = std::pow(10.0, std::floor(std::log10(raw)));; mag *= 10) {
    for (double m : {1.0, 2.0, 2.5, 5.0}) {
      const double step = m * mag;
      if (step < raw * (1 - 1e-9) || (m == 2.5 && step < 1)) continue;
      const double first = std::floor(lo / step + 1e-9), last = std::ceil(hi / step - 1e-9);
      if (last - first + 1 > max_ticks) continue;
      std::vector<double> t;
      for (double k = first; k <= last; ++k) t.push_back(k == 0 ? 0.0 : k * step);
      if (t.size() < 2) t.push_back((last + 1) * step);
      return t;
    }
  }
}

namespace {
int decimals_for(double magnitude, int significant) {
  return std::clamp(significant - 1 - static_cast<int>(std::floor(std::log10(magnitude))), 0, 9);
}
std::string with_commas(double x) {
  std::string digits = fmt::format("{:.0f}", std::fabs(x));
  for (int i = static_cast<int>(digits.size()) - 3; i > 0; i -= 3) digits.insert(static_cast<size_t>(i), ",");
  return (x < 0 ? "-" : "") + digits;
}
}  // namespace

std::string format_figure(double x) {
  if (!std::isfinite(x)) return std::isnan(x) ? "-" : (x > 0 ? "inf" : "-inf");
  if (x == 0) return "0";
  const double a = std::fabs(x);
  if (a >= 1e9) return with_commas(x / 1e6) + "M";
  if (a >= 1e6) return fmt::format("{:.{}f}M", x / 1e6, decimals_for(a / 1e6, 3));  // 1.23M, 45.6M
  if (a >= 1000) return with_commas(x);                                             // 14,200
  return fmt::format("{:.{}f}", x, decimals_for(a, 3));  // 3 significant digits: 45.6, 1.53, 0.000965
}

std::string format_tick(double v, double step) {
  if (v == 0) return "0";
  const double a = std::fabs(v);
  if (a >= 1e6 && step >= 1e5) return fmt::format("{:g}M", v / 1e6);
  if (a >= 1e4 && step >= 1000) return fmt::format("{:g}k", v / 1e3);
  // As many decimals as the step has (steps below 1 are 1, 2 or 5 times a power of ten); below
  // 1e-4 steps, a short power-of-ten form such as "3e-5" keeps the label within 6 characters.
  const int decimals = decimals_for(step, 1);
  if (decimals > 4) {
    const int exp = static_cast<int>(std::floor(std::log10(a)));
    return fmt::format("{:g}e{}", std::round(v / std::pow(10.0, exp) * 10) / 10, exp);
  }
  return fmt::format("{:.{}f}", v, decimals);
}
namespace {

using Json = nlohmann::json;

using chart::line_chart;
using chart::Series;
using chart::stacked_chart;

std::string esc(const std::string& s) { return chart::escape(s); }
std::string num(double x) { return format_figure(x); }

Json read_json(const std::string& path) {
  try {
    return Json::parse(read_small_file(path));
  } catch (const Json::exception& e) {
    throw DataError(fmt::format("{} is not valid JSON: {}", path, e.what()));
  } catch (const IoError& e) {
    throw DataError(fmt::format("{} (is this a finished run directory?)", e.what()));
  }
}

std::vector<Json> read_jsonl(const std::string& path) {
  std::string text;
  try {
    text = read_file(path);  // a regular file only: a FIFO put there would hang an ifstream
  } catch (const IoError& e) {
    throw DataError(fmt::format("{} (is this a run directory?)", e.what()));
  }
  std::istringstream in(text);
  std::vector<Json> out;
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (line.empty()) continue;
    try {
      out.push_back(Json::parse(line));
    } catch (const Json::exception&) {
      throw DataError(fmt::format("{}:{} is not a JSON object", path, n));
    }
  }
  return out;
}

double get(const Json& j, const char* k) { return j.contains(k) && j[k].is_number() ? j[k].get<double>() : NAN; }

std::string fact_rows(const Json& s) {
  std::string rows;
  auto row = [&](const std::string& k, const std::string& v) {
    rows += fmt::format("<tr><th>{}</th><td data-key='{}'>{}</td></tr>", esc(k), esc(k), esc(v));
  };
  for (auto it = s.begin(); it != s.end(); ++it) {
    if (it->is_number_float())
      row(it.key(), num(it->get<double>()));
    else if (it->is_number())
      row(it.key(), std::to_string(it->get<int64_t>()));
    else if (it->is_string())
      row(it.key(), it->get<std::string>());
    else if (it->is_boolean())
      row(it.key(), it->get<bool>() ? "true" : "false");
  }
  return rows;
}

}  // namespace

namespace {

// The profiler's top-operators table (summary["profile"]["top_ops"]).
std::string top_ops_table(const Json& summary) {
  if (!summary.contains("profile") || !summary["profile"].contains("top_ops")) return "";
  const Json& p = summary["profile"];
  std::string s = fmt::format(
      "<h2>Top operators by self time</h2><p>{} profiled step(s); traces (open in "
      "ui.perfetto.dev): {}</p>",
      p.value("captured_steps", 0), esc(p.value("traces", Json::array()).dump()));
  if (p["top_ops"].empty()) {
    s += fmt::format("<p id='top-ops-missing'>No operator events: {}</p>",
                     esc(p.value("torch_ops_problem", std::string("the profiler recorded none"))));
    return s;
  }
  s += "<table id='top-ops'><tr><th>operator</th><th>calls</th><th>self ms</th><th>self %</th><th>total ms</th>"
       "<th>self ms/step</th></tr>";
  for (const auto& r : p["top_ops"])
    s += fmt::format("<tr><td>{}</td><td>{}</td><td>{}</td><td>{:.1f}</td><td>{}</td><td>{}</td></tr>",
                     esc(r.value("name", "?")), r.value("calls", 0), num(get(r, "self_ms")), get(r, "self_pct"),
                     num(get(r, "total_ms")), num(get(r, "self_ms_per_step")));
  return s + "</table>";
}

// The headline figures, each tagged with its summary key (tests compare them to summary.json).
std::string headline(const Json& summary) {
  std::string s = "<div id='headline'>";
  auto card = [&](const char* key, const std::string& label, double scale, const char* unit) {
    const double v = get(summary, key);
    if (!std::isfinite(v)) return;
    s += fmt::format(
        "<div class='card'><div class='label'>{}</div><div class='figure' data-figure='{}'>{}</div>"
        "<div class='unit'>{}</div></div>",
        esc(label), key, num(v * scale), unit);
  };
  card("tokens_per_s", "throughput", 1, "tokens/s");
  card("samples_per_s", "samples", 1, "sequences/s");
  const double peak = get(summary, "peak_tflops");
  const std::string of_peak = std::isfinite(peak) && peak > 0 ? fmt::format("% of {} TFLOP/s", num(peak)) : "% of peak";
  card("mfu", "MFU", 100, of_peak.c_str());
  card("cost_usd", "cost", 1, "USD");
  card("final_val_loss", "val loss", 1, "nats/token");
  card("peak_rss_mb", "peak memory", 1, "MB resident");
  card("grad_noise_scale", "noise scale", 1, "sequences");
  return s + "</div>";
}

}  // namespace

namespace {

// The charts' series from metrics.jsonl: one point per logged step (eval lines feed val loss and
// the task's figures).
struct ReportSeries {
  Series train{"train loss", "#1f77b4", {}}, val{"val loss", "#d62728", {}}, tps{"tokens/s", "#2ca02c", {}};
  Series rss{"RSS MB", "#9467bd", {}}, cost{"USD", "#8c564b", {}}, mfu{"MFU %", "#17becf", {}};
  Series gns{"noise scale", "#bcbd22", {}}, batch{"global batch", "#7f7f7f", {}};
  Series lr{"learning rate", "#e377c2", {}}, gnorm{"grad norm", "#ff7f0e", {}};
  std::vector<Series> phases{{"data wait", "#7f7f7f", {}}, {"forward", "#1f77b4", {}}, {"backward", "#ff7f0e", {}},
                             {"optimizer", "#2ca02c", {}}, {"eval", "#d62728", {}},    {"checkpoint", "#9467bd", {}}};
  // A chart per task evaluation figure ("metrics" on eval lines) and per user scalar ("user" on
  // step lines), in name order.
  std::map<std::string, Series> task_figures, user_scalars;
};

ReportSeries collect_series(const Json& summary, const std::vector<Json>& lines) {
  ReportSeries r;
  auto& [train, val, tps, rss, cost, mfu, gns, batch, lr, gnorm, phases, task_figures, user_scalars] = r;
  const char* phase_keys[] = {"data_wait_s", "forward_s", "backward_s", "optimizer_s", "eval_s", "checkpoint_s"};
  const double global_batch = get(summary, "global_batch");
  double prev_step = 0;
  auto add_named = [](std::map<std::string, Series>& to, const Json& obj, double step) {
    if (!obj.is_object()) return;
    for (auto it = obj.begin(); it != obj.end(); ++it) {
      Series& ser = to[it.key()];
      if (ser.name.empty()) ser = {it.key(), "#1f77b4", {}};
      ser.points.push_back({step, it.value().is_number() ? it.value().get<double>() : std::nan("")});
    }
  };
  for (const auto& j : lines) {
    double step = get(j, "step");
    if (j.value("event", "") == "eval") {
      val.points.push_back({step, get(j, "val_loss")});
      if (j.contains("metrics")) add_named(task_figures, j["metrics"], step);
      continue;
    }
    if (j.contains("user")) add_named(user_scalars, j["user"], step);
    train.points.push_back({step, get(j, "loss")});
    tps.points.push_back({step, get(j, "tokens_per_s")});
    rss.points.push_back({step, get(j, "rss_mb")});
    cost.points.push_back({step, get(j, "cost_usd")});
    mfu.points.push_back({step, 100 * get(j, "mfu")});
    lr.points.push_back({step, get(j, "lr")});
    gnorm.points.push_back({step, get(j, "grad_norm")});
    const double g = get(j, "grad_noise_scale");
    if (std::isfinite(g)) {
      gns.points.push_back({step, g});
      if (std::isfinite(global_batch)) batch.points.push_back({step, global_batch});
    }
    // Phases of the logged step; eval and checkpoint time of the window, spread over its steps.
    const double window = std::max(1.0, step - prev_step);
    prev_step = step;
    for (int p = 0; p < 6; ++p) {
      double v = get(j, phase_keys[p]);
      if (p >= 4) v /= window;
      phases[p].points.push_back({step, std::isfinite(v) ? 1e3 * v : 0.0});
    }
  }
  return r;
}

// The live page fetches itself and swaps its body in place: no flash, no jump to the top, and a
// failed fetch (the run ended, the network blinked) leaves the last figures standing. Without
// scripts, a plain reload.
std::string live_refresh(const ReportPageOptions& opt) {
  // The URL as a JS string literal: JSON's quoting, and no "<" that could close the script.
  std::string url = Json("/" + opt.token_query).dump();
  for (size_t at = url.find('<'); at != std::string::npos; at = url.find('<', at)) url.replace(at, 1, "\\u003c");
  return fmt::format(
      "<script>setInterval(function(){{fetch({},{{cache:'no-store'}}).then(function(r){{return r.ok?r.text():null}})"
      ".then(function(t){{if(t)document.body.innerHTML=new DOMParser().parseFromString(t,'text/html').body.innerHTML}})"
      ".catch(function(){{}})}},{});</script><noscript><meta http-equiv='refresh' content='{}; url=/{}'></noscript>",
      url, 1000 * opt.refresh_s, opt.refresh_s, esc(opt.token_query));
}

}  // namespace

std::string render_report_html(const Json& summary, const std::vector<Json>& lines, const ReportPageOptions& opt) {
  const ReportSeries series = collect_series(summary, lines);
  const auto& [train, val, tps, rss, cost, mfu, gns, batch, lr, gnorm, phases, task_figures, user_scalars] = series;
  // The levers as every other place shows them (monitor/levers.h); runs from before summary.json
  // kept them, from their separate figures.
  std::string levers =
      summary.contains("levers")
          ? esc(describe_levers(summary["levers"]))
          : fmt::format("precision <b>{}</b> ({}), accumulation <b>{}</b>, activation checkpointing <b>{}</b>",
                        esc(summary.value("precision", "?")), esc(summary.value("precision_reason", "")),
                        summary.value("accum", 1), esc(summary.value("activation_checkpointing", "none")));
  std::string html = R"(<!doctype html><html><head><meta charset="utf-8"><title>frugal run report</title>)";
  if (opt.refresh_s > 0) html += live_refresh(opt);
  html += "<style>" + chart::page_style() + "</style></head><body>";
  html += fmt::format("<h1>frugal run <code>{}</code>{}</h1>", esc(summary.value("run_name", std::string("?"))),
                      opt.refresh_s > 0 ? " (live)" : "");
  html += fmt::format(
      "<p class='stop{}' id='stop-reason'>{}: <b>{}</b> after {} steps, {} tokens in {} s "
      "({} tokens/s)</p>",
      opt.refresh_s > 0 ? " live" : "", opt.refresh_s > 0 ? "state" : "stop reason",
      esc(summary.value("stop_reason", "?")), summary.value("steps", 0), summary.value("tokens", 0),
      num(get(summary, "wall_s")), num(get(summary, "tokens_per_s")));
  html += headline(summary);
  if (summary.contains("model")) {
    // train.freeze: how many of them train, and what the optimizer keeps for them.
    const double trainable = get(summary, "trainable_params"), all = get(summary, "params");
    const std::string trains =
        std::isfinite(trainable) && trainable < all
            ? fmt::format(" (<span id='trainable'>{}</span> of them train; optimizer state {} MB)",
                          with_commas(trainable), num(get(summary, "optimizer_state_mb")))
            : "";
    html += fmt::format("<p id='model'>Model: <b>{}</b>, {} parameters{}</p>", esc(summary.value("model", "")),
                        with_commas(all), trains);
  }
  if (summary.contains("precision") || summary.contains("levers"))
    html += "<p id='levers'>Levers in effect: " + levers + "</p>";
  html += "<div class='charts'>";
  html += line_chart("loss", "loss", "nats/token", {train, val});
  html += line_chart("lr", "learning rate", "lr", {lr}, true);
  html += line_chart("grad-norm", "gradient norm (before clipping)", "L2 norm", {gnorm}, true);
  html += line_chart("throughput", "throughput", "tokens/s", {tps}, true);
  // The axis names the peak MFU is a share of (summary.json's peak_tflops; peak_source says whence).
  const double peak = get(summary, "peak_tflops");
  html += line_chart("mfu", "model FLOPs utilisation",
                     std::isfinite(peak) && peak > 0 ? fmt::format("% of {} TFLOP/s", num(peak)) : "% of peak", {mfu},
                     true);
  html += stacked_chart("breakdown", "step time breakdown", "ms/step", phases);
  html += line_chart("memory", "memory (resident)", "MB", {rss}, true);
  html += line_chart("cost", "cost so far", "USD", {cost}, true);
  if (!gns.points.empty())
    html += line_chart("grad-noise", "gradient noise scale (B_simple)", "sequences", {gns, batch}, true);
  int chart_no = 0;
  for (const auto& [name, ser] : task_figures)
    html += line_chart(fmt::format("task-metric-{}", chart_no++), "evaluation: " + name, name, {ser});
  for (const auto& [name, ser] : user_scalars)
    html += line_chart(fmt::format("user-scalar-{}", chart_no++), "logged: " + name, name, {ser});
  html += "</div>" + top_ops_table(summary);
  html += "<h2>summary.json</h2><table id='summary'>" + fact_rows(summary) + "</table>";
  if (!opt.config_toml.empty())
    html += "<details id='config'><summary>resolved configuration (config.toml)</summary><pre>" + esc(opt.config_toml) +
            "</pre></details>";
  html += "</body></html>\n";
  return html;
}

std::string render_report(const std::string& run_dir) {
  Json summary = read_json(RunDir(run_dir).summary());
  if (!summary.contains("run_name")) summary["run_name"] = run_dir;
  ReportPageOptions o;
  if (std::filesystem::exists(RunDir(run_dir).config())) o.config_toml = read_small_file(RunDir(run_dir).config());
  return render_report_html(summary, read_jsonl(RunDir(run_dir).metrics()), o);
}

std::string write_report(const std::string& run_dir) {
  const std::string path = RunDir(run_dir).report();
  write_file_atomic(path, render_report(run_dir));
  return path;
}

namespace {
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
std::vector<std::array<std::string, 3>> config_differences(const Config& ca, const Config& cb, const Json& a,
                                                           const Json& b) {
  std::vector<std::array<std::string, 3>> out;
  for (const auto& k : config_schema()) {
    if (k.key == "run.name" || k.key == "run.out_dir") continue;
    if (k.key == "train.global_batch" && a.contains("global_batch") &&
        a.value("global_batch", Json()) == b.value("global_batch", Json()))
      continue;
    const std::string x = format_value_shown(k, ca), y = format_value_shown(k, cb);
    if (x != y) out.push_back({k.key, x, y});
  }
  return out;
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
    for (const auto& [key, x, y] : config_differences(ca->config, cb->config, a, b))
      out["config_differences"][key] = {{"a", x}, {"b", y}};
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
    auto shown = [&](double v) { return count && std::isfinite(v) ? with_commas(v) : num(v); };
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
    for (const auto& [key, x, y] : config_differences(ca->config, cb->config, a, b))
      diff += fmt::format("  {:<30} {:>20} {:>20}\n", key, x, y);
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
