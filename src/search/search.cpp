// `frugal search`: the folder, the sampling of trials and the rungs; see search.h. The process pool
// is internal/search_runner.cpp, the outputs search_report.cpp.
#include "frugal/search/search.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <memory>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "frugal/core/atomic_file.h"
#include "frugal/core/dir_lock.h"
#include "frugal/core/errors.h"
#include "frugal/core/threads.h"
#include "frugal/monitor/cost_meter.h"
#include "frugal/train/preemption.h"
#include "search/internal/search_report.h"
#include "search/internal/search_runner.h"

namespace frugal {
namespace fs = std::filesystem;
using detail::SearchContext;
using detail::SearchState;
using detail::TrialState;

namespace {

// How many distinct points the space has when every key is a list of choices (0 = unbounded).
size_t finite_size(const SearchSpec& spec) {
  size_t n = 1;
  for (const auto& p : spec.params) {
    if (p.kind != SearchParam::Kind::kChoices) return 0;
    n *= p.choices.size();
    if (n > 1000000) return 0;
  }
  return n;
}

void skip(SearchState& st, int64_t draw, const std::vector<std::pair<std::string, std::string>>& values,
          const std::string& kind, const std::string& why) {
  for (auto& s : st.skipped)
    if (s.values == values) return void(s.times += 1);
  st.skipped.push_back({draw, values, kind, why, 1});
}

// Draws trials until search.max_trials valid distinct ones (or the space is exhausted, or 20 draws
// per trial found too few): invalid combinations and repeats are skipped and counted.
SearchState begin(const SearchSpec& spec, const std::map<std::string, std::string>& env) {
  SearchState st;
  st.identity = spec.identity();
  const size_t space = finite_size(spec);
  const int64_t cap = 20 * spec.max_trials + 100;
  std::set<std::vector<std::pair<std::string, std::string>>> seen;
  std::vector<std::string> search_sets;
  if (spec.parallel > 1 && !spec.threads_given)  // the cores, shared out
    search_sets.push_back(
        fmt::format("run.threads={}", std::max(1, usable_cpu_count() / static_cast<int>(spec.parallel))));
  for (int64_t d = 0; d < cap && static_cast<int64_t>(st.trials.size()) < spec.max_trials; ++d) {
    if (space > 0 && seen.size() >= space) break;
    const auto values = sample_point(spec, d);
    seen.insert(values);
    const auto same =
        std::find_if(st.trials.begin(), st.trials.end(), [&](const TrialState& t) { return t.values == values; });
    if (same != st.trials.end()) {
      skip(st, d, values, "duplicate", "the same values as " + same->id);
      continue;
    }
    Config c;
    if (const std::string why = trial_problem(spec, values, env, &c); !why.empty()) {
      skip(st, d, values, "invalid", why);
      continue;
    }
    TrialState t;
    t.id = fmt::format("t{:03}", st.trials.size());
    t.draw = d;
    t.values = values;
    t.search_sets = search_sets;
    t.usd_per_hour = CostMeter(c.budget).usd_per_hour();
    st.trials.push_back(std::move(t));
  }
  if (st.trials.empty())
    throw ConfigError(fmt::format("{}: no draw of the space gives a configuration that can run; the first problem: {}",
                                  spec.file, st.skipped.empty() ? "none recorded" : st.skipped.front().why));
  return st;
}

// Names the parts of a search that changed since it began (a resume must search the same space),
// each as the user wrote it, with the value it began with and the value now.
void check_identity(const nlohmann::json& then, const nlohmann::json& now, const std::string& dir) {
  static const std::map<std::string, std::string> names = {
      {"params", "[space]"},
      {"seed", "search.seed"},
      {"max_trials", "search.max_trials"},
      {"eta", "search.eta"},
      {"rung_steps", "rung steps (search.rungs, search.rung_steps, train.steps)"},
      {"metric", "search.metric"},
      {"mode", "search.mode"},
      {"base", "search.base"},
      {"base_xxh3", "the contents of the base config file"},
      {"fixed", "fixed settings (the search file's sections and --set)"}};
  std::vector<std::string> changed;
  for (const auto& [k, v] : now.items()) {
    if (then.contains(k) && then[k] == v) continue;
    const auto name = names.find(k);
    const std::string what = name == names.end() ? k : name->second;
    changed.push_back(k == "base_xxh3" ? "  " + what
                                       : fmt::format("  {}: began with {}, now {}", what,
                                                     then.contains(k) ? then[k].dump() : "(none)", v.dump()));
  }
  if (!changed.empty())
    throw ConfigError(
        fmt::format("the search in {} began with other settings; these differ:\n{}\n"
                    "  hint: resume it with the same search file, base config and --set flags, or start a "
                    "new search with --overwrite or another --out (budgets and --parallel may change)",
                    dir, fmt::join(changed, "\n")));
}

// The folder: refuses to replace a search unless asked to, and locks it.
std::unique_ptr<DirLock> prepare_folder(const std::string& dir, const SearchOptions& o) {
  fs::create_directories(dir);
  std::unique_ptr<DirLock> lock;
  try {
    lock = std::make_unique<DirLock>(dir);
  } catch (const ConfigError&) {
    throw ConfigError(
        fmt::format("the search folder {} is in use by another frugal search; wait for it or stop it "
                    "(kill -TERM stops its trials with checkpoints), or choose another --out",
                    dir));
  }
  const bool held = fs::exists(dir + "/search_state.json") || fs::exists(dir + "/trials");
  if (held && o.overwrite) {
    for (const char* f : {"search_state.json", "trials", "search.json", "search.html", "best.toml"})
      remove_tree(fs::path(dir) / f);
  } else if (held && o.resume != "auto") {
    throw ConfigError(
        fmt::format("the search folder {} already holds a search; pass --resume auto to continue it, "
                    "--overwrite to start again, or choose another --out",
                    dir));
  }
  return lock;
}

void apply_options(SearchSpec& spec, const SearchOptions& o) {
  if (!o.out.empty()) spec.out = o.out;
  if (o.parallel > 0) spec.parallel = o.parallel;
  if (o.max_usd >= 0) spec.max_usd = o.max_usd;
  if (o.max_hours >= 0) spec.max_hours = o.max_hours;
  if (o.resume != "" && o.resume != "auto")
    throw ConfigError(
        fmt::format("--resume {}: a search resumes with --resume auto (from its folder's state file)", o.resume));
}

void announce(const SearchContext& ctx, const HalvingSchedule& schedule) {
  const SearchSpec& s = ctx.spec;
  int64_t invalid = 0, duplicate = 0;
  for (const auto& k : ctx.state.skipped) (k.kind == "invalid" ? invalid : duplicate) += k.times;
  ctx.say(
      fmt::format("search: {} trials from {} ({} invalid and {} repeated draws skipped); rungs at steps {} "
                  "(eta {}): {} trial-rungs, {} trial-steps = {:.0f}% of training every trial to the end; {} "
                  "at once; {}",
                  ctx.state.trials.size(), s.file, invalid, duplicate, fmt::join(s.rung_steps, ", "), s.eta,
                  schedule.trial_rungs, schedule.trial_steps,
                  100.0 * static_cast<double>(schedule.trial_steps) / static_cast<double>(schedule.full_trial_steps),
                  s.parallel, ctx.dir));
  if (ctx.state.sessions > 1)
    ctx.say(fmt::format("search: resumed at rung {} (session {}; {:.0f} s so far)", ctx.state.rung, ctx.state.sessions,
                        ctx.earlier_s));
}

// After rung k: the decision (tune/halving.h), applied to the trials.
void decide(SearchContext& ctx, int64_t k) {
  const bool last = k + 1 == static_cast<int64_t>(ctx.spec.rung_steps.size());
  std::vector<RungEntry> entries;
  for (const auto& t : ctx.state.trials) {
    for (const auto& r : t.results)
      if (r.rung == k) entries.push_back({t.id, r.metric, t.status == "active" && !last});
    if (t.status == "failed" && t.rung == k) entries.push_back({t.id, NAN, false});
  }
  RungDecision d = decide_rung(k, entries, ctx.spec.eta, ctx.spec.mode);
  if (last) d.promoted.clear(), d.stopped.clear();
  for (auto& t : ctx.state.trials) {
    if (t.status != "active" || t.rung != k) continue;
    const bool on = std::find(d.promoted.begin(), d.promoted.end(), t.id) != d.promoted.end();
    t.status = on ? "active" : last ? "done" : "stopped";
    if (on) t.rung = k + 1;
  }
  ctx.state.decisions.push_back(d);
  ctx.state.rung = k + 1;
  ctx.save();
  if (last) return;
  ctx.say(fmt::format("search: rung {} ({} steps): {} of {} go on: {}; stopped: {}", k,
                      ctx.spec.rung_steps[static_cast<size_t>(k)], d.promoted.size(), d.ranked.size(),
                      d.promoted.empty() ? "none" : fmt::format("{}", fmt::join(d.promoted, ", ")),
                      d.stopped.empty() ? "none" : fmt::format("{}", fmt::join(d.stopped, ", "))));
}

}  // namespace

SearchOutcome run_search(const SearchOptions& o) {
  const auto env = process_environment();
  SearchContext ctx;
  ctx.spec = load_search_spec(o.file, o.sets, env);
  apply_options(ctx.spec, o);
  if (ctx.spec.max_usd > 0 && CostMeter(ctx.spec.base_config.budget).usd_per_hour() <= 0)
    throw ConfigError(
        fmt::format("search.max_usd = {} but no price is configured, so every trial costs $0: set "
                    "[budget] usd_per_hour or instance (data/prices.toml), or use search.max_hours",
                    ctx.spec.max_usd));
  ctx.dir = ctx.spec.out;
  ctx.trainer = o.trainer;
  ctx.progress = o.progress;
  const auto lock = prepare_folder(ctx.dir, o);
  if (fs::exists(ctx.state_path())) {
    ctx.state = detail::load_search_state(ctx.state_path());
    check_identity(ctx.state.identity, ctx.spec.identity(), ctx.dir);
    ctx.earlier_s = ctx.state.elapsed_s;
  } else {
    ctx.state = begin(ctx.spec, env);
  }
  ctx.state.sessions += 1;
  ctx.state.end.clear();
  ctx.state.reason.clear();
  ctx.save();
  const HalvingSchedule schedule =
      halving_schedule(static_cast<int64_t>(ctx.state.trials.size()), ctx.spec.rung_steps, ctx.spec.eta);
  ctx.planned_trial_rungs = schedule.trial_rungs;
  announce(ctx, schedule);

  clear_preemption();
  SignalHandlers signals;  // a stop signal stops the trials with checkpoints; the search exits 75
  SearchOutcome out;
  const auto rungs = static_cast<int64_t>(ctx.spec.rung_steps.size());
  while (ctx.state.rung < rungs) {
    const detail::RungRun r = detail::run_rung(ctx, ctx.state.rung);
    if (r.stop != detail::RungStop::kNone) {
      out.end = r.stop == detail::RungStop::kBudget ? SearchEnd::kBudget : SearchEnd::kInterrupted;
      out.reason = r.reason;
      break;
    }
    decide(ctx, ctx.state.rung);
  }
  ctx.state.end = out.end == SearchEnd::kCompleted ? "completed"
                  : out.end == SearchEnd::kBudget  ? "budget"
                                                   : "interrupted";
  ctx.state.reason = out.end == SearchEnd::kCompleted ? "every rung ran" : out.reason;
  ctx.save();
  return detail::write_search_outputs(ctx, schedule, out);
}

}  // namespace frugal
