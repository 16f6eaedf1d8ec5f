// The HTML run report; see report.h (the run comparison is compare.cpp).
#include "frugal/monitor/report.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <sstream>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "frugal/ckpt/run_dir.h"
#include "frugal/core/atomic_file.h"
#include "frugal/core/errors.h"
#include "frugal/monitor/levers.h"
#include "frugal/monitor/svg_chart.h"
#include "monitor/internal/run_files.h"

namespace frugal {
using detail::get;
using detail::read_json;
using detail::with_commas;

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

namespace detail {
std::string with_commas(double x) {
  std::string digits = fmt::format("{:.0f}", std::fabs(x));
  for (int i = static_cast<int>(digits.size()) - 3; i > 0; i -= 3) digits.insert(static_cast<size_t>(i), ",");
  return (x < 0 ? "-" : "") + digits;
}

nlohmann::json read_json(const std::string& path) {
  try {
    return nlohmann::json::parse(read_small_file(path));
  } catch (const nlohmann::json::exception& e) {
    throw DataError(fmt::format("{} is not valid JSON: {}", path, e.what()));
  } catch (const IoError& e) {
    throw DataError(fmt::format("{} (is this a finished run directory?)", e.what()));
  }
}

double get(const nlohmann::json& j, const char* k) {
  return j.contains(k) && j[k].is_number() ? j[k].get<double>() : NAN;
}
}  // namespace detail

namespace {
int decimals_for(double magnitude, int significant) {
  return std::clamp(significant - 1 - static_cast<int>(std::floor(std::log10(magnitude))), 0, 9);
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

// metrics.jsonl's lines. A last line that ends without its newline and does not parse is what a
// kill mid-write leaves: it is left out, and `torn` says so; any other line that does not parse
// is a DataError naming it.
std::vector<Json> read_jsonl(const std::string& path, std::string& torn) {
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
      if (in.eof()) {  // the last line, and no newline after it
        torn = fmt::format(
            "{}:{}, its last line, is cut short (no newline: the run was stopped while writing it); "
            "left out",
            path, n);
        break;
      }
      throw DataError(fmt::format("{}:{} is not a JSON object", path, n));
    }
  }
  return out;
}

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
  if (!opt.note.empty()) html += "<p class='note' id='report-note'>note: " + esc(opt.note) + "</p>";
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

std::string render_report(const std::string& run_dir, std::string* note) {
  Json summary = read_json(RunDir(run_dir).summary());
  if (!summary.contains("run_name")) summary["run_name"] = run_dir;
  ReportPageOptions o;
  if (std::filesystem::exists(RunDir(run_dir).config())) o.config_toml = read_small_file(RunDir(run_dir).config());
  const std::vector<Json> lines = read_jsonl(RunDir(run_dir).metrics(), o.note);
  if (note) *note = o.note;
  return render_report_html(summary, lines, o);
}

std::string write_report(const std::string& run_dir, std::string* note) {
  const std::string path = RunDir(run_dir).report();
  write_file_atomic(path, render_report(run_dir, note));
  return path;
}

}  // namespace frugal
