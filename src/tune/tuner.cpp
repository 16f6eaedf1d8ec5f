// `frugal tune`; see tuner.h.
#include "frugal/tune/tuner.h"

#include <torch/torch.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <memory>

#include "frugal/core/console.h"
#include "frugal/core/errors.h"
#include "frugal/core/wall_clock.h"
#include "frugal/monitor/cost_meter.h"
#include "frugal/train/precision.h"
#include "frugal/train/preemption.h"
#include "frugal/train/trainer.h"
#include "frugal/tune/batch_finder.h"
#include "frugal/train/run_config.h"
#include "tune/internal/temp_root.h"

namespace frugal {
namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;

// Records the probe steps of one candidate.
class ProbeRecorder final : public Callback {
 public:
  void on_step_end(const StepMetrics& m, Control&) override {
    if (m.logged) losses.push_back(m.loss);
    if (progress) progress(fmt::format("{}: step {}/{}", label, m.step, m.total_steps), false);
    if (m.step == 1) return;  // the warm-up step (allocations, first-touch) is not timed
    step_s += m.step_s;
    measured += 1;
    tokens = m.tokens - first_tokens;
    backoffs = m.oom_backoffs;
  }
  void on_train_begin(const RunInfo& info) override { first_tokens = info.tokens_per_step; }
  std::string label;
  TuneProgress progress;
  std::vector<double> losses;
  double step_s = 0;
  int64_t measured = 0, tokens = 0, first_tokens = 0, backoffs = 0;
};

std::vector<std::string> tune_probe_sets(int64_t steps, const std::string& root, size_t index) {
  std::vector<std::string> sets = probe_overrides(root, fmt::format("candidate-{}", index), steps);
  for (const char* s :
       {"train.eval_every=0", "train.eval_batches=1", "train.answer_samples=0", "checkpoint.enabled=false"})
    sets.push_back(s);
  return sets;
}

// The candidate list, in the order they run (earlier ones are likelier to matter).
std::vector<TuneCandidate> make_candidates(const Config& c, const FinderResult* finder) {
  const c10::Device device(c.run.device);
  std::vector<std::string> precisions = {"fp32", "bf16"};
  if (device.is_cuda()) precisions.push_back("fp16");
  const int64_t mb = c.data.micro_batch, accum = accumulation_steps(c);
  std::vector<TuneCandidate> out;
  auto add = [&](const std::string& prec, const std::string& recompute, int64_t micro, int64_t acc, int64_t workers) {
    TuneCandidate k;
    k.label = fmt::format("{} recompute={} micro {}x{}", prec, recompute, micro, acc);
    if (workers >= 0) k.label += fmt::format(" workers={}", workers);
    k.sets = {"precision.mode=" + prec, "memory.activation_checkpointing=" + recompute,
              fmt::format("data.micro_batch={}", micro), fmt::format("train.global_batch={}", micro * acc),
              "train.accum=0"};
    if (workers >= 0) k.sets.push_back(fmt::format("data.workers={}", workers));
    for (const auto& o : out)
      if (o.sets == k.sets) return;
    out.push_back(k);
  };
  const std::string given = precision_name(c.precision.mode);
  const std::string given_recompute = to_string(c.memory.activation_checkpointing);
  add(given, given_recompute, mb, accum, -1);  // the baseline: the configuration as given
  out[0].label += " (as configured)";
  add("fp32", given_recompute, mb, accum, -1);  // the loss reference
  // The finder's micro-batch next: where the configured one does not fit the budget, these are the
  // ones that can qualify, so the time bound must not skip them.
  if (finder && finder->micro_batch != mb)
    for (const auto& p : precisions) add(p, given_recompute, finder->micro_batch, finder->accum, -1);
  for (const auto& p : precisions)
    for (const char* r : {"none", "blocks"}) add(p, r, mb, accum, -1);
  if (c.data.source.kind == DataSource::Kind::kShards && c.data.workers > 0) add(given, given_recompute, mb, accum, 0);
  return out;
}

// Trains candidate k for `steps` steps (the first one untimed) through the real Trainer; returns the
// recorder, or throws what the Trainer threw.
std::shared_ptr<ProbeRecorder> train_candidate(const TuneCandidate& k, int64_t steps, const std::string& file,
                                               const std::vector<std::string>& overrides,
                                               const std::map<std::string, std::string>& env, const std::string& root,
                                               size_t index, const std::string& what, const TuneProgress& progress,
                                               double* peak_mb) {
  std::vector<std::string> sets = overrides;
  sets.insert(sets.end(), k.sets.begin(), k.sets.end());
  for (const auto& s : tune_probe_sets(steps, root, index)) sets.push_back(s);
  ResolvedConfig rc = resolve_run_config(file, sets, env);
  auto rec = std::make_shared<ProbeRecorder>();
  rec->label = fmt::format("tune: {} {}: {}", what, index + 1, k.label);
  rec->progress = progress;
  TrainerOptions opts;
  opts.quiet = true;
  opts.overwrite = true;
  opts.probe = true;
  opts.callbacks.push_back(rec);
  auto& con = Console::get();
  const bool was_quiet = con.quiet();
  try {
    Trainer trainer(std::move(rc), opts);
    nlohmann::json summary = trainer.fit();
    con.set_quiet(was_quiet);
    if (peak_mb && summary.contains("peak_tensor_mb")) *peak_mb = summary["peak_tensor_mb"].get<double>();
  } catch (...) {
    con.set_quiet(was_quiet);
    throw;
  }
  return rec;
}

// One measurement round of candidate k: appends its tokens/s and step time; the probe loss and
// peak memory come from its first round (the same start and data each round).
void run_candidate(TuneCandidate& k, const std::string& file, const std::vector<std::string>& overrides,
                   const std::map<std::string, std::string>& env, const std::string& root, size_t index,
                   const CostMeter& cost, const TuneProgress& progress) {
  const auto t0 = Clock::now();
  const Config target = resolve_run_config(
                            file,
                            [&] {
                              std::vector<std::string> s = overrides;
                              s.insert(s.end(), k.sets.begin(), k.sets.end());
                              return s;
                            }(),
                            env)
                            .config;  // the run the projection is for
  const bool first = !k.ran;
  k.ran = true;
  std::shared_ptr<ProbeRecorder> rec;
  try {
    rec = train_candidate(k, target.tune.probe_steps + 1, file, overrides, env, root, index,
                          fmt::format("round {}, candidate", k.round_tokens_per_s.size() + 1), progress,
                          first ? &k.peak_mb : nullptr);
  } catch (const std::exception& e) {
    // Bad input in the configuration as given (a missing data file, a bad value) fails every
    // candidate alike: it is the user's to fix, reported once (exit 2), not as a table of failures.
    if (index == 0 && first && (dynamic_cast<const ConfigError*>(&e) || dynamic_cast<const DataError*>(&e))) throw;
    const auto* ce = dynamic_cast<const c10::Error*>(&e);
    k.note = ce ? ce->what_without_backtrace() : e.what();
    k.note = k.note.substr(0, k.note.find('\n'));
    k.failed = true;
    k.wall_s = seconds_since(t0);
    if (progress) progress(fmt::format("tune: {:<44} failed: {}", k.label, k.note), true);
    return;
  }
  k.wall_s = seconds_since(t0);
  if (rec->measured > 0 && rec->step_s > 0) {
    k.tokens_per_step = static_cast<double>(rec->tokens) / static_cast<double>(rec->measured);
    k.round_step_s.push_back(rec->step_s / static_cast<double>(rec->measured));
    k.round_tokens_per_s.push_back(static_cast<double>(rec->tokens) / rec->step_s);
  }
  summarize_rounds(k);
  if (first) {
    double sum = 0;
    for (double l : rec->losses) sum += l;
    k.loss = rec->losses.empty() ? NAN : sum / static_cast<double>(rec->losses.size());
  }
  k.projected_s = k.step_s * static_cast<double>(target.train.steps);
  const CostFigures f = cost_at(k.projected_s, 1, 1, cost.usd_per_hour(), cost.watts(), target.budget.grid_g_per_kwh);
  k.projected_usd = f.usd;
  k.projected_kg_co2 = f.kg_co2;
  if (rec->backoffs > 0) {
    k.note = fmt::format("ran out of memory ({} back-offs)", rec->backoffs);
    k.failed = true;
  }
  if (progress)
    progress(fmt::format("tune: {:<44} {:>9.0f} tok/s  loss {:.4f}  ({:.1f} s)", k.label,
                         k.round_tokens_per_s.empty() ? 0.0 : k.round_tokens_per_s.back(), k.loss, k.wall_s),
             true);
}

// The loss check: candidate k trains `steps` steps from the run's start; its loss is the mean over
// the last quarter of them.
void check_loss(TuneCandidate& k, int64_t steps, const std::string& file, const std::vector<std::string>& overrides,
                const std::map<std::string, std::string>& env, const std::string& root, size_t index,
                const TuneProgress& progress) {
  try {
    auto rec = train_candidate(k, steps, file, overrides, env, root, index, "loss check, candidate", progress, nullptr);
    const size_t n = rec->losses.size();
    if (n == 0) throw std::runtime_error("no loss was logged");
    const size_t from = n - std::max<size_t>(1, n / 4);
    double sum = 0;
    for (size_t i = from; i < n; ++i) sum += rec->losses[i];
    k.check_loss = sum / static_cast<double>(n - from);
    if (!std::isfinite(k.check_loss)) throw std::runtime_error(fmt::format("the loss became {}", k.check_loss));
  } catch (const std::exception& e) {
    k.check_loss = NAN;
    k.failed = true;  // never checked again: the loop that asks for checks ends
    k.note = fmt::format("failed in the loss check: {}", std::string(e.what()).substr(0, 200));
  }
}

// Interrupted (exit 75) once a stop signal came: the probes that ran stopped at their step's end,
// the temporary folder goes as the stack unwinds.
void stop_if_signalled() {
  if (const int sig = preemption_signal(); sig != 0)
    throw Interrupted(
        fmt::format("tuning was stopped by {} before it finished; nothing written (run the same "
                    "command again)",
                    stop_signal_name(sig)));
}

// The batch-size finder where a memory budget exists (memory.limit_mb, a cgroup limit, CUDA), its
// line in the report; null without one.
std::unique_ptr<FinderResult> run_finder(const Config& c, TuneReport& report, const TuneProgress& progress) {
  if (memory_budget(c).bytes <= 0 && !c10::Device(c.run.device).is_cuda()) return nullptr;
  auto finder = std::make_unique<FinderResult>(find_batch_size(c, [&](const std::string& s) {
    stop_if_signalled();
    if (progress) progress(s, false);
  }));
  report.finder = finder->describe();
  if (progress) progress("batch finder: " + report.finder, true);
  return finder;
}

}  // namespace

void summarize_rounds(TuneCandidate& k) {
  std::vector<double> s = k.round_step_s;
  std::sort(s.begin(), s.end());
  k.step_s = s.empty() ? 0.0 : s[s.size() / 2];  // odd: the median; even: the slower middle one
  k.tokens_per_s = k.step_s > 0 ? k.tokens_per_step / k.step_s : 0.0;
}

int choose_candidate(std::vector<TuneCandidate>& cands, const TuneRules& rules) {
  int ref = -1;
  for (size_t i = 0; i < cands.size() && ref < 0; ++i)
    if (cands[i].ran && !cands[i].failed && cands[i].sets[0] == "precision.mode=fp32") ref = static_cast<int>(i);
  if (ref < 0 && !cands.empty() && cands[0].ran && !cands[0].failed) ref = 0;
  if (ref < 0) return -1;  // nothing ran: nothing to compare with
  int best = -1;
  for (size_t i = 0; i < cands.size(); ++i) {
    TuneCandidate& k = cands[i];
    if (!k.ran || k.failed) continue;
    k.qualifies = false;
    k.note.clear();
    const TuneCandidate& r = cands[static_cast<size_t>(ref)];
    const bool checked = std::isfinite(k.check_loss) && std::isfinite(r.check_loss);
    const double mine = checked ? k.check_loss : k.loss, theirs = checked ? r.check_loss : r.loss;
    if (!std::isfinite(mine) || std::fabs(mine - theirs) > rules.loss_tolerance * std::fabs(theirs)) {
      k.note =
          fmt::format("{} {:.4f} is more than {:.0f}% from fp32's {:.4f}",
                      checked ? fmt::format("loss after {} steps", rules.loss_check_steps) : std::string("probe loss"),
                      mine, 100 * rules.loss_tolerance, theirs);
      continue;
    }
    if (rules.limit_mb > 0 && k.peak_mb > rules.limit_mb) {
      k.note = fmt::format("peak {:.1f} MB exceeds memory.limit_mb", k.peak_mb);
      continue;
    }
    k.qualifies = true;
    if (best < 0 || k.tokens_per_s > cands[static_cast<size_t>(best)].tokens_per_s) best = static_cast<int>(i);
  }
  // Within the machine's noise of the configuration as given, keep it: a change must pay.
  if (best > 0 && cands[0].qualifies &&
      cands[static_cast<size_t>(best)].tokens_per_s < (1 + rules.min_speedup) * cands[0].tokens_per_s) {
    TuneCandidate& k = cands[static_cast<size_t>(best)];
    k.note = fmt::format("fastest, but only {:+.1f}% over the configuration as given (tune.min_speedup = {:.0f}%)",
                         100 * (k.tokens_per_s / cands[0].tokens_per_s - 1), 100 * rules.min_speedup);
    best = 0;
  }
  return best;
}

TuneReport run_tune(const std::string& file, const std::vector<std::string>& overrides,
                    const std::map<std::string, std::string>& env, const TuneProgress& progress) {
  const auto t0 = Clock::now();
  TuneReport report;
  const ResolvedConfig base = resolve_run_config(file, overrides, env);
  Config c = base.config;
  c.precision.mode = PrecisionPolicy(c.precision.mode, c10::Device(c.run.device)).mode();  // resolve auto once
  const CostMeter cost(c.budget);
  report.cost_known = cost.usd_per_hour() > 0;
  report.energy_known = cost.watts() > 0;

  const std::unique_ptr<FinderResult> finder = run_finder(c, report, progress);
  report.candidates = make_candidates(c, finder.get());
  auto& cands = report.candidates;
  detail::TempRoot root("frugal-tune");
  // Round 1: every candidate in turn, within the time bound (the baseline and the fp32 reference
  // always); then more rounds of those that ran while a whole round still fits the bound.
  double longest = 0;  // the estimate of the next candidate's time: the longest one so far
  for (size_t i = 0; i < cands.size(); ++i) {
    TuneCandidate& k = cands[i];
    const double spent = seconds_since(t0);
    if (i >= 2 && spent + longest > report.bound_s) {
      k.note = fmt::format("skipped: time bound ({:.0f}% of the projected run = {:.1f} s)", 100 * c.tune.max_fraction,
                           report.bound_s);
      ++report.bound_skipped;
      continue;
    }
    if (progress)
      progress(fmt::format("tune: round 1, candidate {}/{}: {} (starting)", i + 1, cands.size(), k.label), false);
    run_candidate(k, file, overrides, env, root.path(), i, cost, progress);
    stop_if_signalled();
    longest = std::max(longest, k.wall_s);
    if (i == 0) {
      report.projected_run_s = k.projected_s;
      report.bound_s = c.tune.max_fraction * k.projected_s;
    }
  }
  report.rounds = 1;
  for (int64_t round = 2; round <= c.tune.rounds; ++round) {
    double round_s = 0;
    for (const auto& k : cands)
      if (k.ran && !k.failed) round_s += k.wall_s;
    if (seconds_since(t0) + round_s > report.bound_s) break;
    for (size_t i = 0; i < cands.size(); ++i)
      if (cands[i].ran && !cands[i].failed) {
        run_candidate(cands[i], file, overrides, env, root.path(), i, cost, progress);
        stop_if_signalled();
      }
    report.rounds = round;
  }
  if (cands[0].ran && !cands[0].failed) report.projected_run_s = cands[0].projected_s;  // from the median
  TuneRules rules;
  rules.loss_tolerance = c.tune.loss_tolerance;
  rules.min_speedup = c.tune.min_speedup;
  rules.limit_mb = c.memory.limit_mb > 0 ? static_cast<double>(c.memory.limit_mb) * 1.048576 : 0;
  rules.loss_check_steps = c.tune.loss_check_steps;
  report.best = choose_candidate(cands, rules);
  // The loss check: the choice (unless it is the fp32 reference itself) and the reference train
  // longer from the same start; a choice whose loss drifts is dropped and the next one checked.
  int ref = -1;
  for (size_t i = 0; i < cands.size() && ref < 0; ++i)
    if (cands[i].ran && !cands[i].failed && cands[i].sets[0] == "precision.mode=fp32") ref = static_cast<int>(i);
  const int64_t n = c.tune.loss_check_steps;
  while (n > 0 && report.best >= 0 && ref >= 0 && report.best != ref &&
         cands[static_cast<size_t>(ref)].sets != cands[static_cast<size_t>(report.best)].sets &&
         !std::isfinite(cands[static_cast<size_t>(report.best)].check_loss)) {
    TuneCandidate& b = cands[static_cast<size_t>(report.best)];
    TuneCandidate& r = cands[static_cast<size_t>(ref)];
    const double need = static_cast<double>(n) * ((std::isfinite(r.check_loss) ? 0 : r.step_s) + b.step_s);
    if (seconds_since(t0) + need > report.bound_s) {
      report.loss_check = fmt::format(
          "loss check skipped: {} steps of {} and fp32 would pass the time bound; "
          "the probe losses were compared",
          n, b.label);
      break;
    }
    if (progress) progress(fmt::format("tune: loss check: {} and fp32, {} steps each", b.label, n), false);
    if (!std::isfinite(r.check_loss))
      check_loss(r, n, file, overrides, env, root.path(), static_cast<size_t>(ref), progress);
    stop_if_signalled();
    check_loss(b, n, file, overrides, env, root.path(), static_cast<size_t>(report.best), progress);
    stop_if_signalled();
    if (!std::isfinite(r.check_loss)) {
      report.loss_check = "loss check failed for the fp32 reference: " + r.note;
      break;
    }
    report.loss_check = fmt::format("loss check ({} steps, mean of the last quarter): fp32 {:.4f}, {} {:.4f}", n,
                                    r.check_loss, b.label, b.check_loss);
    report.best = choose_candidate(cands, rules);
  }
  report.seconds = seconds_since(t0);
  return report;
}

std::string too_short_to_tune(const TuneReport& r, const Config& c, const std::string& file) {
  if (r.best >= 0 || r.bound_skipped <= 0 || r.projected_run_s <= 0) return "";
  std::string skipped;
  for (const TuneCandidate& k : r.candidates)
    if (!k.ran) skipped += (skipped.empty() ? "" : "; ") + k.label;
  return fmt::format(
      "{}: no candidate qualified, and the time bound (tune.max_fraction = {} of the configured run's projected "
      "{:.1f} s at train.steps = {}: {:.1f} s) skipped {} of the {} candidates ({}); the run is too short to tune: "
      "{}, or train it as configured",
      file.empty() ? "the built-in demo config" : file, c.tune.max_fraction, r.projected_run_s, c.train.steps,
      r.bound_s, r.bound_skipped, r.candidates.size(), skipped,
      c.tune.max_fraction < 1 ? "raise train.steps or tune.max_fraction (e.g. --set tune.max_fraction=1)"
                              : "raise train.steps (tune.max_fraction = 1 already bounds tuning by the whole run's "
                                "time)");
}

std::vector<std::string> TuneReport::chosen_sets() const {
  if (best < 0) return {};
  std::vector<std::string> s = candidates[static_cast<size_t>(best)].sets;
  s.push_back("train.auto_tune=false");
  return s;
}

std::string TuneReport::table() const {
  std::string out = fmt::format("{:<3} {:<48} {:>9} {:>9} {:>10} {:>10} {:>10} {:>8}  {}\n", "", "candidate", "tok/s",
                                "peak MB", "run time", "run $", "run kg CO2", "loss", "note");
  for (size_t i = 0; i < candidates.size(); ++i) {
    const TuneCandidate& k = candidates[i];
    const std::string mark = static_cast<int>(i) == best ? "*" : "";
    if (!k.ran || k.step_s <= 0) {
      out += fmt::format("{:<3} {:<48} {:>9} {:>9} {:>10} {:>10} {:>10} {:>8}  {}\n", mark, k.label, "-", "-", "-", "-",
                         "-", "-", k.note);
      continue;
    }
    std::string note = k.qualifies ? "ok" : k.note;
    if (static_cast<int>(i) == best)
      note = i == 0
                 ? "chosen: the configuration as given"
                 : fmt::format(
                       "chosen: fastest that qualifies, {:+.1f}% over the configuration as given",
                       candidates[0].tokens_per_s > 0 ? 100 * (k.tokens_per_s / candidates[0].tokens_per_s - 1) : 0.0);
    else if (k.qualifies && !k.note.empty())
      note = k.note;
    out += fmt::format("{:<3} {:<48} {:>9.0f} {:>9} {:>9.1f}s {:>10} {:>10} {:>8.4f}  {}\n", mark, k.label,
                       k.tokens_per_s, k.peak_mb >= 0 ? fmt::format("{:.1f}", k.peak_mb) : "n/a", k.projected_s,
                       cost_known ? fmt::format("{:.4f}", k.projected_usd) : "n/a",
                       energy_known ? fmt::format("{:.5f}", k.projected_kg_co2) : "n/a", k.loss, note);
  }
  out += fmt::format(
      "tok/s and run time: from each candidate's median step time over {} round(s), candidates in turn{}; loss: "
      "the mean over the probe steps\n",
      rounds, rounds % 2 == 0 ? " (of an even count, the slower middle one)" : "");
  if (!loss_check.empty()) out += loss_check + "\n";
  out += fmt::format("tuning took {:.1f} s ({:.1f}% of the configured run's projected {:.1f} s; bound {:.0f}%)",
                     seconds, projected_run_s > 0 ? 100 * seconds / projected_run_s : 0.0, projected_run_s,
                     projected_run_s > 0 ? 100 * bound_s / projected_run_s : 0.0);
  return out;
}

nlohmann::json TuneReport::to_json() const {
  nlohmann::json j;
  j["seconds"] = seconds;
  j["bound_s"] = bound_s;
  j["projected_run_s"] = projected_run_s;
  j["rounds"] = rounds;
  if (!loss_check.empty()) j["loss_check"] = loss_check;
  if (!finder.empty()) j["batch_finder"] = finder;
  j["chosen"] = best >= 0 ? nlohmann::json(candidates[static_cast<size_t>(best)].label) : nlohmann::json(nullptr);
  j["chosen_sets"] = chosen_sets();
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& k : candidates) {
    nlohmann::json r = {
        {"label", k.label}, {"sets", k.sets}, {"ran", k.ran}, {"qualifies", k.qualifies}, {"note", k.note}};
    if (k.ran && k.step_s > 0) {
      r["tokens_per_s"] = k.tokens_per_s;
      r["round_tokens_per_s"] = k.round_tokens_per_s;
      r["round_step_s"] = k.round_step_s;
      r["tokens_per_step"] = k.tokens_per_step;
      r["step_s"] = k.step_s;
      r["loss"] = k.loss;
      if (std::isfinite(k.check_loss)) r["check_loss"] = k.check_loss;
      r["projected_s"] = k.projected_s;
      if (k.peak_mb >= 0) r["peak_tensor_mb"] = k.peak_mb;
      if (cost_known) r["projected_usd"] = k.projected_usd;
      if (energy_known) r["projected_kg_co2"] = k.projected_kg_co2;
    }
    rows.push_back(r);
  }
  j["candidates"] = rows;
  return j;
}

std::string tuned_config_toml(const std::string& file, const std::vector<std::string>& overrides,
                              const std::map<std::string, std::string>& env, const TuneReport& report) {
  std::vector<std::string> sets = overrides;
  for (const auto& s : report.chosen_sets()) sets.push_back(s);
  ResolvedConfig rc = resolve_run_config(file, sets, env);
  mark_written_by(rc, report.chosen_sets(), "frugal tune");
  std::string head = "# written by `frugal tune`";
  if (report.best >= 0) head += ": " + report.candidates[static_cast<size_t>(report.best)].label;
  return head + "\n" + rc.to_toml();
}

}  // namespace frugal
