// The MLflow tracker against servers that are down, hang, trickle, answer too much or choke on
// metrics, and across resumes and copies of a run dir (a real MLflow server reads frugal's
// output in tests/interop/mlflow_check.py).
#include "frugal/monitor/mlflow.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "frugal/ckpt/run_dir.h"
#include "frugal/core/atomic_file.h"
#include "frugal/core/config_values.h"
#include "frugal/monitor/metrics_writer.h"
#include "frugal/monitor/trackers.h"
#include "monitor/internal/mlflow_client.h"
#include "test_util.h"

namespace frugal::mlflow_test {
namespace {

// A tracker for a fresh run in `dir`, begun (its sender runs).
std::unique_ptr<MlflowTracker> started_tracker(const TrackConfig& t, const std::string& dir) {
  auto tracker = std::make_unique<MlflowTracker>(t, MlflowRunFacts{"run", dir, false, {{"train.lr", "0.1"}}, {}, {}});
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

// An HTTP server on a loopback port, written on raw sockets so that it can misbehave: each
// connection's request is read, then `reply(fd, request)` answers it on a thread of its own.
class RawServer {
 public:
  struct Request {
    std::string head, body;  // the request line and headers; the body
  };
  using Reply = std::function<void(int fd, const Request& req, const std::atomic<bool>& stop)>;

  explicit RawServer(Reply reply) : reply_(std::move(reply)) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(fd_, 64) != 0)
      throw std::runtime_error("cannot listen on a loopback port");
    socklen_t len = sizeof addr;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] { serve(); });
  }
  ~RawServer() {
    stop_ = true;
    ::shutdown(fd_, SHUT_RDWR);  // wakes accept()
    thread_.join();
    ::close(fd_);
    for (std::thread& t : connections_) t.join();
  }
  std::string url() const { return fmt::format("http://127.0.0.1:{}", port_); }

  // Sends all of `text`; false once the client has gone.
  static bool send_all(int fd, const std::string& text) {
    for (size_t at = 0; at < text.size();) {
      const ssize_t n = ::send(fd, text.data() + at, text.size() - at, MSG_NOSIGNAL);
      if (n <= 0) return false;
      at += static_cast<size_t>(n);
    }
    return true;
  }

 private:
  static Request read_request(int fd) {
    std::string data;
    char buf[4096];
    Request req;
    size_t end = std::string::npos;
    while ((end = data.find("\r\n\r\n")) == std::string::npos) {
      const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n <= 0) return req;
      data.append(buf, static_cast<size_t>(n));
    }
    req.head = data.substr(0, end);
    req.body = data.substr(end + 4);
    size_t length = 0;
    const size_t at = req.head.find("Content-Length: ");
    if (at != std::string::npos) length = std::stoul(req.head.substr(at + 16));
    while (req.body.size() < length) {
      const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n <= 0) break;
      req.body.append(buf, static_cast<size_t>(n));
    }
    return req;
  }
  void serve() {
    while (!stop_) {
      const int c = ::accept(fd_, nullptr, nullptr);
      if (c < 0) return;
      connections_.emplace_back([this, c] {
        const timeval tv{5, 0};  // a test's server never waits long on its client
        ::setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        reply_(c, read_request(c), stop_);
        ::close(c);
      });
    }
  }
  Reply reply_;
  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::vector<std::thread> connections_;
};

// Answers with headers, then the body (or more header lines) one byte every 0.1 s: 1,000 bytes,
// 100 s in all, each read well within any per-read timeout.
RawServer::Reply trickle(bool in_headers) {
  return [in_headers](int fd, const RawServer::Request&, const std::atomic<bool>& stop) {
    if (!RawServer::send_all(fd,
                             in_headers ? "HTTP/1.1 200 OK\r\n" : "HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n"))
      return;
    for (int i = 0; i < 1000 && !stop; ++i) {
      if (!RawServer::send_all(fd, in_headers ? "X" : " ")) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  };
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// httplib's timeouts are per read: a server that sends a byte now and then kept every request (and
// with it the end of the run) alive for as long as it trickled. Each request is bounded as a whole.
TEST(Mlflow, AServerThatTricklesItsAnswerIsCutAtTheDeadline) {
  for (const bool in_headers : {false, true}) {
    SCOPED_TRACE(in_headers ? "header lines trickled" : "a body trickled");
    RawServer server(trickle(in_headers));
    const detail::MlflowClient client(parse_http_url(server.url(), "track.mlflow_uri"));
    const auto start = std::chrono::steady_clock::now();
    try {
      client.get("experiments/get-by-name", {{"experiment_name", "e"}}, 0.5);
      ADD_FAILURE() << "a trickled answer was taken";
    } catch (const detail::MlflowError& e) {
      EXPECT_TRUE(e.retryable) << e.what();
      EXPECT_NE(std::string(e.what()).find("no complete answer within 0.5 s"), std::string::npos) << e.what();
    }
    EXPECT_LT(seconds_since(start), 10.0) << "the request outlived its deadline";

    // The whole run's end, too: its sender was kept in its first request before.
    test::TempDir dir;
    TrackConfig t;
    t.mlflow_uri = server.url();
    t.mlflow_timeout_s = 0.5;
    const std::unique_ptr<MlflowTracker> tracker = started_tracker(t, dir.path());
    Control control;
    StepMetrics m;
    m.logged = true;
    for (int64_t step = 1; step <= 5; ++step) {
      m.step = step;
      tracker->on_step_end(m, control);
    }
    nlohmann::ordered_json summary;
    const auto end = std::chrono::steady_clock::now();
    tracker->add_to_summary(summary);
    tracker->on_train_end(summary);
    EXPECT_LT(seconds_since(end), 10.0) << "the end of the run outlived track.mlflow_timeout_s";
    EXPECT_EQ(summary.at("trackers").at("mlflow").at("sent").get<int64_t>(), 0);
  }
}

// A reply larger than any of MLflow's (a 4 GB one grew the process by as much) is refused before it
// is read: by its Content-Length, or as it streams in without one.
TEST(Mlflow, AHugeReplyIsRefusedUnread) {
  for (const bool chunked : {false, true}) {
    SCOPED_TRACE(chunked ? "chunked" : "Content-Length");
    RawServer server([chunked](int fd, const RawServer::Request&, const std::atomic<bool>& stop) {
      const std::string mib(1 << 20, 'x');
      if (!RawServer::send_all(fd, chunked ? "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                                           : "HTTP/1.1 200 OK\r\nContent-Length: 4000000000\r\n\r\n"))
        return;
      for (int i = 0; i < 3800 && !stop; ++i)
        if (!RawServer::send_all(fd, chunked ? "100000\r\n" + mib + "\r\n" : mib)) return;
    });
    const detail::MlflowClient client(parse_http_url(server.url(), "track.mlflow_uri"));
    try {
      client.post("runs/create", {{"experiment_id", "1"}}, 60);
      ADD_FAILURE() << "a huge reply was taken";
    } catch (const detail::MlflowError& e) {
      EXPECT_FALSE(e.retryable) << e.what();
      EXPECT_NE(std::string(e.what()).find("POST /api/2.0/mlflow/runs/create: the reply is larger than 16 MiB"),
                std::string::npos)
          << e.what();
    }
  }
}

// A minimal MLflow server: records each call ("runs/update FINISHED" for a status) and answers
// it; with hold_metrics, a log-batch of metrics is never answered (a server that chokes on it).
struct FakeMlflow {
  explicit FakeMlflow(bool hold)
      : hold_metrics(hold), server([this](int fd, const RawServer::Request& req, const std::atomic<bool>& stop) {
          const size_t at = req.head.find("/api/2.0/mlflow/");
          const std::string api =
              at == std::string::npos ? "" : req.head.substr(at + 16, req.head.find(' ', at) - at - 16);
          std::string call = api.substr(0, api.find('?')), body = "{}";
          if (call == "experiments/get-by-name") {
            body = R"({"experiment": {"experiment_id": "1"}})";
          } else if (call == "runs/create" || call == "runs/get") {
            std::lock_guard<std::mutex> lock(mu);
            const std::string id = call == "runs/create" ? fmt::format("r{}", ++runs) : "r1";
            body = fmt::format(R"({{"run": {{"info": {{"run_id": "{}", "experiment_id": "1", "artifact_uri": )"
                               R"("s3://elsewhere"}}, "data": {{"tags": []}}}}}})",
                               id);
          } else if (call == "runs/update") {
            call += " " + nlohmann::json::parse(req.body).at("status").get<std::string>();
          } else if (req.body.find("\"metrics\"") != std::string::npos) {
            call += " metrics";
            if (!hold_metrics) {
              std::lock_guard<std::mutex> lock(mu);
              const nlohmann::json sent =
                  nlohmann::json::parse(req.body);  // named: a range-for over a temporary's member dangles
              for (const auto& p : sent.at("metrics")) metric_steps.insert(p.at("step").get<int64_t>());
            }
            if (hold_metrics) {
              {
                std::lock_guard<std::mutex> lock(mu);
                calls.push_back(call);
              }
              while (!stop) std::this_thread::sleep_for(std::chrono::milliseconds(20));
              return;
            }
          }
          {
            std::lock_guard<std::mutex> lock(mu);
            calls.push_back(call);
          }
          RawServer::send_all(fd, fmt::format("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
                                              "{}\r\nConnection: close\r\n\r\n{}",
                                              body.size(), body));
        }) {}
  std::vector<std::string> take_calls() {
    std::lock_guard<std::mutex> lock(mu);
    return std::exchange(calls, {});
  }
  bool hold_metrics;
  std::mutex mu;
  std::vector<std::string> calls;
  std::set<int64_t> metric_steps;  // the steps of the metric points it took
  int runs = 0;
  RawServer server;  // last: it answers on its threads until it is gone
};

std::vector<std::string> with_prefix(const std::vector<std::string>& calls, const std::string& prefix) {
  std::vector<std::string> out;
  for (const std::string& c : calls)
    if (c.rfind(prefix, 0) == 0) out.push_back(c);
  return out;
}

// The run's end records the status before the queue, so a run is closed though its queue never
// drains; a stop signal during the end cuts it short; a preempted run's end takes half a second.
TEST(Mlflow, TheRunsStatusComesFirstAndAStopSignalCutsTheEndShort) {
  FakeMlflow mlflow(/*hold_metrics=*/true);
  for (const std::string kind : {"completed", "preempted"}) {
    SCOPED_TRACE(kind);
    mlflow.take_calls();
    test::TempDir dir;
    TrackConfig t;
    t.mlflow_uri = mlflow.server.url();
    t.mlflow_timeout_s = 60;  // the end would wait a minute for the queue
    std::atomic<bool> signal{kind == "preempted"};
    MlflowRunFacts facts{"run", dir.path(), false, {}, {}, {}};
    facts.stop_requested = [&signal] { return signal.load(); };
    MlflowTracker tracker(t, facts);
    RunInfo info;
    info.run_dir = dir.path();
    tracker.on_train_begin(info);
    Control control;
    StepMetrics m;
    m.logged = true;
    m.step = 1;
    tracker.on_step_end(m, control);
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // the batch is sent, and held
    // A completed run's end is signalled 2 s in: it ends then, not a minute later.
    std::thread signaller;
    if (kind == "completed")
      signaller = std::thread([&signal] {
        std::this_thread::sleep_for(std::chrono::seconds(2));
        signal = true;
      });
    nlohmann::ordered_json summary = {{"stop_kind", kind}};
    const auto end = std::chrono::steady_clock::now();
    tracker.add_to_summary(summary);
    tracker.on_train_end(summary);
    const double held = seconds_since(end);
    if (signaller.joinable()) signaller.join();
    EXPECT_LT(held, 30.0) << "the end waited out track.mlflow_timeout_s";
    EXPECT_EQ(with_prefix(mlflow.take_calls(), "runs/update"),
              std::vector<std::string>{kind == "preempted" ? "runs/update KILLED" : "runs/update FINISHED"});
  }
}

// mlflow.json names its run dir and experiment: a resume continues the MLflow run; a copy of the
// run dir, or a changed track.mlflow_experiment, makes a new one and leaves the original's alone.
TEST(Mlflow, ACopiedRunDirOrAnotherExperimentMakesANewMlflowRun) {
  FakeMlflow mlflow(/*hold_metrics=*/false);
  test::TempDir root;
  const std::string original = root.path() + "/run", copy = root.path() + "/copy";
  std::filesystem::create_directories(original);
  auto session = [&](const std::string& dir, const std::string& experiment, bool resuming) {
    TrackConfig t;
    t.mlflow_uri = mlflow.server.url();
    t.mlflow_experiment = experiment;
    t.mlflow_timeout_s = 10;
    MlflowTracker tracker(t, MlflowRunFacts{"run", dir, resuming, {}, {}, {}});
    RunInfo info;
    info.run_dir = dir;
    tracker.on_train_begin(info);
    nlohmann::ordered_json summary = {{"stop_kind", "completed"}};
    tracker.add_to_summary(summary);
    tracker.on_train_end(summary);
    return summary.at("trackers").at("mlflow").at("run_id").get<std::string>();
  };
  EXPECT_EQ(session(original, "e", false), "r1");
  EXPECT_EQ(session(original, "e", true), "r1");  // a resume continues it
  EXPECT_EQ(with_prefix(mlflow.take_calls(), "runs/"),
            (std::vector<std::string>{"runs/create", "runs/update FINISHED", "runs/get", "runs/update RUNNING",
                                      "runs/set-tag", "runs/update FINISHED"}));
  std::filesystem::copy(original, copy);
  EXPECT_EQ(session(copy, "e", true), "r2");
  EXPECT_EQ(session(original, "other", true), "r3");
  EXPECT_EQ(with_prefix(mlflow.take_calls(), "runs/get"), std::vector<std::string>{})
      << "the original's MLflow run was looked up from elsewhere";
  const auto kept = nlohmann::json::parse(test::read_text(RunDir(copy).mlflow()));
  EXPECT_EQ(kept.at("run_id"), "r2");
  EXPECT_EQ(kept.at("run_dir"), std::filesystem::weakly_canonical(copy).string());
}

// A SIGKILL leaves points queued, unsent, at steps up to the checkpoint; the resumed session logs
// only the steps after it. mlflow.json says through which step the server has every point, and
// the resume sends the rest of them from metrics.jsonl; the record then follows what is sent.
TEST(Mlflow, PointsTheKilledSessionHadNotSentAreSentOnResume) {
  FakeMlflow mlflow(/*hold_metrics=*/false);
  test::TempDir dir;
  TrackConfig t;
  t.mlflow_uri = mlflow.server.url();
  t.mlflow_timeout_s = 10;
  const RunDir run(dir.path());
  write_file_atomic(run.mlflow(), nlohmann::json{{"uri", t.mlflow_uri},
                                                 {"experiment", t.mlflow_experiment},
                                                 {"experiment_id", "1"},
                                                 {"run_id", "r1"},
                                                 {"run_dir", std::filesystem::weakly_canonical(dir.path()).string()},
                                                 {"sent_through_step", 4}}
                                      .dump());
  StepMetrics m;
  m.logged = true;
  std::string lines;
  for (int64_t step = 1; step <= 10; ++step) {  // the killed session logged 10 steps; its checkpoint is at 8
    m.step = step;
    lines += step_json(m).dump() + "\n";
  }
  write_file_atomic(run.metrics(), lines);
  MlflowTracker tracker(t, MlflowRunFacts{"run", dir.path(), /*resuming=*/true, {}, {}, {}});
  RunInfo info;
  info.run_dir = dir.path();
  info.start_step = 8;
  tracker.on_train_begin(info);
  Control control;
  for (int64_t step = 9; step <= 12; ++step) {
    m.step = step;
    tracker.on_step_end(m, control);
  }
  nlohmann::ordered_json summary = {{"stop_kind", "completed"}};
  tracker.add_to_summary(summary);
  tracker.on_train_end(summary);
  EXPECT_EQ(summary.at("trackers").at("mlflow").at("run_id"), "r1");
  {
    std::lock_guard<std::mutex> lock(mlflow.mu);
    std::string calls;
    for (const std::string& c : mlflow.calls) calls += c + "; ";
    EXPECT_EQ(mlflow.metric_steps, (std::set<int64_t>{5, 6, 7, 8, 9, 10, 11, 12})) << calls;
  }
  EXPECT_EQ(nlohmann::json::parse(test::read_text(run.mlflow())).at("sent_through_step"), 12);
}

}  // namespace
}  // namespace frugal::mlflow_test
