// search.json, search.html and best.toml of `frugal search`; see search.h and
// internal/search_report.h. The page draws with monitor/svg_chart.h, like report.html.
#include "search/internal/search_report.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "frugal/core/atomic_file.h"
#include "frugal/core/config_loader.h"
#include "frugal/monitor/report.h"  // format_figure
#include "frugal/search/search_space.h"
#include "frugal/search/halving.h"
#include "frugal/monitor/svg_chart.h"
#include "frugal/train/run_config.h"

namespace frugal {
namespace detail {

namespace {

using Json = nlohmann::json;

Json finite_or_null(double x) { return std::isfinite(x) ? Json(x) : Json(nullptr); }

// The trial's standing: its highest rung with a result, and the metric there.
Standing standing(const TrialState& t, int64_t max_steps, bool priced) {
  Standing s{t.id, -1, NAN, 0};
  if (!t.results.empty()) {
    s.rung = t.results.back().rung;
    s.metric = t.results.back().metric;
  }
  const double per_step = t.steps > 0 ? 1.0 / static_cast<double>(t.steps) : 0.0;
  s.cost = (priced ? t.spent_usd : t.spent_s) * per_step * static_cast<double>(max_steps);
  return s;
}

Json trial_json(const SearchContext& ctx, const TrialState& t, int64_t rank) {
  const int64_t max_steps = ctx.spec.rung_steps.back();
  const double scale = t.steps > 0 ? static_cast<double>(max_steps) / static_cast<double>(t.steps) : NAN;
  Json rungs = Json::array();
  for (const auto& r : t.results)
    rungs.push_back({{"rung", r.rung},
                     {"steps", r.steps},
                     {"metric", finite_or_null(r.metric)},
                     {"tokens_per_s", finite_or_null(r.tokens_per_s)},
                     {"cost_usd", r.cost_usd},
                     {"kg_co2", r.kg_co2},
                     {"energy_kwh", r.energy_kwh},
                     {"wall_s", r.wall_s},
                     {"stop_kind", r.stop_kind}});
  Json j = {{"rank", rank},
            {"id", t.id},
            {"draw", t.draw},
            {"values", values_json(t.values)},
            {"status", t.status},
            {"note", t.note},
            {"rung", t.results.empty() ? -1 : t.results.back().rung},
            {"steps", t.steps},
            {"metric", t.results.empty() ? Json(nullptr) : finite_or_null(t.results.back().metric)},
            {"tokens_per_s", t.results.empty() ? Json(nullptr) : finite_or_null(t.results.back().tokens_per_s)},
            {"cost_usd", t.spent_usd},
            {"kg_co2", t.spent_kg_co2},
            {"energy_kwh", t.spent_kwh},
            {"wall_s", t.spent_s},
            {"sessions", t.sessions},
            {"projected_usd", finite_or_null(t.spent_usd * scale)},
            {"projected_s", finite_or_null(t.spent_s * scale)},
            {"projected_kg_co2", finite_or_null(t.spent_kg_co2 * scale)},
            {"rungs", rungs},
            {"run_dir", ctx.trial_dir(t)}};
  return j;
}

// Per rung, the Pareto fronts of the metric against the projected full-run cost and against
// tokens/s, among the trials that reached it.
Json pareto_json(const SearchContext& ctx, bool priced) {
  Json out = Json::array();
  const double sign = ctx.spec.mode == MetricMode::kMin ? 1 : -1;
  const int64_t max_steps = ctx.spec.rung_steps.back();
  for (size_t k = 0; k < ctx.spec.rung_steps.size(); ++k) {
    std::vector<std::string> ids;
    std::vector<std::pair<double, double>> by_cost, by_speed;
    for (const auto& t : ctx.state.trials)
      for (const auto& r : t.results) {
        if (r.rung != static_cast<int64_t>(k) || r.steps <= 0) continue;
        const double spent = priced ? r.cost_usd : r.wall_s;
        ids.push_back(t.id);
        by_cost.emplace_back(spent / static_cast<double>(r.steps) * static_cast<double>(max_steps), sign * r.metric);
        by_speed.emplace_back(-r.tokens_per_s, sign * r.metric);
      }
    if (ids.empty()) continue;
    auto names = [&](const std::vector<size_t>& idx) {
      std::vector<std::string> v;
      for (size_t i : idx) v.push_back(ids[i]);
      return v;
    };
    out.push_back({{"rung", k},
                   {"steps", ctx.spec.rung_steps[k]},
                   {"by_cost", names(pareto_front(by_cost))},
                   {"by_tokens_per_s", names(pareto_front(by_speed))}});
  }
  return out;
}

}  // namespace

Json search_json(const SearchContext& ctx, const HalvingSchedule& schedule) {
  const SearchSpec& s = ctx.spec;
  const SearchState& st = ctx.state;
  bool priced = false;
  for (const auto& t : st.trials) priced = priced || t.usd_per_hour > 0;
  std::vector<Standing> standings;
  for (const auto& t : st.trials) standings.push_back(standing(t, s.rung_steps.back(), priced));
  const std::vector<std::string> order = rank_standings(standings, s.mode);
  Json trials = Json::array();
  int64_t trial_steps = 0, sessions = 0;
  double usd = 0, co2 = 0, kwh = 0, secs = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    const auto& t =
        *std::find_if(st.trials.begin(), st.trials.end(), [&](const TrialState& x) { return x.id == order[i]; });
    trials.push_back(trial_json(ctx, t, static_cast<int64_t>(i) + 1));
    trial_steps += t.steps, sessions += t.sessions;
    usd += t.spent_usd, co2 += t.spent_kg_co2, kwh += t.spent_kwh, secs += t.spent_s;
  }
  const bool has_best = !trials.empty() && !trials[0]["metric"].is_null();
  Json skipped = Json::array();
  int64_t invalid = 0, duplicate = 0;
  for (const auto& k : st.skipped) {
    skipped.push_back(
        {{"draw", k.draw}, {"values", values_json(k.values)}, {"kind", k.kind}, {"why", k.why}, {"times", k.times}});
    (k.kind == "invalid" ? invalid : duplicate) += k.times;
  }
  Json decisions = Json::array();
  for (const auto& d : st.decisions) decisions.push_back(decision_json(d));
  return {{"file", s.file},
          {"base", s.base},
          {"out", ctx.dir},
          {"fixed", s.fixed},
          {"metric", s.metric},
          {"metric_key", s.metric_key()},
          {"mode", s.mode == MetricMode::kMin ? "min" : "max"},
          {"seed", s.seed},
          {"eta", s.eta},
          {"rung_steps", s.rung_steps},
          {"parallel", s.parallel},
          {"max_trials", s.max_trials},
          {"max_usd", s.max_usd},
          {"max_hours", s.max_hours},
          {"status", st.end},
          {"stop_reason", st.reason},
          {"sessions", st.sessions},
          {"elapsed_s", ctx.elapsed_s()},
          {"max_running", st.max_running},
          {"best", has_best ? trials[0]["id"] : Json(nullptr)},
          {"cost_axis", priced ? "usd" : "seconds"},
          {"spent", {{"usd", usd}, {"kg_co2", co2}, {"energy_kwh", kwh}, {"trial_s", secs}}},
          {"compute",
           {{"trial_steps", trial_steps},
            {"planned_trial_steps", schedule.trial_steps},
            {"full_trial_steps", schedule.full_trial_steps},
            {"fraction_of_full", schedule.full_trial_steps > 0
                                     ? static_cast<double>(trial_steps) / static_cast<double>(schedule.full_trial_steps)
                                     : 0.0},
            {"trial_sessions", sessions}}},
          {"trials", trials},
          {"skipped", skipped},
          {"skipped_invalid", invalid},
          {"skipped_duplicate", duplicate},
          {"decisions", decisions},
          {"pareto", pareto_json(ctx, priced)}};
}

SearchOutcome write_search_outputs(const SearchContext& ctx, const HalvingSchedule& schedule, SearchOutcome out) {
  Json j = search_json(ctx, schedule);
  out.dir = ctx.dir;
  if (!j["best"].is_null()) {
    out.best = j["best"].get<std::string>();
    const Json& b = j["trials"][0];
    std::vector<std::string> sets = ctx.spec.fixed, chosen;
    for (const auto& [k, v] : b["values"].items()) chosen.push_back(k + "=" + v.get<std::string>());
    // A run of its own: the base's run.name may well be a finished run that `frugal train best.toml`
    // must not touch.
    const std::filesystem::path folder = std::filesystem::path(ctx.dir).lexically_normal();
    const std::string folder_name = (folder.filename().empty() ? folder.parent_path() : folder).filename().string();
    chosen.push_back(fmt::format("run.name={}-{}", folder_name.empty() ? "search" : folder_name, out.best));
    sets.insert(sets.end(), chosen.begin(), chosen.end());
    ResolvedConfig rc = resolve_run_config(ctx.spec.base, sets, process_environment());
    mark_written_by(rc, chosen, "frugal search, trial " + out.best);
    out.best_toml = ctx.dir + "/best.toml";
    write_file_atomic(out.best_toml,
                      fmt::format("# written by `frugal search {}`: trial {} ({} {} at step {}, rank 1 of {})\n{}",
                                  ctx.spec.file, out.best, ctx.spec.metric,
                                  is_not_reached(b["metric"].get<double>()) ? std::string("not reached")
                                                                            : format_figure(b["metric"].get<double>()),
                                  b["steps"].get<int64_t>(), j["trials"].size(), rc.to_toml()));
    j["best_toml"] = out.best_toml;
  }
  write_file_atomic(ctx.dir + "/search.json", j.dump(2) + "\n");
  write_file_atomic(ctx.dir + "/search.html", render_search_html(j));
  out.table = search_table(j);
  return out;
}

}  // namespace detail

namespace {

using Json = nlohmann::json;

std::string values_text(const Json& values) {
  std::vector<std::string> parts;
  for (const auto& [k, v] : values.items()) parts.push_back(k + "=" + v.get<std::string>());
  return fmt::format("{}", fmt::join(parts, " "));
}

// A metric or figure as shown; a trial that has not reached train.target_loss says so.
std::string metric_text(double x) { return is_not_reached(x) ? "not reached" : format_figure(x); }

std::string figure(const Json& v, const char* f = "{}") {
  return v.is_number() ? fmt::format(fmt::runtime(f), metric_text(v.get<double>())) : "-";
}

const char* kRungColors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"};

// Where the charts cut off far-off metrics: the best plus four times the distance from the best to
// the median of all measurements (in the worse direction), when some lie beyond it.
double metric_clip(const Json& j) {
  std::vector<double> m;
  for (const auto& t : j["trials"])
    for (const auto& r : t["rungs"])
      if (r["metric"].is_number() && !is_not_reached(r["metric"].get<double>())) m.push_back(r["metric"].get<double>());
  if (m.size() < 3 || j["mode"] != "min") return NAN;
  std::sort(m.begin(), m.end());
  const double clip = m.front() + 4 * (m[m.size() / 2] - m.front());
  return clip > m.front() && clip < m.back() ? clip : NAN;
}

// One scatter per cost axis: every trial at every rung it reached (a series per rung), each rung's
// Pareto front dashed.
std::string pareto_chart(const Json& j, bool by_speed) {
  const bool usd = j.value("cost_axis", "usd") == "usd";
  const int64_t max_steps = j["rung_steps"].back().get<int64_t>();
  std::vector<chart::PointSeries> series;
  for (const auto& p : j["pareto"]) {
    const int64_t k = p["rung"].get<int64_t>();
    chart::PointSeries s{
        fmt::format("{} steps", p["steps"].get<int64_t>()), kRungColors[static_cast<size_t>(k) % 8], {}, {}};
    std::map<std::string, std::pair<double, double>> at;
    for (const auto& t : j["trials"])
      for (const auto& r : t["rungs"]) {
        if (r["rung"].get<int64_t>() != k || !r["metric"].is_number() || r["steps"].get<int64_t>() <= 0) continue;
        if (is_not_reached(r["metric"].get<double>())) continue;  // no point to plot
        const double spent = usd ? r["cost_usd"].get<double>() : r["wall_s"].get<double>();
        const double x = by_speed ? (r["tokens_per_s"].is_number() ? r["tokens_per_s"].get<double>() : NAN)
                                  : spent / r["steps"].get<double>() * static_cast<double>(max_steps);
        const double y = r["metric"].get<double>();
        const std::string id = t["id"].get<std::string>();
        s.points.push_back({x, y,
                            fmt::format("{} at {} steps: {} {}", id, r["steps"].get<int64_t>(), format_figure(y),
                                        values_text(t["values"]))});
        at[id] = {x, y};
      }
    for (const auto& id : p[by_speed ? "by_tokens_per_s" : "by_cost"])
      if (at.count(id.get<std::string>())) s.line.push_back(at[id.get<std::string>()]);
    std::sort(s.line.begin(), s.line.end());
    series.push_back(std::move(s));
  }
  const std::string metric = j["metric"].get<std::string>();
  if (by_speed)
    return chart::scatter_chart("pareto-speed", metric + " vs speed", "tokens/s", metric, series, metric_clip(j));
  return chart::scatter_chart(
      "pareto-cost", metric + " vs cost",
      usd ? "projected USD for train.steps" : "projected seconds for train.steps (no price set)", metric, series,
      metric_clip(j));
}

std::string trial_rows(const Json& j) {
  std::string rows;
  for (const auto& t : j["trials"])
    rows += fmt::format(
        "<tr data-id='{}'><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>"
        "<td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
        chart::escape(t["id"].get<std::string>()), t["rank"].get<int64_t>(), chart::escape(t["id"].get<std::string>()),
        chart::escape(values_text(t["values"])), t["rung"].get<int64_t>(), t["steps"].get<int64_t>(),
        figure(t["metric"]), figure(t["tokens_per_s"]), figure(t["cost_usd"]), figure(t["kg_co2"]),
        figure(t[j.value("cost_axis", "usd") == "usd" ? "projected_usd" : "projected_s"]),
        chart::escape(t["status"].get<std::string>() +
                      (t["note"].get<std::string>().empty() ? "" : ": " + t["note"].get<std::string>())));
  return rows;
}

std::string card(const std::string& label, const std::string& value, const std::string& unit) {
  return fmt::format(
      "<div class='card'><div class='label'>{}</div><div class='figure'>{}</div><div class='unit'>{}"
      "</div></div>",
      chart::escape(label), chart::escape(value), chart::escape(unit));
}

}  // namespace

std::string render_search_html(const Json& j) {
  const std::string metric = j["metric"].get<std::string>();
  std::string h = "<!doctype html><html><head><meta charset=\"utf-8\"><title>frugal search</title><style>" +
                  chart::page_style() + "</style></head><body>";
  h += fmt::format("<h1>frugal search <code>{}</code></h1>", chart::escape(j["out"].get<std::string>()));
  h += fmt::format("<p class='stop' id='stop-reason'>{}: <b>{}</b>; best: <b>{}</b></p>",
                   chart::escape(j["status"].get<std::string>()), chart::escape(j["stop_reason"].get<std::string>()),
                   j["best"].is_null() ? "none" : chart::escape(j["best"].get<std::string>()));
  const Json& c = j["compute"];
  h += "<div id='headline'>" + card("trials", std::to_string(j["trials"].size()), "sampled and run");
  if (!j["best"].is_null()) h += card("best " + metric, figure(j["trials"][0]["metric"]), j["best"].get<std::string>());
  h += card("compute", fmt::format("{:.0f}%", 100 * c["fraction_of_full"].get<double>()),
            fmt::format("of {} trial-steps", format_figure(c["full_trial_steps"].get<double>())));
  h += card("spent", figure(j["spent"]["usd"]), "USD") + card("emissions", figure(j["spent"]["kg_co2"]), "kg CO2");
  h += "</div>";
  h += fmt::format(
      "<p>Rungs at steps {} (eta {}): at each, the best 1/eta of the trials that ran it go on, resuming "
      "from their checkpoints. Seed {}, metric <b>{}</b> ({} is better). Points are trials at each rung "
      "they reached; dashed: the Pareto front of that rung.</p>",
      fmt::join(j["rung_steps"].get<std::vector<int64_t>>(), ", "), j["eta"].get<double>(), j["seed"].get<uint64_t>(),
      chart::escape(metric), j["mode"].get<std::string>() == "min" ? "smaller" : "larger");
  h += "<div class='charts'>" + pareto_chart(j, false) + pareto_chart(j, true) + "</div>";
  h += "<h2>Trials, best first</h2><table id='trials'><tr><th>rank</th><th>trial</th><th>values</th><th>rung</th>"
       "<th>steps</th><th>" +
       chart::escape(metric) +
       "</th><th>tokens/s</th><th>USD</th><th>kg CO2</th>"
       "<th>" +
       std::string(j.value("cost_axis", "usd") == "usd" ? "USD" : "seconds") +
       " for train.steps</th><th>status</th></tr>" + trial_rows(j) + "</table>";
  h += "<h2>Decisions</h2><table id='decisions'><tr><th>rung</th><th>ranked</th><th>went on</th></tr>";
  for (const auto& d : j["decisions"])
    h += fmt::format("<tr><td>{}</td><td>{}</td><td>{}</td></tr>", d["rung"].get<int64_t>(),
                     fmt::join(d["ranked"].get<std::vector<std::string>>(), ", "),
                     fmt::join(d["promoted"].get<std::vector<std::string>>(), ", "));
  h += "</table>";
  if (!j["skipped"].empty()) {
    h += fmt::format(
        "<h2>Skipped draws</h2><p>{} invalid, {} repeated.</p><table id='skipped'><tr><th>values</th>"
        "<th>draws</th><th>why</th></tr>",
        j["skipped_invalid"].get<int64_t>(), j["skipped_duplicate"].get<int64_t>());
    for (const auto& s : j["skipped"])
      h += fmt::format("<tr><td>{}</td><td>{}</td><td>{}</td></tr>", chart::escape(values_text(s["values"])),
                       s["times"].get<int64_t>(), chart::escape(s["why"].get<std::string>()));
    h += "</table>";
  }
  return h + "</body></html>\n";
}

std::string search_table(const Json& j) {
  // A *_to_target metric (seconds, dollars, tokens) keeps its significant digits: $0.000031.
  const bool to_target = is_to_target_metric(j["metric"].get<std::string>());
  std::string out =
      fmt::format("{:<5} {:<6} {:>4} {:>7} {:>10} {:>10} {:>10} {:>10}  {:<10} {}\n", "rank", "trial", "rung", "steps",
                  j["metric"].get<std::string>(), "tok/s", "USD", "kg CO2", "status", "values");
  for (const auto& t : j["trials"])
    out += fmt::format("{:<5} {:<6} {:>4} {:>7} {:>10} {:>10} {:>10} {:>10}  {:<10} {}\n", t["rank"].get<int64_t>(),
                       t["id"].get<std::string>(), t["rung"].get<int64_t>(), t["steps"].get<int64_t>(),
                       !t["metric"].is_number() ? std::string("-")
                       : is_not_reached(t["metric"].get<double>())
                           ? std::string("not reached")
                           : fmt::format(fmt::runtime(to_target ? "{:.6g}" : "{:.4f}"), t["metric"].get<double>()),
                       figure(t["tokens_per_s"]), figure(t["cost_usd"]), figure(t["kg_co2"]),
                       t["status"].get<std::string>(), values_text(t["values"]));
  const Json& c = j["compute"];
  out += fmt::format("compute: {} trial-steps = {:.0f}% of training all {} trials to step {} ({} trial-steps)",
                     c["trial_steps"].get<int64_t>(), 100 * c["fraction_of_full"].get<double>(), j["trials"].size(),
                     j["rung_steps"].back().get<int64_t>(), c["full_trial_steps"].get<int64_t>());
  return out;
}

}  // namespace frugal
