// The trial-rung pool of `frugal search`; see search_runner.h.
#include "search/internal/search_runner.h"

#include <signal.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>  // fmt::join
#include <nlohmann/json.hpp>

#include "frugal/ckpt/checkpoint.h"
#include "frugal/ckpt/run_dir.h"
#include "frugal/core/atomic_file.h"
#include "frugal/core/dir_lock.h"
#include "frugal/core/errors.h"
#include "frugal/core/exit_code.h"
#include "frugal/core/wall_clock.h"
#include "frugal/monitor/progress.h"  // format_usd
#include "frugal/monitor/report.h"    // format_figure
#include "frugal/search/halving.h"
#include "frugal/train/preemption.h"
#include "search/internal/child_process.h"

namespace frugal::detail {
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double SearchContext::elapsed_s() const { return earlier_s + seconds_since(session_start); }

double SearchContext::spent_usd() const {
  double sum = 0;
  for (const auto& t : state.trials) sum += t.spent_usd;
  return sum;
}

void SearchContext::save() {
  state.elapsed_s = elapsed_s();
  save_search_state(state_path(), state);
}

namespace {

struct Job {
  size_t trial = 0;
  pid_t pid = -1;
  Clock::time_point start;
  double live_usd = 0;  // its cost meter's total at its newest logged step (metrics.jsonl)
  Clock::time_point read_at;
  bool term_sent = false;
};

nlohmann::json read_summary(const std::string& dir) {
  const std::string path = RunDir(dir).summary();
  std::error_code ec;
  if (!fs::exists(path, ec)) return nullptr;
  try {
    return nlohmann::json::parse(read_small_file(path));
  } catch (const std::exception&) {
    return nullptr;  // a run killed while writing it leaves the previous one (atomic), so rarely
  }
}

double number_or_nan(const nlohmann::json& s, const std::string& key) {
  return s.contains(key) && s[key].is_number() ? s[key].get<double>() : NAN;
}

// Whether metrics.jsonl holds an evaluation at `step`: the rung's measurement happened.
bool evaluated_at(const std::string& dir, int64_t step) {
  std::ifstream in(RunDir(dir).metrics());
  std::string line;
  const std::string needle = "\"event\":\"eval\"";
  while (std::getline(in, line)) {
    if (line.find(needle) == std::string::npos) continue;
    try {
      const auto j = nlohmann::json::parse(line);
      if (j.value("step", int64_t{-1}) == step) return true;
    } catch (const std::exception&) {
    }
  }
  return false;
}

// Rung k is finished: the summary is at its step, the run stopped there as asked (or completed),
// and its evaluation at that step was made.
bool rung_done(const nlohmann::json& s, const std::string& dir, int64_t step) {
  if (s.is_null() || s.value("steps", int64_t{-1}) != step) return false;
  const std::string kind = s.value("stop_kind", "");
  return (kind == "callback" || kind == "completed") && evaluated_at(dir, step);
}

void take_figures(TrialState& t, const nlohmann::json& s) {
  if (s.is_null()) return;
  t.spent_usd = s.value("cost_usd", t.spent_usd);
  t.spent_kg_co2 = s.value("kg_co2", t.spent_kg_co2);
  t.spent_kwh = s.value("energy_kwh", t.spent_kwh);
  t.spent_s = s.value("wall_s", 0.0) + s.value("startup_s", 0.0);
  t.steps = s.value("steps", t.steps);
}

std::string clock_text(double s) {
  const auto total = static_cast<int64_t>(s);
  return fmt::format("{}:{:02}:{:02}", total / 3600, total / 60 % 60, total % 60);
}

int64_t finished_trial_rungs(const SearchState& st) {
  int64_t n = 0;
  for (const auto& t : st.trials) n += static_cast<int64_t>(t.results.size()) + (t.status == "failed" ? 1 : 0);
  return n;
}

std::string progress_head(const SearchContext& ctx, const TrialState& t, int64_t k) {
  return fmt::format("search [{}/{}] {} rung {} ({} steps):", finished_trial_rungs(ctx.state), ctx.planned_trial_rungs,
                     t.id, k, ctx.spec.rung_steps[static_cast<size_t>(k)]);
}

std::string progress_tail(const SearchContext& ctx) {
  return fmt::format("spent {} | {}", format_usd(ctx.spent_usd()), clock_text(ctx.elapsed_s()));
}

// Records the trial's result at rung k from its summary; `own_end` = it ended on its own (early stop).
void record(SearchContext& ctx, TrialState& t, int64_t k, const nlohmann::json& s, bool own_end) {
  const std::string key = ctx.spec.metric_key();
  const bool not_reached = ctx.spec.metric_is_to_target() && (!s.contains(key) || s[key].is_null());
  if (!s.contains(key) && !not_reached)
    throw ConfigError(
        fmt::format("search.metric = \"{}\": {}/summary.json has no '{}'; use a number that "
                    "summary.json reports (final_val_loss is \"val_loss\")",
                    ctx.spec.metric, ctx.trial_dir(t), key));
  take_figures(t, s);
  RungResult r;
  r.rung = k;
  r.steps = s.value("steps", int64_t{0});
  // A trial that has not reached the target (yet): the worst of the measured, never a failure, so
  // it may go on to the next rung where there is room.
  r.metric = not_reached ? not_reached_metric(ctx.spec.mode) : number_or_nan(s, key);
  r.tokens_per_s = number_or_nan(s, "tokens_per_s");
  r.cost_usd = t.spent_usd;
  r.kg_co2 = t.spent_kg_co2;
  r.energy_kwh = t.spent_kwh;
  r.wall_s = t.spent_s;
  r.stop_kind = s.value("stop_kind", "");
  t.results.push_back(r);
  if (own_end) {
    t.status = "done";
    t.note = fmt::format("ended on its own at step {}: {}", r.steps, s.value("stop_reason", ""));
  }
  ctx.save();
  ctx.say(fmt::format(
      "{} {} {} | {} tok/s | {}{} | {}", progress_head(ctx, t, k), ctx.spec.metric,
      not_reached               ? std::string("target not reached")
      : std::isfinite(r.metric) ? fmt::format(ctx.spec.metric_is_to_target() ? "{:.6g}" : "{:.4f}", r.metric)
                                : std::string("not finite"),
      format_figure(r.tokens_per_s), format_usd(r.cost_usd), own_end ? " | " + t.note : "", progress_tail(ctx)));
}

void fail(SearchContext& ctx, TrialState& t, int64_t k, const std::string& why) {
  t.status = "failed";
  t.rung = k;
  t.note = why;
  ctx.save();
  ctx.say(fmt::format("{} failed: {} | {}", progress_head(ctx, t, k), why, progress_tail(ctx)));
}

// A trial finished rung k while the search was not there to see it (killed, then resumed): its
// result is taken from its run directory instead of training again. A checkpoint past the rung
// without its summary means the result was lost (the process died while finishing): resuming would
// train past the rung, so the trial is counted as failed.
bool harvest(SearchContext& ctx, TrialState& t, int64_t k) {
  const std::string dir = ctx.trial_dir(t);
  const int64_t step = ctx.spec.rung_steps[static_cast<size_t>(k)];
  const nlohmann::json s = read_summary(dir);
  if (rung_done(s, dir, step)) {
    record(ctx, t, k, s, false);
    return true;
  }
  int64_t newest = 0;
  for (const auto& c : list_checkpoints(dir + "/checkpoints"))
    if (c.complete) newest = std::max(newest, c.step);
  if (newest >= step && (s.is_null() || s.value("steps", int64_t{-1}) != step)) {
    take_figures(t, s);
    fail(ctx, t, k, fmt::format("its result at step {} was lost (its process died while finishing the rung)", step));
    return true;
  }
  return false;
}

// Waits (up to a minute) until no process holds the trial's run directory: after the search was
// killed, its trials finish their checkpoints before exiting.
void wait_for_run_dir(const SearchContext& ctx, const std::string& dir) {
  if (!fs::is_directory(dir)) return;
  for (int i = 0;; ++i) {
    try {
      DirLock probe(dir);
      return;
    } catch (const ConfigError& e) {
      if (i == 0) ctx.say(fmt::format("search: waiting for {}'s previous process to finish", dir));
      if (i >= 600) throw;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
}

Job launch(SearchContext& ctx, size_t index, int64_t k) {
  TrialState& t = ctx.state.trials[index];
  const std::string dir = ctx.trial_dir(t);
  wait_for_run_dir(ctx, dir);
  fs::create_directories(dir);
  std::vector<std::string> args = {"train"};
  if (!ctx.spec.base.empty()) args.push_back(ctx.spec.base);
  std::vector<std::string> sets = ctx.spec.fixed;
  for (const auto& [key, v] : t.values) sets.push_back(key + "=" + v);
  sets.insert(sets.end(), t.search_sets.begin(), t.search_sets.end());
  sets.push_back("run.out_dir=" + ctx.dir + "/trials");
  sets.push_back("run.name=" + t.id);
  sets.push_back("checkpoint.enabled=true");
  for (const auto& s : sets) args.insert(args.end(), {"--set", s});
  args.insert(args.end(), {"--resume", "auto"});
  const bool last = k + 1 == static_cast<int64_t>(ctx.spec.rung_steps.size());
  if (!last) args.insert(args.end(), {"--stop-at-step", std::to_string(ctx.spec.rung_steps[static_cast<size_t>(k)])});
  t.sessions += 1;  // counted before it starts: a search killed in between counts one too many, never too few
  ctx.save();
  {
    std::ofstream log(dir + "/trial.log", std::ios::app);
    log << fmt::format("== frugal search: {} rung {} (to step {}): {} {}\n", t.id, k,
                       ctx.spec.rung_steps[static_cast<size_t>(k)], ctx.trainer, fmt::join(args, " "));
  }
  Job j;
  j.trial = index;
  j.start = Clock::now();
  j.live_usd = t.spent_usd;
  j.pid = spawn_logged(ctx.trainer, args, dir + "/trial.log");
  return j;
}

// The `key` of the newest line of a run's metrics.jsonl (its last 8 KiB) that has it as a number,
// or NaN.
double last_logged(const std::string& dir, const std::string& key) {
  std::ifstream in(RunDir(dir).metrics(), std::ios::binary | std::ios::ate);
  if (!in) return NAN;
  const std::streamoff size = in.tellg();
  const std::streamoff from = std::max<std::streamoff>(0, size - 8192);
  in.seekg(from);
  std::string tail(static_cast<size_t>(size - from), '\0');
  in.read(tail.data(), static_cast<std::streamsize>(tail.size()));
  for (size_t end = tail.size(); end > 0;) {
    const size_t start = tail.rfind('\n', end - 1);
    const size_t b = start == std::string::npos ? 0 : start + 1;
    const std::string line = tail.substr(b, end - b);
    end = start == std::string::npos ? 0 : start;
    if (line.find("\"" + key + "\"") == std::string::npos) continue;
    try {
      const auto j = nlohmann::json::parse(line);
      if (j.contains(key) && j[key].is_number()) return j[key].get<double>();
    } catch (const std::exception&) {
    }
  }
  return NAN;
}

// The spend now: finished sessions (their summaries), and each running trial's cost meter as of
// its newest logged step (read at most every 250 ms).
double live_spend(const SearchContext& ctx, std::vector<Job>& running) {
  double sum = ctx.spent_usd();
  const auto now = Clock::now();
  for (auto& j : running) {
    const TrialState& t = ctx.state.trials[j.trial];
    if (now - j.read_at >= std::chrono::milliseconds(250)) {
      j.read_at = now;
      const double c = last_logged(ctx.trial_dir(t), "cost_usd");
      if (std::isfinite(c)) j.live_usd = std::max(j.live_usd, c);
    }
    sum += std::max(0.0, j.live_usd - t.spent_usd);
  }
  return sum;
}

std::string over_budget(const SearchContext& ctx, std::vector<Job>& running) {
  const SearchSpec& s = ctx.spec;
  if (s.max_hours > 0 && ctx.elapsed_s() >= s.max_hours * 3600)
    return fmt::format("search.max_hours = {} reached ({} of wall time)", s.max_hours, clock_text(ctx.elapsed_s()));
  if (s.max_usd > 0) {
    const double spend = live_spend(ctx, running);
    if (spend >= s.max_usd)
      return fmt::format("search.max_usd = {} reached ({} spent)", format_usd(s.max_usd), format_usd(spend));
  }
  return "";
}

// Whether the next trial-rung would pass search.max_usd at the pace measured so far ($ per
// optimizer step: the trial's own, else all trials').
std::string next_would_pass(const SearchContext& ctx, const TrialState& t, int64_t k, std::vector<Job>& running) {
  if (ctx.spec.max_usd <= 0) return "";
  double usd = 0;
  int64_t steps = 0;
  for (const auto& x : ctx.state.trials)
    if (x.steps > 0) usd += x.spent_usd, steps += x.steps;
  const double rate = t.steps > 0 && t.spent_usd > 0 ? t.spent_usd / static_cast<double>(t.steps)
                      : steps > 0                    ? usd / static_cast<double>(steps)
                                                     : 0;
  const int64_t to = ctx.spec.rung_steps[static_cast<size_t>(k)];
  const double estimate = rate * static_cast<double>(std::max<int64_t>(0, to - t.steps));
  const double spend = live_spend(ctx, running);
  if (estimate <= 0 || spend + estimate <= ctx.spec.max_usd) return "";
  return fmt::format("search.max_usd = {}: the next trial-rung ({} to step {}) would cost about {} on top of {} spent",
                     format_usd(ctx.spec.max_usd), t.id, to, format_usd(estimate), format_usd(spend));
}

}  // namespace

namespace {

struct Pool {
  std::deque<size_t> pending;
  std::vector<Job> running;
  std::map<size_t, int> retries;  // relaunches of a trial whose rung evaluation was cut short
  RungRun stop;
  void request_stop(RungStop kind, const std::string& why) {
    if (stop.stop != RungStop::kNone) return;
    stop = {kind, why};
  }
};

// A trial process of rung k ended with `status`: record its result, count its failure, queue it
// again, or stop the search when it was preempted.
void handle_exit(SearchContext& ctx, Pool& pool, const Job& job, int status, int64_t k) {
  TrialState& t = ctx.state.trials[job.trial];
  const std::string dir = ctx.trial_dir(t);
  const int64_t step = ctx.spec.rung_steps[static_cast<size_t>(k)];
  const nlohmann::json s = read_summary(dir);
  const bool exited = WIFEXITED(status);
  const int code = exited ? WEXITSTATUS(status) : -1;
  const bool stopped_by_us = job.term_sent && (code == exit_status(ExitCode::kPreempted) ||
                                               (WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM));
  take_figures(t, s);
  // A process that died without its summary (SIGKILL, a crash) trained the steps it logged.
  if (const double logged = last_logged(dir, "step"); std::isfinite(logged))
    t.steps = std::max(t.steps, static_cast<int64_t>(logged));
  if (exited && code == 0) {
    if (rung_done(s, dir, step)) return record(ctx, t, k, s, false);
    // Ended on its own before the rung: early stopping, or train.target_loss reached (the trial is
    // done; search.metric = "usd_to_target" ranks such trials by what reaching it cost).
    const std::string kind = s.is_null() ? "" : s.value("stop_kind", "");
    if (kind == "early_stop" || kind == "target_reached") return record(ctx, t, k, s, true);
    const int64_t reached = s.is_null() ? 0 : s.value("steps", int64_t{0});
    if (reached < step && !s.is_null() && s.value("stop_kind", "") != "preempted")
      return fail(ctx, t, k, fmt::format("stopped at step {}: {}", reached, s.value("stop_reason", "")));
    // At the rung's step without its evaluation: a stop signal cut the evaluation short. The
    // checkpoint marks it pending; the resumed process evaluates first and stops there.
    if (++pool.retries[job.trial] <= 2 && pool.stop.stop == RungStop::kNone) {
      pool.pending.push_back(job.trial);
      ctx.save();
      return;
    }
    if (pool.stop.stop != RungStop::kNone) return ctx.save();
    return fail(ctx, t, k, fmt::format("no evaluation at step {} after 3 tries; see {}/trial.log", step, dir));
  }
  if (stopped_by_us || (exited && code == exit_status(ExitCode::kPreempted))) {
    if (!stopped_by_us)
      pool.request_stop(RungStop::kInterrupted,
                        fmt::format("trial {} was preempted (exit 75: a stop signal or its deadline); its checkpoint "
                                    "is kept",
                                    t.id));
    return ctx.save();  // it stays at rung k and resumes from its checkpoint
  }
  std::string why = describe_status(status);
  if (exited && code == exit_status(ExitCode::kGuardStop) && !s.is_null())
    why = "stopped by a guard: " + s.value("stop_reason", "");
  const std::string last = tail_lines(dir + "/trial.log", 1);
  if (!(exited && code == exit_status(ExitCode::kGuardStop)) && !last.empty()) why += ": " + last;
  fail(ctx, t, k, why);
}

void stop_running(Pool& pool) {
  for (auto& j : pool.running)
    if (!j.term_sent) {
      ::kill(j.pid, SIGTERM);
      j.term_sent = true;
    }
}

// Launches what fits (search.parallel) unless the search is stopping.
void fill(SearchContext& ctx, Pool& pool, int64_t k) {
  const size_t parallel = static_cast<size_t>(ctx.spec.parallel);
  // Trials side by side share the cores: their OpenMP workers sleep when idle instead of spinning
  // on cores another trial computes on (core/omp_env.h). A policy set by the user is kept.
  if (parallel > 1) ::setenv("OMP_WAIT_POLICY", "PASSIVE", /*overwrite=*/0);
  while (pool.stop.stop == RungStop::kNone && pool.running.size() < parallel && !pool.pending.empty()) {
    const size_t i = pool.pending.front();
    pool.pending.pop_front();
    TrialState& t = ctx.state.trials[i];
    if (harvest(ctx, t, k)) continue;
    if (const std::string why = next_would_pass(ctx, t, k, pool.running); !why.empty()) {
      pool.pending.push_front(i);
      pool.request_stop(RungStop::kBudget, why);
      break;
    }
    pool.running.push_back(launch(ctx, i, k));
    ctx.state.max_running = std::max(ctx.state.max_running, static_cast<int64_t>(pool.running.size()));
  }
}

void loop(SearchContext& ctx, Pool& pool, int64_t k) {
  for (;;) {
    if (preemption_requested())
      pool.request_stop(RungStop::kInterrupted,
                        fmt::format("stop signal {} ({})", preemption_signal(), strsignal(preemption_signal())));
    if (const std::string why = over_budget(ctx, pool.running); !why.empty()) pool.request_stop(RungStop::kBudget, why);
    if (pool.stop.stop != RungStop::kNone) stop_running(pool);
    fill(ctx, pool, k);
    if (pool.running.empty() && (pool.pending.empty() || pool.stop.stop != RungStop::kNone)) return;
    bool ended = false;
    for (size_t i = 0; i < pool.running.size();) {
      if (const auto status = poll_child(pool.running[i].pid)) {
        const Job job = pool.running[i];
        pool.running.erase(pool.running.begin() + static_cast<std::ptrdiff_t>(i));
        handle_exit(ctx, pool, job, *status, k);
        ended = true;
      } else {
        ++i;
      }
    }
    if (!ended) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

}  // namespace

RungRun run_rung(SearchContext& ctx, int64_t k) {
  Pool pool;
  for (size_t i = 0; i < ctx.state.trials.size(); ++i) {
    const TrialState& t = ctx.state.trials[i];
    const bool has = !t.results.empty() && t.results.back().rung == k;
    if (t.status == "active" && t.rung == k && !has) pool.pending.push_back(i);
  }
  try {
    loop(ctx, pool, k);
  } catch (...) {
    // Trials never outlive the search: they checkpoint and exit before the error is reported.
    stop_running(pool);
    for (const auto& j : pool.running) wait_child(j.pid);
    ctx.save();
    throw;
  }
  return pool.stop;
}

}  // namespace frugal::detail
