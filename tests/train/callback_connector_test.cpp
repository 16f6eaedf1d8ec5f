// The callback connector (train/internal/callback_connector.h), its one wiring place walked kind by
// kind: with every lever of the config switched on, each kind is wired, in the loop's order; a
// probe run (TrainerOptions::probe: tune, plan, smoke) keeps exactly the kinds the table says and
// leaves out every one that acts on the world or ends a run early, and its cost meter holds no
// budget limit or alert command, whatever the config says. A kind added to the connector without
// a probe decision cannot be added at all (the table's entries carry one).
#include "train/internal/callback_connector.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>

#include "frugal/core/features.h"
#include "frugal/monitor/cost_meter.h"
#include "test_util.h"

namespace frugal::callback_connector_test {
namespace {

// Every lever that wires a callback, on; the guard on (so the NaN stop is left to it).
Config everything_on(const std::string& dir) {
  Config c = test::tiny_config();
  c.run.out_dir = dir;
  c.track.tensorboard = have_feature("tensorboard");
  c.track.mlflow_uri = "http://127.0.0.1:9";  // never contacted: the tracker starts with the run
  c.monitor.http = "127.0.0.1:0";
  c.profile.capture_steps = 2;
  c.checkpoint.deadline = "2099-01-01T00:00:00Z";
  c.early_stop.enabled = true;
  c.guard.enabled = true;
  c.train.target_loss = 1.0;
  c.train.max_minutes = 30;
  c.budget.usd_per_hour = 2;
  c.budget.limit_usd = 5;
  c.budget.alert_command = "echo spent";
  return c;
}

class UserCallback : public Callback {};

detail::Connection connect(const Config& c, const RunSetup& setup, bool probe) {
  detail::ConnectorContext ctx;
  ctx.config = &c;
  ctx.setup = &setup;
  ctx.run_dir = c.run.out_dir + "/" + c.run.name;
  ctx.quiet = true;
  ctx.user = {std::make_shared<UserCallback>()};
  ctx.stop_at_step = 7;
  ctx.probe = probe;
  return detail::connect_callbacks(ctx);
}

bool has(const detail::Connection& c, const std::string& kind) {
  return std::find(c.kinds.begin(), c.kinds.end(), kind) != c.kinds.end();
}

TEST(CallbackConnector, AProbeLeavesOutEveryKindThatActsOnTheWorldAndKeepsTheRest) {
  test::TempDir dir;
  const Config c = everything_on(dir.path());
  RunSetup setup;
  setup.grad_noise = true;
  setup.micro_batch = 4;
  setup.accum = 2;
  setup.global_batch = 8;
  const detail::Connection full = connect(c, setup, false), probe = connect(c, setup, true);
  ASSERT_EQ(full.kinds.size(), full.callbacks.size());
  ASSERT_EQ(probe.kinds.size(), probe.callbacks.size());
  const auto kinds = detail::callback_kinds();
  ASSERT_GE(kinds.size(), 19u);
  for (const auto& [kind, kept_by_probe] : kinds) {
    // The JSON progress and the progress display exclude each other (and both need a console);
    // the NaN stop stands in for a guard that is off, and a probe has no guard.
    if (kind == "json_progress" || kind == "progress_display") continue;
    if (kind == "tensorboard" && !have_feature("tensorboard")) continue;
    if (kind == "nonfinite_loss_stop") {
      EXPECT_FALSE(has(full, kind));
      EXPECT_TRUE(has(probe, kind));
      continue;
    }
    EXPECT_TRUE(has(full, kind)) << kind << " is not wired with its lever on";
    EXPECT_EQ(has(probe, kind), kept_by_probe) << kind;
  }
  // What a probe must never do, by name, besides the table's own flags.
  for (const char* world : {"tensorboard", "mlflow", "dashboard", "profiler", "deadline_guard", "target_loss",
                            "early_stopping", "divergence_guard", "time_limit"})
    EXPECT_FALSE(has(probe, world)) << world;
  EXPECT_TRUE(full.dashboard_url.rfind("http://127.0.0.1:", 0) == 0) << full.dashboard_url;
  EXPECT_EQ(probe.dashboard_url, "");
  // The order of the kinds the loop calls is the table's.
  std::vector<std::string> order;
  for (const auto& k : kinds)
    if (has(full, k.first)) order.push_back(k.first);
  EXPECT_EQ(order, full.kinds);
  // The probe's cost meter counts costs but has no limit (nor the alert command that comes with it).
  auto banner = [](const detail::Connection& conn) {
    std::vector<std::string> lines;
    for (const auto& cb : conn.callbacks)
      if (auto m = std::dynamic_pointer_cast<CostMeter>(cb)) m->add_to_banner(lines);
    return lines.empty() ? std::string() : lines.front();
  };
  EXPECT_NE(banner(full).find("limit $5.00"), std::string::npos) << banner(full);
  EXPECT_NE(banner(probe).find("$2.000/h"), std::string::npos) << banner(probe);
  EXPECT_EQ(banner(probe).find("limit"), std::string::npos) << banner(probe);
}

}  // namespace
}  // namespace frugal::callback_connector_test
