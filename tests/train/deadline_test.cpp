// Deadline-aware stops: the deadline's sources, the pure decision with a fake clock, a fake
// preemption-notice endpoint on loopback, and a real run that stops in time with a checkpoint and
// exit code 75.
#include "frugal/train/deadline.h"
#include "frugal/train/lr_schedule.h"

#include <httplib.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "frugal/ckpt/checkpoint.h"
#include "frugal/core/errors.h"
#include "test_util.h"

namespace frugal::deadline_test {
namespace {

std::function<const char*(const char*)> env_with(std::map<std::string, std::string> vars) {
  auto held = std::make_shared<std::map<std::string, std::string>>(std::move(vars));
  return [held](const char* name) -> const char* {
    auto it = held->find(name);
    return it == held->end() ? nullptr : it->second.c_str();
  };
}

TEST(Deadline, ResolvesEverySourceAndRefusesNonsense) {
  const auto none = env_with({});
  EXPECT_FALSE(resolve_deadline("", none));
  EXPECT_FALSE(resolve_deadline("auto", none));  // not in a Slurm job: no deadline
  const auto slurm = env_with({{"SLURM_JOB_END_TIME", "1795543200"}});
  auto d = resolve_deadline("auto", slurm);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->unix_s, 1795543200.0);
  EXPECT_EQ(d->source, "SLURM_JOB_END_TIME");
  EXPECT_EQ(resolve_deadline("slurm", slurm)->unix_s, 1795543200.0);
  EXPECT_THROW(resolve_deadline("slurm", none), ConfigError);
  EXPECT_EQ(resolve_deadline("2026-11-24T18:00:00Z", none)->unix_s, 1795543200.0);
  EXPECT_EQ(resolve_deadline("1795543200", none)->unix_s, 1795543200.0);
  for (const char* bad : {"tomorrow", "2026-11-24T18:00:00", "2026-11-24 18:00"}) {
    try {
      resolve_deadline(bad, none);
      ADD_FAILURE() << bad;
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(resolve_deadline("auto", env_with({{"SLURM_JOB_END_TIME", "soon"}})), ConfigError);
}

TEST(Deadline, StopsWhenTheNextStepASaveAndTheMarginWouldNotFit) {
  EXPECT_FALSE(must_stop_for_deadline(80, 100, 1, 10, 5));  // 96 < 100
  EXPECT_TRUE(must_stop_for_deadline(84, 100, 1, 10, 5));   // 100: no room left
  EXPECT_TRUE(must_stop_for_deadline(120, 100, 0, 0, 0));   // already past it
}

// A guard with a 5 s margin and the deadline at `deadline_s` on the clock `now`, that has seen a
// checkpoint save measured at 10 s.
std::unique_ptr<DeadlineGuard> guard_after_a_10s_save(double deadline_s, int64_t eval_every, const double& now) {
  CheckpointConfig cc;
  cc.deadline_margin_s = 5;
  auto g = std::make_unique<DeadlineGuard>(cc, Deadline{deadline_s, "test"}, eval_every, [&now] { return now; });
  CheckpointEvent save;
  save.last_write_s = 10;
  g->on_checkpoint(save);
  return g;
}

// The guard with a fake clock: it learns the save time from the checkpoints it sees and stops,
// as a preemption (exit 75), at the last step that leaves room for the final save.
TEST(Deadline, TheGuardStopsAtTheLastStepThatLeavesRoomForTheSave) {
  double now = 0;
  auto g = guard_after_a_10s_save(100, 0, now);
  EXPECT_EQ(g->save_s(), 10);
  StepMetrics m;
  m.total_steps = 1000;
  m.step_s = 1;
  Control control;
  int64_t stopped_at = -1;
  for (int64_t step = 1; step <= 1000 && !control.should_stop(); ++step) {
    now = static_cast<double>(step);  // one second per step
    m.step = step;
    g->on_step_end(m, control);
    if (control.should_stop()) stopped_at = step;
  }
  EXPECT_EQ(stopped_at, 84);  // 84 + 1 + 10 + 5 = 100
  EXPECT_EQ(control.stop_kind(), StopKind::kPreempted);
  EXPECT_NE(control.stop_reason().find("deadline (test)"), std::string::npos) << control.stop_reason();
}

TEST(Deadline, CountsTheStepsThatFitBeforeTheFinalEvaluationSaveAndMargin) {
  EXPECT_EQ(steps_before_deadline(0, 100, 1, 0, 0, 10, 5), 84);  // 84 + 10 + 5 < 100; 85 would reach it
  EXPECT_EQ(steps_before_deadline(0, 100, 1, 5, 5, 10, 5), 39);  // a 5 s final eval; 1 s per step + 1 s of eval
  EXPECT_EQ(steps_before_deadline(0, 100.5, 1, 0, 0, 10, 5), 85);
  EXPECT_EQ(steps_before_deadline(90, 100, 1, 0, 0, 10, 5), 0);  // no room at all
  EXPECT_EQ(steps_before_deadline(0, 100, 0, 0, 0, 10, 5), 0);   // no step time measured yet
}

// What a guard did over a run of one second per step up to `total` steps, an end it moved applied
// as the loop applies it.
struct GuardRun {
  int64_t requests = 0, requested_at = -1, total = 0;
  Control control;
};

GuardRun one_second_steps(DeadlineGuard& g, double& now, int64_t total) {
  GuardRun r;
  r.total = total;
  StepMetrics m;
  m.step_s = 1;
  for (int64_t step = 1; step <= r.total && !r.control.should_stop(); ++step) {
    now = static_cast<double>(step);
    m.step = step;
    m.total_steps = r.total;
    g.on_step_end(m, r.control);
    if (r.control.end_at() > 0) {
      r.requested_at = step;
      ++r.requests;
      r.total = r.control.end_at();
      r.control.clear_end_request();
    }
  }
  return r;
}

// checkpoint.deadline_action = "decay": with warmup-stable-decay (warm-up 10, the last 20% decays)
// and one second per step, the guard moves the end to the last step that fits (84) at the step
// where the decay to it must begin (84 - round(0.2 x 84) = 67), once; the run then ends there,
// completed, and the requeue stop never comes. A guard that moved the end at once (step 1) would
// shorten the stable phase of a run whose step time may still change.
TEST(Deadline, WithDecayTheGuardMovesTheEndWhenTheDecayToItMustBegin) {
  double now = 0;
  auto g = guard_after_a_10s_save(100, 0, now);
  g->end_schedule_in_time(WsdEnd{10, 0.2});
  const GuardRun r = one_second_steps(*g, now, 1000);
  EXPECT_EQ(r.requests, 1);
  EXPECT_EQ(r.requested_at, 67);
  EXPECT_EQ(r.total, 84);  // 84 + 10 + 5 < 100
  EXPECT_EQ(wsd_decay_start(84, 10, 0.2), 67);
  EXPECT_FALSE(r.control.should_stop()) << r.control.stop_reason();
  // Without end_schedule_in_time (requeue, the default) the same run stops for a requeue instead.
  now = 0;
  auto requeue = guard_after_a_10s_save(100, 0, now);
  const GuardRun q = one_second_steps(*requeue, now, 1000);
  EXPECT_EQ(q.requests, 0);
  EXPECT_EQ(q.control.stop_kind(), StopKind::kPreempted);
}

// A run that ends before its deadline anyway keeps train.steps.
TEST(Deadline, WithDecayARunThatFitsKeepsItsEnd) {
  double now = 0;
  auto g = guard_after_a_10s_save(100, 0, now);
  g->end_schedule_in_time(WsdEnd{10, 0.2});
  const GuardRun r = one_second_steps(*g, now, 80);
  EXPECT_EQ(r.requests, 0);
  EXPECT_EQ(r.total, 80);
  EXPECT_FALSE(r.control.should_stop());
}

// On a GPU the steps between log steps do not wait for the device: here the host spends 0.1 s on
// each and the device 1 s, so a log step every 50 steps waits 45.1 s for the backlog, and the
// host's clock runs ahead of the device's work. A stop at any step pays the backlog (its save
// waits for the queued steps first). The guard keeps a log step's time for the whole next window:
// with the deadline at 112.05 s it stops at step 70 (52 s on the clock, 18 s of backlog, a 10 s
// save: done at 80 s). Taking only recent steps, decaying, it would run on to step 100 (100 s on
// the clock, then the save: 110 s, inside the 5 s margin).
TEST(Deadline, BetweenLogStepsTheGuardKeepsRoomForTheQueuedWork) {
  double now = 0;
  auto g = guard_after_a_10s_save(112.05, 0, now);
  StepMetrics m;
  m.total_steps = 1000;
  Control control;
  int64_t stopped_at = -1;
  for (int64_t step = 1; step <= 1000 && !control.should_stop(); ++step) {
    m.step = step;
    m.logged = step % 50 == 0;
    m.step_s = m.logged ? 50 * 1.0 - 49 * 0.1 : 0.1;
    now += m.step_s;
    g->on_step_end(m, control);
    if (control.should_stop()) stopped_at = step;
  }
  EXPECT_EQ(stopped_at, 70);
}

// An evaluation step needs room for the evaluation too: with 20 s evaluations every 10 steps the
// guard stops at step 70 (70 + 20 + 1 + 10 + 5 > 100), not at 84 as without them.
TEST(Deadline, AStepThatEvaluatesLeavesRoomForTheEvaluation) {
  double now = 0;
  auto g = guard_after_a_10s_save(100, /*eval_every=*/10, now);
  Control control;
  EvalMetrics ev;
  ev.eval_s = 20;
  g->on_eval_end(ev, control);
  StepMetrics m;
  m.total_steps = 1000;
  m.step_s = 1;
  int64_t stopped_at = -1;
  for (int64_t step = 1; step <= 1000 && !control.should_stop(); ++step) {
    now = static_cast<double>(step);
    m.step = step;
    g->on_step_end(m, control);
    if (control.should_stop()) stopped_at = step;
  }
  EXPECT_EQ(stopped_at, 70);
  EXPECT_NE(control.stop_reason().find("an evaluation and one more step"), std::string::npos) << control.stop_reason();
}

TEST(Deadline, ANoticeUrlWithoutAHostOrWithABadPortIsRefused) {
  for (const char* url : {"http://:8080/notice", "http://metadata:99999/x", "http://metadata:abc/x", "http://"}) {
    CheckpointConfig cc;
    cc.notice_url = url;
    try {
      DeadlineGuard g(cc, std::nullopt);
      ADD_FAILURE() << url << " was accepted";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(url), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("1 to 65535"), std::string::npos) << e.what();
    }
  }
}

// A fake metadata endpoint on loopback: 404 (AWS: nothing scheduled) until a notice is posted.
struct FakeMetadata {
  httplib::Server server;
  std::thread thread;
  std::atomic<int> requests{0};
  std::atomic<bool> reclaim{false};
  std::string quiet_body;  // "" = answer 404; else 200 with this body (GCP answers "FALSE")
  bool token_only;         // AWS IMDSv2 only: 401 without a session token from PUT /latest/api/token
  int port = 0;
  explicit FakeMetadata(std::string quiet = "", bool imds_v2 = false)
      : quiet_body(std::move(quiet)), token_only(imds_v2) {
    server.Put("/latest/api/token", [](const httplib::Request& req, httplib::Response& res) {
      if (req.get_header_value("X-aws-ec2-metadata-token-ttl-seconds").empty()) {
        res.status = 400;
        return;
      }
      res.set_content("session-token-1", "text/plain");
    });
    server.Get("/notice", [this](const httplib::Request& req, httplib::Response& res) {
      ++requests;
      if (token_only && req.get_header_value("X-aws-ec2-metadata-token") != "session-token-1") {
        res.status = 401;
      } else if (reclaim) {
        res.set_content(R"({"action": "terminate", "time": "2026-11-24T18:02:00Z"})", "application/json");
      } else if (quiet_body.empty()) {
        res.status = 404;
      } else {
        res.set_content(quiet_body, "text/plain");
      }
    });
    port = server.bind_to_any_port("127.0.0.1");
    thread = std::thread([this] { server.listen_after_bind(); });
    while (!server.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~FakeMetadata() {
    server.stop();
    thread.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port) + "/notice"; }
};

TEST(Deadline, APreemptionNoticeStopsTheRunAsPreempted) {
  // AWS-style 404, GCP-style "FALSE", and AWS with IMDSv2 required (a session token first).
  for (const auto& [quiet, imds_v2] :
       std::vector<std::pair<std::string, bool>>{{"", false}, {"FALSE", false}, {"", true}}) {
    FakeMetadata meta(quiet, imds_v2);
    CheckpointConfig cc;
    cc.notice_url = meta.url();
    cc.notice_poll_s = 0.02;
    DeadlineGuard g(cc, std::nullopt);
    StepMetrics m;
    m.total_steps = 100;
    Control control;
    while (meta.requests < 3) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    g.on_step_end(m, control);
    EXPECT_FALSE(control.should_stop()) << "a quiet endpoint (" << quiet << ", IMDSv2 " << imds_v2
                                        << ") was taken for a notice";
    meta.reclaim = true;
    for (int i = 0; i < 2000 && !control.should_stop(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      g.on_step_end(m, control);
    }
    ASSERT_TRUE(control.should_stop()) << "IMDSv2 " << imds_v2;
    EXPECT_EQ(control.stop_kind(), StopKind::kPreempted);
    EXPECT_NE(control.stop_reason().find("terminate"), std::string::npos) << control.stop_reason();
  }
}

// End to end: a run whose deadline arrives while it trains stops with a sound checkpoint and exit
// code 75 (the emitted Slurm script requeues on 75), and resumes from it.
TEST(Deadline, ARunStopsBeforeItsDeadlineWithACheckpointAndExit75) {
  test::TempDir dir;
  const double deadline = unix_now() + 8;
  // 2 s of training at most before the margin of 6 s is reached, whatever the machine's speed.
  const std::string sets = test::tiny_sets(dir.path()) + " --set train.steps=1000000 --set checkpoint.deadline=" +
                           std::to_string(static_cast<int64_t>(deadline)) + " --set checkpoint.deadline_margin_s=6";
  auto r = test::run_frugal("train" + sets);
  EXPECT_EQ(r.exit_code, 75) << r.output;
  auto s = nlohmann::json::parse(test::read_text(dir.file("demo/summary.json")));
  EXPECT_EQ(s["stop_kind"], "preempted");
  EXPECT_NE(s["stop_reason"].get<std::string>().find("deadline (checkpoint.deadline)"), std::string::npos)
      << s["stop_reason"];
  const std::string ck = s["checkpoint"]["latest"].get<std::string>();
  ASSERT_FALSE(ck.empty());
  EXPECT_EQ(verify_checkpoint(ck), "");
}

// A deadline already past is bad input (exit 2): stopping at once with 75 would make the scheduler
// requeue the job forever.
TEST(Deadline, ADeadlineInThePastIsRefused) {
  test::TempDir dir;
  auto r = test::run_frugal("train" + test::tiny_sets(dir.path()) + " --set checkpoint.deadline=2001-09-09T01:46:40Z");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("2001-09-09T01:46:40Z (checkpoint.deadline) has passed"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace frugal::deadline_test
