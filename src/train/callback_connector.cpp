// The callback connector; see internal/callback_connector.h.
#include "train/internal/callback_connector.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <optional>

#include <fmt/format.h>

#include "frugal/ckpt/cadence.h"
#include "frugal/ckpt/run_dir.h"
#include "frugal/core/console.h"
#include "frugal/core/errors.h"
#include "frugal/monitor/cost_meter.h"
#include "frugal/monitor/dashboard.h"
#include "frugal/monitor/grad_noise.h"
#include "frugal/monitor/json_progress.h"
#include "frugal/monitor/metrics_writer.h"
#include "frugal/monitor/mlflow.h"
#include "frugal/monitor/mfu.h"
#include "frugal/monitor/profiler.h"
#include "frugal/monitor/progress.h"
#include "frugal/monitor/tensorboard.h"
#include "frugal/train/deadline.h"
#include "frugal/train/divergence_guard.h"
#include "frugal/train/early_stopping.h"
#include "frugal/train/preemption.h"
#include "frugal/train/stop_at_step.h"
#include "frugal/train/stop_rules.h"

namespace frugal::detail {
namespace {

std::optional<Deadline> checked_deadline(const Config& c) {
  const std::optional<Deadline> deadline = resolve_deadline(c.checkpoint.deadline);
  if (deadline && deadline->unix_s <= unix_now())  // stopping at once would requeue forever
    throw ConfigError(
        fmt::format("the deadline {} ({}) has passed; set checkpoint.deadline to a later time, or "
                    "\"\" for none",
                    format_utc(deadline->unix_s), deadline->source));
  if (deadline)
    Console::get().line(fmt::format(
        "deadline: {} ({}); {}", format_utc(deadline->unix_s), deadline->source,
        c.checkpoint.deadline_action == DeadlineAction::kDecay
            ? "the run's WSD decay is moved to end before it (checkpoint.deadline_action = \"decay\"); where even "
              "that does not fit, it checkpoints and exits 75"
            : "the run checkpoints and exits 75 in time for it"));
  return deadline;
}

// The live dashboard; its address is printed even with --quiet (with port 0 this is the only
// place the port is told).
std::shared_ptr<Dashboard> open_dashboard(const Config& c) {
  auto dashboard = std::make_shared<Dashboard>(c.monitor, c.run.name);
  auto& con = Console::get();
  const bool quiet = con.quiet();
  con.set_quiet(false);
  con.line(fmt::format("dashboard: {} (/metrics for Prometheus, /api/metrics as JSON)", dashboard->url()));
  con.set_quiet(quiet);
  return dashboard;
}

std::shared_ptr<Callback> mlflow_tracker(const ConnectorContext& ctx) {
  const Config& c = *ctx.config;
  const std::string levers = levers_line(*ctx.setup, c);
  MlflowRunFacts facts;
  facts.run_name = c.run.name;
  facts.run_dir = ctx.run_dir;
  facts.resuming = ctx.resuming;
  facts.params = mlflow_params(c);
  facts.tags = {{"frugal.version", FRUGAL_VERSION},
                {"frugal.device", ctx.device.str()},
                {"frugal.levers", levers},
                {"frugal.run_dir", std::filesystem::absolute(ctx.run_dir).string()},
                {"mlflow.source.name", "frugal train"}};
  facts.stop_requested = preemption_requested;
  return std::make_shared<MlflowTracker>(c.track, std::move(facts));
}

using Made = std::shared_ptr<Callback>;
using Cfg = const ConnectorContext&;

// A budget a probe cannot act on: its costs are still counted (the figures), but no limit stops
// it and no alert command runs.
BudgetConfig probe_budget(BudgetConfig b) {
  b.limit_usd = 0;
  b.alert_command.clear();
  return b;
}

// Every kind of callback, in the order the loop calls them: the producers first (cost, MFU,
// noise scale fill the step's figures), then the observers, the user's, the stop at a step and
// last the time limit. `probe` says whether a probe run keeps the kind: a probe trains exactly its
// steps and acts on nothing outside its own directory, so trackers, the dashboard, the profiler,
// the deadline's notice poll and actions, and every stop that would end it early are left out;
// the cost meter stays without the budget's limit and alert command.
struct Kind {
  const char* name;
  bool probe;
  Made (*make)(Cfg ctx, const std::vector<Made>& before);
};

const Kind kKinds[] = {
    // Without the guard nothing else stops a run whose loss became NaN; first, so its reason wins.
    {"nonfinite_loss_stop", true,
     [](Cfg ctx, const std::vector<Made>&) -> Made {
       return !ctx.config->guard.enabled || ctx.probe ? std::make_shared<NonFiniteLossStop>() : nullptr;
     }},
    {"cost_meter", true,
     [](Cfg ctx, const std::vector<Made>&) -> Made {
       return std::make_shared<CostMeter>(ctx.probe ? probe_budget(ctx.config->budget) : ctx.config->budget);
     }},
    {"mfu", true,
     [](Cfg ctx, const std::vector<Made>&) -> Made {
       return std::make_shared<MfuMeter>(ctx.setup->peak, ctx.setup->flops_per_token, ctx.setup->world_size);
     }},
    {"grad_noise", true,
     [](Cfg ctx, const std::vector<Made>&) -> Made {
       const RunSetup& s = *ctx.setup;
       return s.grad_noise ? std::make_shared<GradNoiseMeter>(s.micro_batch, s.accum, s.global_batch) : nullptr;
     }},
    // Data-parallel ranks other than 0 train silently: rank 0 shows, writes and serves the run.
    {"json_progress", true,
     [](Cfg ctx, const std::vector<Made>&) -> Made {
       return ctx.writer && ctx.json ? std::make_shared<JsonProgress>() : nullptr;
     }},
    {"progress_display", true,
     [](Cfg ctx, const std::vector<Made>&) -> Made {
       return ctx.writer && !ctx.json && !ctx.quiet ? std::make_shared<ProgressDisplay>() : nullptr;
     }},
    {"metrics_writer", true,
     [](Cfg ctx, const std::vector<Made>&) -> Made {
       return ctx.writer ? std::make_shared<MetricsWriter>(RunDir(ctx.run_dir).metrics(), ctx.resuming) : nullptr;
     }},
    // The trackers a team already watches ([track]); rank 0 alone writes to them.
    {"tensorboard", false,
     [](Cfg ctx, const std::vector<Made>&) -> Made {
       if (!ctx.writer || !ctx.config->track.tensorboard) return nullptr;
       return std::make_shared<TensorBoardWriter>(RunDir(ctx.run_dir).tensorboard(),
                                                  levers_line(*ctx.setup, *ctx.config));
     }},
    {"mlflow", false,
     [](Cfg ctx, const std::vector<Made>&) -> Made {
       return ctx.writer && !ctx.config->track.mlflow_uri.empty() ? mlflow_tracker(ctx) : nullptr;
     }},
    {"checkpoint_cadence", true,
     [](Cfg ctx, const std::vector<Made>&) -> Made {
       return std::make_shared<CheckpointCadence>(ctx.config->checkpoint);
     }},
    {"early_stopping", false,
     [](Cfg ctx, const std::vector<Made>&) -> Made {
       return ctx.config->early_stop.enabled ? std::make_shared<EarlyStopping>(ctx.config->early_stop) : nullptr;
     }},
    {"target_loss", false,
     [](Cfg ctx, const std::vector<Made>& before) -> Made {
       const TrainConfig& t = ctx.config->train;
       if (t.target_loss <= 0) return nullptr;
       if (t.eval_every == 0 && ctx.writer)
         Console::get().line(fmt::format(
             "warning: train.target_loss = {} is checked at evaluations, and train.eval_every = 0 evaluates only at "
             "the end: the run trains all train.steps = {} before it can stop there. Set train.eval_every (e.g. "
             "{}) to stop when the target is reached",
             t.target_loss, t.steps, std::max<int64_t>(1, t.steps / 20)));
       std::shared_ptr<const CostMeter> cost;
       for (const auto& cb : before)
         if (auto m = std::dynamic_pointer_cast<const CostMeter>(cb)) cost = m;
       return std::make_shared<TargetLoss>(t.target_loss, cost);
     }},
    {"deadline_guard", false,
     [](Cfg ctx, const std::vector<Made>&) -> Made {
       const Config& c = *ctx.config;
       const std::optional<Deadline> deadline = checked_deadline(c);
       if (!deadline && c.checkpoint.notice_url.empty()) return nullptr;
       auto guard = std::make_shared<DeadlineGuard>(c.checkpoint, deadline, c.train.eval_every);
       if (c.checkpoint.deadline_action == DeadlineAction::kDecay)
         guard->end_schedule_in_time(WsdEnd{c.train.warmup_steps, c.train.decay_fraction});
       return guard;
     }},
    {"divergence_guard", false,
     [](Cfg ctx, const std::vector<Made>&) -> Made {
       return ctx.config->guard.enabled ? std::make_shared<DivergenceGuard>(ctx.config->guard) : nullptr;
     }},
    {"profiler", false,
     [](Cfg ctx, const std::vector<Made>&) -> Made {
       if (ctx.config->profile.capture_steps <= 0 || !ctx.writer) return nullptr;
       return std::make_shared<Profiler>(ctx.config->profile, ctx.run_dir, ctx.device);
     }},
    {"dashboard", false,
     [](Cfg ctx, const std::vector<Made>&) -> Made {
       return !ctx.config->monitor.http.empty() && ctx.writer ? open_dashboard(*ctx.config) : nullptr;
     }},
    {"stop_at_step", true,
     [](Cfg ctx, const std::vector<Made>&) -> Made {
       return ctx.stop_at_step > 0 ? std::make_shared<StopAtStep>(ctx.stop_at_step) : nullptr;
     }},
    {"time_limit", false,
     [](Cfg ctx, const std::vector<Made>&) -> Made {
       const TrainConfig& t = ctx.config->train;
       return t.max_minutes > 0 ? std::make_shared<TimeLimit>(t.max_minutes, t.eval_every) : nullptr;
     }},
};
constexpr const char* kUserBefore = "stop_at_step";  // the user's callbacks come just before this kind

}  // namespace

std::vector<std::pair<std::string, bool>> callback_kinds() {
  std::vector<std::pair<std::string, bool>> out;
  for (const Kind& k : kKinds) {
    if (std::string(k.name) == kUserBefore) out.emplace_back("user", true);
    out.emplace_back(k.name, k.probe);
  }
  return out;
}

Connection connect_callbacks(const ConnectorContext& ctx) {
  Connection out;
  auto add = [&](const std::string& kind, Made cb) {
    if (!cb) return;
    if (auto d = std::dynamic_pointer_cast<Dashboard>(cb)) out.dashboard_url = d->url();
    out.callbacks.push_back(std::move(cb));
    out.kinds.push_back(kind);
  };
  for (const Kind& k : kKinds) {
    if (std::string(k.name) == kUserBefore)
      for (const auto& cb : ctx.user) add("user", cb);
    if (ctx.probe && !k.probe) continue;
    add(k.name, k.make(ctx, out.callbacks));
  }
  check_state_keys(out.callbacks);
  return out;
}

void check_state_keys(const std::vector<std::shared_ptr<Callback>>& callbacks) {
  std::map<std::string, int> seen;
  for (const auto& cb : callbacks) {
    const std::string key = cb->state_key();
    if (!key.empty() && ++seen[key] == 2)
      throw ConfigError(
          fmt::format("two callbacks keep their checkpointed state under the key \"{}\", so one would "
                      "overwrite the other's in every checkpoint; give one of them another "
                      "state_key()",
                      key));
  }
}

}  // namespace frugal::detail
