// The trackers' scalars, TensorBoard's record framing and its writer's failures, and the MLflow
// URL check (the MLflow tracker against misbehaving servers: mlflow_test.cpp; the real tools read
// frugal's output in tests/interop/*_check.py).
#include "frugal/monitor/trackers.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <limits>
#include <string>

#include "frugal/core/config_values.h"
#include "frugal/core/errors.h"
#include "frugal/core/features.h"
#include "frugal/monitor/metrics_writer.h"
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

// A tracker never stops training: an event file that cannot be made (here tb/ is a file; a full
// disk fails the same way at a write) is one warning, and its points are counted as dropped. A
// session that logs nothing (a finished run resumed) makes no file at all.
TEST(TensorBoard, AFileThatCannotBeWrittenNeverStopsTrainingAndAQuietSessionMakesNone) {
  if (!have_feature("tensorboard")) GTEST_SKIP() << "this build has no TensorBoard support";
  test::TempDir dir;
  test::write_text(dir.file("tb"), "a file where the folder belongs");
  TensorBoardWriter broken(dir.file("tb"), "levers");
  RunInfo info;
  info.run_dir = dir.path();
  broken.on_train_begin(info);
  Control control;
  StepMetrics m;
  m.logged = true;
  for (int64_t step = 1; step <= 3; ++step) {
    m.step = step;
    EXPECT_NO_THROW(broken.on_step_end(m, control));
  }
  EXPECT_FALSE(control.should_stop());
  nlohmann::ordered_json summary;
  broken.add_to_summary(summary);
  EXPECT_EQ(summary["trackers"]["tensorboard"]["events"], 0);
  EXPECT_EQ(summary["trackers"]["tensorboard"]["dropped"], 3);
  broken.on_train_end(nlohmann::json::object());

  TensorBoardWriter quiet(dir.file("quiet/tb"), "levers");
  quiet.on_train_begin(info);
  quiet.on_train_end(nlohmann::json::object());
  EXPECT_FALSE(std::filesystem::exists(dir.file("quiet/tb")));
  EXPECT_EQ(quiet.path(), "");
}

TEST(TensorBoard, ABuildWithoutItRefusesByName) {
  if (have_feature("tensorboard")) GTEST_SKIP() << "this build has TensorBoard support";
  EXPECT_THROW(TensorBoardWriter("tb", ""), ConfigError);
}

}  // namespace
}  // namespace frugal::trackers_test
