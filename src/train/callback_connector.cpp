// The callback connector; see internal/callback_connector.h.
#include "train/internal/callback_connector.h"

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
#include "frugal/train/stop_at_step.h"
#include "frugal/train/stop_rules.h"

namespace frugal::detail {
namespace {

// Producers: each fills its figures of the step before any observer sees it.
void add_producers(const ConnectorContext& ctx, std::vector<std::shared_ptr<Callback>>& out) {
  const Config& c = *ctx.config;
  const RunSetup& setup = *ctx.setup;
  // Without the guard nothing else stops a run whose loss became NaN (the loss scaler skips such
  // steps while it runs; the stop reads that per step). First in the list, so its reason wins
  // over the stops it causes elsewhere.
  if (!c.guard.enabled) out.push_back(std::make_shared<NonFiniteLossStop>());
  out.push_back(std::make_shared<CostMeter>(c.budget));
  out.push_back(std::make_shared<MfuMeter>(setup.peak, setup.flops_per_token, setup.world_size));
  if (setup.grad_noise)
    out.push_back(std::make_shared<GradNoiseMeter>(setup.micro_batch, setup.accum, setup.global_batch));
}

// The trackers a team already watches ([track]); rank 0 alone writes to them.
void add_trackers(const ConnectorContext& ctx, std::vector<std::shared_ptr<Callback>>& out) {
  const Config& c = *ctx.config;
  const std::string levers = levers_line(*ctx.setup, c);
  if (c.track.tensorboard)
    out.push_back(std::make_shared<TensorBoardWriter>(RunDir(ctx.run_dir).tensorboard(), levers));
  if (c.track.mlflow_uri.empty()) return;
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
  out.push_back(std::make_shared<MlflowTracker>(c.track, std::move(facts)));
}

std::optional<Deadline> checked_deadline(const Config& c) {
  const std::optional<Deadline> deadline = resolve_deadline(c.checkpoint.deadline);
  if (deadline && deadline->unix_s <= unix_now())  // stopping at once would requeue forever
    throw ConfigError(
        fmt::format("the deadline {} ({}) has passed; set checkpoint.deadline to a later time, or "
                    "\"\" for none",
                    format_utc(deadline->unix_s), deadline->source));
  if (deadline)
    Console::get().line(fmt::format("deadline: {} ({}); the run checkpoints and exits 75 in time for it",
                                    format_utc(deadline->unix_s), deadline->source));
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

}  // namespace

Connection connect_callbacks(const ConnectorContext& ctx) {
  const Config& c = *ctx.config;
  Connection out;
  auto& cbs = out.callbacks;
  add_producers(ctx, cbs);
  // Data-parallel ranks other than 0 train silently: rank 0 shows, writes and serves the run.
  if (ctx.writer && ctx.json) cbs.push_back(std::make_shared<JsonProgress>());
  if (ctx.writer && !ctx.json && !ctx.quiet) cbs.push_back(std::make_shared<ProgressDisplay>());
  if (ctx.writer) cbs.push_back(std::make_shared<MetricsWriter>(RunDir(ctx.run_dir).metrics(), ctx.resuming));
  if (ctx.writer) add_trackers(ctx, cbs);
  cbs.push_back(std::make_shared<CheckpointCadence>(c.checkpoint));
  if (c.early_stop.enabled) cbs.push_back(std::make_shared<EarlyStopping>(c.early_stop));
  if (c.train.target_loss > 0) {
    std::shared_ptr<const CostMeter> cost;
    for (const auto& cb : cbs)
      if (auto m = std::dynamic_pointer_cast<const CostMeter>(cb)) cost = m;
    cbs.push_back(std::make_shared<TargetLoss>(c.train.target_loss, cost));
  }
  const std::optional<Deadline> deadline = checked_deadline(c);
  if (deadline || !c.checkpoint.notice_url.empty()) {
    auto guard = std::make_shared<DeadlineGuard>(c.checkpoint, deadline, c.train.eval_every);
    if (c.checkpoint.deadline_action == DeadlineAction::kDecay)
      guard->end_schedule_in_time(WsdEnd{c.train.warmup_steps, c.train.decay_fraction});
    cbs.push_back(guard);
  }
  if (c.guard.enabled) cbs.push_back(std::make_shared<DivergenceGuard>(c.guard));
  if (c.profile.capture_steps > 0 && ctx.writer)
    cbs.push_back(std::make_shared<Profiler>(c.profile, ctx.run_dir, ctx.device));
  if (!c.monitor.http.empty() && ctx.writer) {
    auto dashboard = open_dashboard(c);
    out.dashboard_url = dashboard->url();
    cbs.push_back(dashboard);
  }
  for (const auto& cb : ctx.user) cbs.push_back(cb);
  if (ctx.stop_at_step > 0) cbs.push_back(std::make_shared<StopAtStep>(ctx.stop_at_step));
  if (c.train.max_minutes > 0) cbs.push_back(std::make_shared<TimeLimit>(c.train.max_minutes, c.train.eval_every));
  check_state_keys(cbs);
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
