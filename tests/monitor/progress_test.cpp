// The progress display as a pipe sees it (tests run without a TTY): when lines come, what they say.
#include "frugal/monitor/progress.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "frugal/core/config.h"
#include "frugal/core/console.h"

namespace frugal::progress_test {
namespace {

// Feeds `steps` steps of `step_s` seconds each, log steps every `log_every`; returns stdout.
std::string piped(int64_t steps, double step_s, int64_t log_every, double interval_s) {
  Config c;
  c.train.steps = steps;
  c.train.log_every = log_every;
  RunInfo info;
  info.config = &c;
  info.item = "token";
  ProgressDisplay p(interval_s, [] { return 1795000000.0; });  // 2026-11-18T11:06:40Z
  Console::get().set_quiet(false);
  testing::internal::CaptureStdout();
  p.on_train_begin(info);
  Control control;
  StepMetrics m;
  m.total_steps = steps;
  for (int64_t s = 1; s <= steps; ++s) {
    m.step = s;
    m.elapsed_s = static_cast<double>(s) * step_s;
    m.logged = s % log_every == 0 || s == steps;
    m.loss = 2.0 - 0.001 * static_cast<double>(s);
    m.tokens_per_s = m.logged ? 1000 : m.tokens_per_s;
    p.on_step_end(m, control);
  }
  return testing::internal::GetCapturedStdout();
}

int count_lines(const std::string& s) { return static_cast<int>(std::count(s.begin(), s.end(), '\n')); }

// A long run piped to a log: not one line per 5% (for 100k steps, 5000 steps of silence), but one
// at the first log step, then at the first log step after every 30 s of training, then the last.
TEST(Progress, APipedLongRunPrintsOnATimeIntervalWithTimestamps) {
  // 20000 steps of 0.125 s (exact in binary): lines at 1.25 s (step 10), 31.25 s (step 250), ...,
  // 2491.25 s (83 intervals later), and the last step at 2500 s: 85 lines.
  const std::string out = piped(20000, 0.125, 10, 30);
  EXPECT_EQ(count_lines(out), 85) << out.substr(0, 400);
  EXPECT_EQ(out.rfind("2026-11-18T11:06:40Z step 10/20000  loss 1.9900  1.0k tok/s  elapsed 0:01", 0), 0u)
      << out.substr(0, 200);
  EXPECT_NE(out.find("Z step 250/20000  loss 1.7500"), std::string::npos);
  EXPECT_NE(out.find("Z step 20000/20000"), std::string::npos);
}

// A line is printed only where a loss has been measured: never "loss -" or "0 tok/s".
TEST(Progress, NoLineShowsALossOrARateNotYetMeasured) {
  const std::string out = piped(50, 1.0, 10, 0);
  EXPECT_EQ(out.find("loss -"), std::string::npos) << out;
  EXPECT_EQ(out.find(" 0 tok/s"), std::string::npos) << out;
  EXPECT_EQ(count_lines(out), 5) << out;  // steps 10, 20, 30, 40, 50
}

// Money keeps its significant digits below a cent ($0.00003 is not "$0.0000").
TEST(FormatUsd, TinyAmountsKeepThreeSignificantDigits) {
  EXPECT_EQ(format_usd(0), "$0.00");
  EXPECT_EQ(format_usd(0.00003), "$0.0000300");
  EXPECT_EQ(format_usd(0.0000312), "$0.0000312");
  EXPECT_EQ(format_usd(0.001), "$0.00100");
  EXPECT_EQ(format_usd(0.00123456), "$0.00123");
  EXPECT_EQ(format_usd(0.0312), "$0.0312");
  EXPECT_EQ(format_usd(0.5005), "$0.5005");
  EXPECT_EQ(format_usd(5), "$5.00");
  EXPECT_EQ(format_usd(1234.567), "$1234.57");
}

}  // namespace
}  // namespace frugal::progress_test
