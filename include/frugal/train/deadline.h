// Deadline-aware stops ([checkpoint] deadline, deadline_margin_s, notice_url): a job that ends at
// a known time (Slurm's end time, a configured wall-clock deadline) or that the platform is about
// to reclaim (a spot/preemption notice on the cloud metadata endpoint) stops in time for its
// checkpoint to be complete, and exits 75 so that the scheduler requeues it.
//
// must_stop_for_deadline() is the pure decision (tests drive it with a fake clock): stop after this
// step when one more step, a save and the margin would end past the deadline. The save time is
// the longest save measured in this run (checkpoint writes, sync or async), and the margin covers
// the first save before one was measured. NoticePoller asks a URL every notice_poll_s on a
// background thread: a 2xx answer whose body is neither empty nor "false" is a notice (AWS
// `spot/instance-action` answers 404 until a reclaim is scheduled; GCP `instance/preempted`
// answers "FALSE" until it is, and wants the header "Metadata-Flavor: Google", always sent).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "frugal/core/callback.h"
#include "frugal/core/config.h"
#include "frugal/core/wall_clock.h"

namespace frugal {

struct Deadline {
  double unix_s = 0;   // when the job ends
  std::string source;  // "checkpoint.deadline", "SLURM_JOB_END_TIME"
};

// checkpoint.deadline: "" (none), "auto" (SLURM_JOB_END_TIME when the job has one), "slurm" (the
// same, required), an ISO-8601 UTC time "2026-11-24T18:00:00Z", or Unix seconds. `env` looks up
// environment variables (tests pass their own). Throws ConfigError naming the value.
std::optional<Deadline> resolve_deadline(const std::string& text,
                                         const std::function<const char*(const char*)>& env = nullptr);

bool must_stop_for_deadline(double now_unix, double deadline_unix, double step_s, double save_s, double margin_s);

// How many more steps fit before the deadline when the run is to finish there: each step takes
// `step_s` and every `eval_every`-th an evaluation of `eval_s` (0: none), and after the last come
// the final evaluation, the final save and the margin, all ending before the deadline (as
// must_stop_for_deadline counts). 0 when not even one fits.
int64_t steps_before_deadline(double now_unix, double deadline_unix, double step_s, double eval_s, int64_t eval_every,
                              double save_s, double margin_s);

// checkpoint.deadline_action = "decay" with train.schedule = "wsd": the run's end is moved to the
// last step that fits before the deadline, decided while the rate is still at its peak (in the
// stable phase the end does not change any rate), at the step where the decay to that end must
// begin. The deadline's own stop (checkpoint, exit 75) stays as the backstop when the steps slow
// down after that.
struct WsdEnd {
  int64_t warmup_steps = 0;
  double decay_fraction = 0.2;
};

// Polls a preemption-notice URL ("http://HOST[:PORT]/PATH") on its own thread.
class NoticePoller {
 public:
  NoticePoller(const std::string& url, double poll_s);
  ~NoticePoller();  // stops the thread (at most one request's timeout later)
  NoticePoller(const NoticePoller&) = delete;
  NoticePoller& operator=(const NoticePoller&) = delete;
  bool noticed() const { return noticed_.load(); }
  std::string notice() const;  // the answer's body, trimmed

 private:
  void run();
  void poll();
  std::string scheme_host_, path_;
  double poll_s_;
  std::atomic<bool> noticed_{false};
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool quit_ = false;
  std::string body_;
  std::thread thread_;
};

class DeadlineGuard : public Callback {
 public:
  // `clock` returns Unix seconds (unix_now unless a test fakes it). `eval_every` is
  // train.eval_every: a step that evaluates adds the longest evaluation seen to what must fit.
  DeadlineGuard(const CheckpointConfig& config, std::optional<Deadline> deadline, int64_t eval_every = 0,
                std::function<double()> clock = unix_now);
  ~DeadlineGuard() override;

  void on_step_end(const StepMetrics& m, Control& control) override;
  void on_checkpoint(const CheckpointEvent& e) override;
  void on_eval_end(const EvalMetrics& m, Control& control) override;

  // Finish decayed at the deadline instead of requeueing (checkpoint.deadline_action = "decay").
  void end_schedule_in_time(const WsdEnd& wsd) { wsd_ = wsd; }

  double save_s() const { return save_s_; }

 private:
  CheckpointConfig config_;
  std::optional<Deadline> deadline_;
  std::function<double()> clock_;
  std::unique_ptr<NoticePoller> poller_;
  double save_s_ = 0;         // longest save measured
  double step_s_ = 0;         // longest recent step
  double logged_step_s_ = 0;  // longest recent log step (on a GPU: with the window's backlog)
  int64_t eval_every_ = 0;
  double eval_s_ = 0;  // longest evaluation measured
  std::optional<WsdEnd> wsd_;
  bool end_requested_ = false;
};

}  // namespace frugal
