// The live dashboard ([monitor] http, docs/observability.md). A small HTTP server on its own
// thread serves, for the run in progress:
//   /              the live report page (the same charts as report.html; refreshes itself)
//   /metrics       the latest figures in the Prometheus text format (frugal_* gauges/counters)
//   /api/metrics   JSON: {"run": ..., "latest": <last step line>, "lines": [every metrics line]}
//
// The training thread only copies the new metrics line into a snapshot under a mutex at log
// steps (and at each evaluation); requests render from a copy of that snapshot, so serving never
// waits on, or slows, the step.
//
// Security: loopback addresses only unless monitor.allow_remote = true, which requires
// monitor.token (validate_config enforces both). With a token set, every request must carry it
// ("Authorization: Bearer TOKEN" or "?token=TOKEN"), else 401.
//
// Clients never hold the run: a connection may stay idle 2 s between reads and lives 10 s at
// most (keep-alive included); 32 connections are served at once, further ones wait for a free
// worker. Shutting down closes every open connection at once, so a slow or stalled client cannot
// delay the exit (a preempted run must exit 75 within the scheduler's grace period).
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "frugal/core/callback.h"
#include "frugal/core/config.h"
#include "frugal/core/config_values.h"

namespace frugal {

class GuardedHttpServer;  // dashboard.cpp: httplib's server with connection limits

// The Prometheus text exposition of a metrics line (the `latest` object of /api/metrics) and the
// run's totals; every metric has HELP and TYPE lines and a run="NAME" label.
std::string prometheus_text(const nlohmann::json& latest, const std::string& run_name);

class Dashboard : public Callback {
 public:
  // Binds and starts serving at once (so the port is known before training starts). Throws
  // IoError when the address cannot be bound.
  Dashboard(const MonitorConfig& config, std::string run_name);
  ~Dashboard() override;  // stops the server and joins its thread
  Dashboard(const Dashboard&) = delete;
  Dashboard& operator=(const Dashboard&) = delete;

  int port() const { return port_; }
  std::string url() const;  // "http://HOST:PORT/"

  void on_train_begin(const RunInfo& info) override;
  void on_step_end(const StepMetrics& m, Control& control) override;
  void on_eval_end(const EvalMetrics& m, Control& control) override;
  void on_train_end(const nlohmann::json& summary) override;

 private:
  struct Snapshot {
    nlohmann::json run;     // name, total steps, state ("running" / "finished")
    nlohmann::json latest;  // the newest step line
    // Lines are immutable once added, so a snapshot copies pointers, not the objects: the
    // trainer holds the lock for a pointer copy per line at most.
    std::vector<std::shared_ptr<const nlohmann::json>> lines;
    nlohmann::json summary;  // set at the end
  };
  Snapshot snapshot() const;
  bool authorised(const std::string& auth_header, const std::string& query_token) const;

  MonitorConfig config_;
  std::string run_name_;
  std::string host_;
  int port_ = 0;
  std::unique_ptr<GuardedHttpServer> server_;
  std::thread thread_;
  mutable std::mutex mu_;
  Snapshot snap_;
};

}  // namespace frugal
