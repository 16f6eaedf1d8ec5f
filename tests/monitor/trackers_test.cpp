// The trackers' scalars, TensorBoard's record framing, the MLflow URL check, and an MLflow tracker
// whose server is down (the real tools read frugal's output in tests/interop/*_check.py).
#include "frugal/monitor/trackers.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <limits>
#include <memory>

#include "frugal/core/config_values.h"
#include "frugal/core/errors.h"
#include "frugal/core/features.h"
#include "frugal/monitor/metrics_writer.h"
#include "frugal/monitor/mlflow.h"
#include "frugal/monitor/tensorboard.h"
#include "test_util.h"

namespace frugal::trackers_test {
namespace {

std::string hex(const std::string& bytes) {
  std::string out;
  for (unsigned char c : bytes) out += fmt::format("{:02x}", c);
  return out;
}

// Values from TensorBoard's own Python implementation (tensorboard.compat.tensorflow_stub):
// crc32c(b"123456789"), masked_crc32c of it, and the record of b"hello".
TEST(TensorBoard, Crc32cAndTheRecordFramingAreTensorBoards) {
  if (!have_feature("tensorboard")) GTEST_SKIP() << "this build has no TensorBoard support";
  EXPECT_EQ(crc32c("123456789"), 0xe3069283u);
  EXPECT_EQ(masked_crc32c(crc32c("123456789")), 0xc78ab0e5u);
  EXPECT_EQ(hex(tf_record("hello")), "0500000000000000eab2043e68656c6c6fbb1f1c19");
}

TEST(Trackers, EveryNumberOfAMetricsLineIsAScalarAndANullIsNone) {
  StepMetrics m;
  m.step = 7;
  m.logged = true;
  m.loss = 2.5;
  m.lr = 1e-3;
  m.grad_norm = std::numeric_limits<double>::quiet_NaN();  // null in metrics.jsonl
  m.kg_co2 = 0.25;
  m.user = {{"acc", 0.5}};
  const std::vector<TrackedScalar> s = tracked_scalars(step_json(m));
  std::map<std::string, double> by_tag;
  for (const auto& t : s) by_tag[t.tag] = t.value;
  EXPECT_EQ(by_tag.at("train/loss"), 2.5);
  EXPECT_EQ(by_tag.at("train/lr"), 1e-3);
  EXPECT_EQ(by_tag.at("train/kg_co2"), 0.25);
  EXPECT_EQ(by_tag.at("user/acc"), 0.5);
  EXPECT_EQ(by_tag.count("train/grad_norm"), 0u);
  EXPECT_EQ(by_tag.count("train/step"), 0u);
  EXPECT_EQ(by_tag.count("train/total_steps"), 0u);
  // Every number of the line but step and total_steps, and every user scalar.
  size_t numbers = 0;
  const nlohmann::ordered_json line = step_json(m);
  for (const auto& [k, v] : line.items()) numbers += v.is_number() && k != "step" && k != "total_steps";
  EXPECT_EQ(s.size(), numbers + 1);

  EvalMetrics e;
  e.step = 7;
  e.val_loss = 1.5;
  e.best_val_loss = 1.25;
  e.task = {{"accuracy", 0.75}};
  std::map<std::string, double> eval;
  for (const auto& t : tracked_scalars(eval_json(e))) eval[t.tag] = t.value;
  EXPECT_EQ(eval.at("eval/val_loss"), 1.5);
  EXPECT_EQ(eval.at("eval/best_val_loss"), 1.25);
  EXPECT_EQ(eval.at("task/accuracy"), 0.75);
  EXPECT_EQ(eval.count("train/val_loss"), 0u);
}

TEST(Trackers, TheMlflowUrlIsPlainHttpWithoutCredentials) {
  HttpUrl u = parse_http_url("http://127.0.0.1:5000", "track.mlflow_uri");
  EXPECT_EQ(u.host, "127.0.0.1");
  EXPECT_EQ(u.port, 5000);
  EXPECT_EQ(u.base_path, "");
  u = parse_http_url("http://tracker.example/mlflow/", "k");
  EXPECT_EQ(u.port, 80);
  EXPECT_EQ(u.base_path, "/mlflow");
  u = parse_http_url("http://[::1]:8080", "k");
  EXPECT_EQ(u.host, "::1");
  EXPECT_EQ(u.origin(), "http://[::1]:8080");
  auto refused = [](const std::string& text, const std::string& why) {
    try {
      parse_http_url(text, "track.mlflow_uri");
      ADD_FAILURE() << text << " was accepted";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("track.mlflow_uri = \"" + text + "\""), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
    }
  };
  refused("https://host:443", "https is not supported");
  refused("http://me:secret@host:5000", "MLFLOW_TRACKING_USERNAME");
  refused("host:5000", "not an http:// URL");
  refused("http://host:5000/?x=1", "query");
  refused("http://:5000", "no host");
  refused("http://host:99999", "port");
  refused("http://host:abc", "port");
}

// A tracker for a fresh run in `dir`, begun (its sender runs).
std::unique_ptr<MlflowTracker> started_tracker(const TrackConfig& t, const std::string& dir) {
  auto tracker = std::make_unique<MlflowTracker>(t, MlflowRunFacts{"run", dir, false, {{"train.lr", "0.1"}}, {}});
  RunInfo info;
  info.run_dir = dir;
  tracker->on_train_begin(info);
  return tracker;
}

// Nothing listens on the port: training goes on (no call waits on the server), and the end of
// the run gives up after track.mlflow_timeout_s and counts every point as dropped.
TEST(Mlflow, AServerThatIsDownNeitherStopsNorHoldsTheRunAndWhatWasNotSentIsCounted) {
  test::TempDir dir;
  TrackConfig t;
  t.mlflow_uri = "http://127.0.0.1:9";  // discard: nothing answers HTTP there
  t.mlflow_timeout_s = 0.5;
  t.mlflow_queue = 100;
  const std::unique_ptr<MlflowTracker> tracker = started_tracker(t, dir.path());
  Control control;
  StepMetrics m;
  m.logged = true;
  size_t points = 0;
  const auto start = std::chrono::steady_clock::now();
  for (int64_t step = 1; step <= 20; ++step) {
    m.step = step;
    m.loss = 1.0 / static_cast<double>(step);
    tracker->on_step_end(m, control);
    points += tracked_scalars(step_json(m)).size();
  }
  const double feed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(feed_s, 0.5) << "the trainer thread waited on the server";
  EXPECT_FALSE(control.should_stop());
  ASSERT_GT(points, 100u);  // more than the queue holds
  nlohmann::ordered_json summary;
  const auto end = std::chrono::steady_clock::now();
  tracker->add_to_summary(summary);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - end).count(), 5.0);
  const auto& s = summary.at("trackers").at("mlflow");
  EXPECT_EQ(s.at("sent").get<int64_t>(), 0);
  EXPECT_EQ(s.at("dropped").get<int64_t>(), static_cast<int64_t>(points));
  EXPECT_EQ(s.at("run_id").get<std::string>(), "");
  tracker->on_train_end(nlohmann::json::object());  // no run was made: nothing to close
}

// A server that takes the connection and never answers (a hung proxy, a stalled server): every
// request gives up after track.mlflow_timeout_s, the trainer thread never waits on one, and the end
// of the run is held for about that long, not more.
TEST(Mlflow, AServerThatNeverAnswersHoldsTheRunsEndForItsTimeoutAndNoLonger) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::listen(fd, 64), 0);  // connections queue in the backlog; none is ever accepted
  socklen_t len = sizeof addr;
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  test::TempDir dir;
  TrackConfig t;
  t.mlflow_uri = fmt::format("http://127.0.0.1:{}", ntohs(addr.sin_port));
  t.mlflow_timeout_s = 0.5;
  const std::unique_ptr<MlflowTracker> tracker = started_tracker(t, dir.path());
  Control control;
  StepMetrics m;
  m.logged = true;
  const auto start = std::chrono::steady_clock::now();
  for (int64_t step = 1; step <= 50; ++step) {
    m.step = step;
    tracker->on_step_end(m, control);
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 0.25)
      << "the trainer thread waited on the server";
  nlohmann::ordered_json summary;
  const auto end = std::chrono::steady_clock::now();
  tracker->add_to_summary(summary);
  const double held = std::chrono::duration<double>(std::chrono::steady_clock::now() - end).count();
  EXPECT_LT(held, 2.5) << "the end of the run waited past its timeout";
  EXPECT_EQ(summary.at("trackers").at("mlflow").at("sent").get<int64_t>(), 0);
  EXPECT_GT(summary.at("trackers").at("mlflow").at("dropped").get<int64_t>(), 0);
  ::close(fd);
}

TEST(TensorBoard, ABuildWithoutItRefusesByName) {
  if (have_feature("tensorboard")) GTEST_SKIP() << "this build has TensorBoard support";
  EXPECT_THROW(TensorBoardWriter("tb", ""), ConfigError);
}

}  // namespace
}  // namespace frugal::trackers_test
