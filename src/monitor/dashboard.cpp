// The live dashboard; see dashboard.h. Uses cpp-httplib (header-only, third_party/httplib).
#include "frugal/monitor/dashboard.h"

#include <httplib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "frugal/core/config_values.h"
#include "frugal/core/errors.h"
#include "frugal/monitor/metrics_writer.h"
#include "frugal/monitor/progress.h"
#include "frugal/monitor/report.h"

namespace frugal {

// httplib's server, with what a server that must never hold up its process needs: every open
// client connection is known, each one is cut after a deadline (a header line a second keeps
// httplib's per-read timeout happy forever), and shutdown closes them all at once instead of
// waiting for each client to finish.
// Set on the accepting thread for a connection the task queue turns away (below).
thread_local bool refuse_this_connection = false;

// httplib's pool with a bound on the connections waiting for a worker. Each waiting connection
// holds a descriptor: without a bound, a flood of idle connections took every descriptor the
// process may open, and the trainer's next checkpoint write failed. Past the bound a connection
// is closed at once, on the accepting thread, without reading from it.
class BoundedTaskQueue : public httplib::TaskQueue {
 public:
  BoundedTaskQueue(size_t workers, int max_waiting) : pool_(workers), max_waiting_(max_waiting) {}
  void enqueue(std::function<void()> fn) override {
    if (waiting_.load() >= max_waiting_) {
      refuse_this_connection = true;
      fn();  // GuardedHttpServer::process_and_close_socket closes it
      refuse_this_connection = false;
      return;
    }
    ++waiting_;
    pool_.enqueue([this, fn = std::move(fn)] {
      --waiting_;
      fn();
    });
  }
  void shutdown() override { pool_.shutdown(); }

 private:
  httplib::ThreadPool pool_;
  std::atomic<int> waiting_{0};
  const int max_waiting_;
};

class GuardedHttpServer : public httplib::Server {
 public:
  static constexpr int kWorkers = 32;
  static constexpr int kMaxWaiting = 64;  // so the dashboard holds at most ~100 descriptors
  static constexpr double kConnectionDeadlineS = 10;

  GuardedHttpServer() {
    new_task_queue = [] { return new BoundedTaskQueue(kWorkers, kMaxWaiting); };
    set_read_timeout(2, 0);
    set_write_timeout(2, 0);
    set_keep_alive_timeout(2);
    watchdog_ = std::thread([this] { watch(); });
  }
  ~GuardedHttpServer() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      quit_ = true;
    }
    cv_.notify_all();
    watchdog_.join();
  }

  // Cuts every open connection and refuses new ones; the workers then return at once.
  void drop_all_clients() {
    std::lock_guard<std::mutex> lock(mu_);
    closing_ = true;
    for (const auto& [sock, t0] : open_) ::shutdown(sock, SHUT_RDWR);
  }

 private:
  using Clock = std::chrono::steady_clock;

  bool process_and_close_socket(socket_t sock) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (closing_ || refuse_this_connection) {
        ::shutdown(sock, SHUT_RDWR);
        ::close(sock);
        return false;
      }
      open_[sock] = Clock::now();
    }
    const bool ok = httplib::detail::process_server_socket(
        svr_sock_, sock, keep_alive_max_count_, keep_alive_timeout_sec_, read_timeout_sec_, read_timeout_usec_,
        write_timeout_sec_, write_timeout_usec_,
        [this](httplib::Stream& strm, bool close_connection, bool& connection_closed) {
          return process_request(strm, close_connection, connection_closed, nullptr);
        });
    // Closed under the lock: the watchdog never shuts down a descriptor number reused meanwhile.
    std::lock_guard<std::mutex> lock(mu_);
    open_.erase(sock);
    ::shutdown(sock, SHUT_RDWR);
    ::close(sock);
    return ok;
  }

  void watch() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!quit_) {
      cv_.wait_for(lock, std::chrono::milliseconds(200));
      const auto now = Clock::now();
      for (const auto& [sock, t0] : open_)
        if (std::chrono::duration<double>(now - t0).count() > kConnectionDeadlineS) ::shutdown(sock, SHUT_RDWR);
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::map<socket_t, Clock::time_point> open_;
  bool closing_ = false, quit_ = false;
  std::thread watchdog_;
};

namespace {

std::string label_value(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '\\' || c == '"') o += '\\';
    if (c == '\n') {
      o += "\\n";
      continue;
    }
    o += c;
  }
  return o;
}

std::string prom_number(double x) {
  if (std::isnan(x)) return "NaN";
  if (std::isinf(x)) return x > 0 ? "+Inf" : "-Inf";
  return fmt::format("{}", x);
}

struct PromMetric {
  const char* key;   // field of the metrics line
  const char* name;  // Prometheus name
  const char* type;  // gauge or counter
  const char* help;
  double scale;
};

// Names follow Prometheus conventions: base units (seconds, bytes), _total for counters.
constexpr PromMetric kMetrics[] = {
    {"step", "frugal_step", "gauge", "Optimizer steps completed.", 1},
    {"total_steps", "frugal_total_steps", "gauge",
     "The step the run ends at (train.steps, or an end a deadline moved).", 1},
    {"loss", "frugal_loss", "gauge", "Mean training loss over the last log window (nats/token).", 1},
    {"val_loss", "frugal_val_loss", "gauge", "Latest validation loss (nats/token).", 1},
    {"lr", "frugal_learning_rate", "gauge", "Learning rate of the latest step.", 1},
    {"grad_norm", "frugal_grad_norm", "gauge", "Global gradient norm before clipping (latest log step).", 1},
    {"tokens_per_s", "frugal_tokens_per_second", "gauge", "Training tokens per second over the last log window.", 1},
    {"samples_per_s", "frugal_samples_per_second", "gauge", "Training sequences per second over the last log window.",
     1},
    {"mfu", "frugal_mfu_ratio", "gauge", "Model FLOPs utilisation: model FLOP/s over the peak FLOP/s (0..1).", 1},
    {"step_s", "frugal_step_seconds", "gauge", "Wall time of the latest logged step.", 1},
    {"elapsed_s", "frugal_elapsed_seconds", "gauge", "Wall time since the first step.", 1},
    {"tokens", "frugal_tokens_total", "counter", "Training tokens consumed.", 1},
    {"cost_usd", "frugal_cost_usd", "gauge", "Spend so far in US dollars ([budget]).", 1},
    {"rss_mb", "frugal_resident_memory_bytes", "gauge", "Resident memory of the process at the latest log step.", 1e6},
    {"loss_scale", "frugal_loss_scale", "gauge", "fp16 dynamic loss scale (1 when not scaling).", 1},
    {"skipped_steps", "frugal_skipped_steps_total", "counter", "Optimizer steps skipped for inf/NaN gradients.", 1},
    {"grad_noise_scale", "frugal_grad_noise_scale", "gauge",
     "Gradient noise scale B_simple in sequences (compare with the global batch).", 1},
};

constexpr const char* kPhases[][2] = {{"data_wait_s", "data_wait"}, {"forward_s", "forward"},
                                      {"backward_s", "backward"},   {"optimizer_s", "optimizer"},
                                      {"eval_s", "eval"},           {"checkpoint_s", "checkpoint"}};

}  // namespace

std::string prometheus_text(const nlohmann::json& latest, const std::string& run_name) {
  const std::string label = fmt::format("run=\"{}\"", label_value(run_name));
  std::string out;
  for (const auto& m : kMetrics) {
    if (!latest.contains(m.key) || !latest[m.key].is_number()) continue;
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n{}{{{}}} {}\n", m.name, m.help, m.name, m.type, m.name, label,
                       prom_number(latest[m.key].get<double>() * m.scale));
  }
  bool header = false;
  for (const auto& p : kPhases) {
    if (!latest.contains(p[0]) || !latest[p[0]].is_number()) continue;
    if (!header)
      out +=
          "# HELP frugal_phase_seconds Time of the latest logged step per phase; eval and checkpoint: time "
          "spent since the previous log step.\n# TYPE frugal_phase_seconds gauge\n";
    header = true;
    out += fmt::format("frugal_phase_seconds{{{},phase=\"{}\"}} {}\n", label, p[1],
                       prom_number(latest[p[0]].get<double>()));
  }
  const bool running = latest.value("running", true);
  out += fmt::format(
      "# HELP frugal_running 1 while the run trains, 0 once it has finished.\n"
      "# TYPE frugal_running gauge\nfrugal_running{{{}}} {}\n",
      label, running ? 1 : 0);
  return out;
}

Dashboard::Dashboard(const MonitorConfig& config, std::string run_name)
    : config_(config), run_name_(std::move(run_name)), server_(std::make_unique<GuardedHttpServer>()) {
  const HttpAddress addr = parse_http_address(config.http);
  // Listen on exactly the address the loopback rule was decided on: resolved once, here, so a
  // name cannot resolve to a loopback address for the check and to another one for the bind.
  const std::vector<std::string> addresses = resolve_host_addresses(addr.host);
  if (addresses.empty())
    throw ConfigError(
        fmt::format("monitor.http = \"{}\": the host \"{}\" does not resolve to an address; use "
                    "127.0.0.1 (or a name of this machine)",
                    config.http, addr.host));
  if (!config.allow_remote && !std::all_of(addresses.begin(), addresses.end(), is_loopback_address))
    throw ConfigError(
        fmt::format("monitor.http = \"{}\" resolves to {}, beyond this machine; use 127.0.0.1, or set "
                    "monitor.allow_remote = true and a monitor.token",
                    config.http, fmt::join(addresses, ", ")));
  host_ = addresses.front();
  snap_.run = {{"run_name", run_name_}, {"state", "starting"}};
  snap_.latest = nlohmann::json::object();

  server_->set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (authorised(req.get_header_value("Authorization"), req.get_param_value("token")))
      return httplib::Server::HandlerResponse::Unhandled;
    res.status = 401;
    res.set_header("WWW-Authenticate", "Bearer");
    res.set_content("401: this dashboard needs monitor.token (Authorization: Bearer TOKEN or ?token=TOKEN)\n",
                    "text/plain");
    return httplib::Server::HandlerResponse::Handled;
  });
  server_->Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    Snapshot s = snapshot();
    nlohmann::json latest = s.latest;
    latest["running"] = s.summary.is_null();
    res.set_content(prometheus_text(latest, run_name_), "text/plain; version=0.0.4; charset=utf-8");
  });
  server_->Get("/api/metrics", [this](const httplib::Request&, httplib::Response& res) {
    Snapshot s = snapshot();
    nlohmann::json lines = nlohmann::json::array();
    for (const auto& l : s.lines) lines.push_back(*l);
    nlohmann::json j = {{"run", s.run}, {"latest", s.latest}, {"lines", std::move(lines)}};
    if (!s.summary.is_null()) j["summary"] = s.summary;
    res.set_content(j.dump(), "application/json");
  });
  server_->Get("/", [this](const httplib::Request& req, httplib::Response& res) {
    Snapshot s = snapshot();
    nlohmann::json summary = s.summary;
    if (summary.is_null()) {  // the run is still going: the figures so far
      const auto& l = s.latest;
      summary = nlohmann::json::object();
      summary["run_name"] = run_name_;
      summary["steps"] = l.value("step", 0);
      summary["tokens"] = l.value("tokens", 0);
      summary["wall_s"] = l.value("elapsed_s", 0.0);
      for (const char* k : {"tokens_per_s", "samples_per_s", "mfu", "cost_usd", "grad_noise_scale"})
        if (l.contains(k)) summary[k] = l[k];
      for (const auto& [k, v] : s.run.items()) summary[k] = v;
      // The line's own total: an end moved before train.steps (checkpoint.deadline_action) shows.
      const int64_t step = l.value("step", int64_t{0}),
                    total = l.value("total_steps", s.run.value("total_steps", int64_t{0}));
      const double elapsed = l.value("elapsed_s", 0.0);
      // The time left at the pace so far (start-up and evaluations included).
      summary["stop_reason"] = fmt::format(
          "running, step {} of {}{}", step, total,
          step > 0 && total > step
              ? ", ETA " + format_duration(elapsed / static_cast<double>(step) * static_cast<double>(total - step))
              : "");
    }
    ReportPageOptions o;
    o.refresh_s = 2;
    if (req.has_param("token")) o.token_query = "?token=" + req.get_param_value("token");
    std::vector<nlohmann::json> lines;
    lines.reserve(s.lines.size());
    for (const auto& l : s.lines) lines.push_back(*l);
    res.set_content(render_report_html(summary, lines, o), "text/html; charset=utf-8");
  });

  // httplib's default also sets SO_REUSEPORT, which lets a second run bind the same port and
  // silently share it; SO_REUSEADDR alone still allows a quick restart.
  server_->set_socket_options([](socket_t sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  if (addr.port == 0) {
    port_ = server_->bind_to_any_port(host_);
  } else {
    port_ = server_->bind_to_port(host_, addr.port) ? addr.port : -1;
  }
  if (port_ <= 0)
    throw IoError(
        fmt::format("monitor.http = \"{}\": cannot listen there (address in use, or not an "
                    "address of this machine); choose another port, or 0 for any free one",
                    config.http));
  thread_ = std::thread([this] { server_->listen_after_bind(); });
  // stop() only stops a server that is already listening: wait for that, so that a Dashboard
  // destroyed right away (a failed start-up) cannot leave the thread listening forever.
  for (int i = 0; i < 5000 && !server_->is_running(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

Dashboard::~Dashboard() {
  server_->drop_all_clients();  // no client may delay the exit
  server_->stop();
  if (thread_.joinable()) thread_.join();
}

std::string Dashboard::url() const {
  const bool v6 = host_.find(':') != std::string::npos;
  return fmt::format("http://{}{}{}:{}/", v6 ? "[" : "", host_, v6 ? "]" : "", port_);
}

bool Dashboard::authorised(const std::string& auth_header, const std::string& query_token) const {
  if (config_.token.empty()) return true;
  auto same = [&](const std::string& given) {  // constant time in the token's length
    if (given.size() != config_.token.size()) return false;
    unsigned char diff = 0;
    for (size_t i = 0; i < given.size(); ++i) diff |= static_cast<unsigned char>(given[i] ^ config_.token[i]);
    return diff == 0;
  };
  const std::string bearer = "Bearer ";
  if (auth_header.rfind(bearer, 0) == 0 && same(auth_header.substr(bearer.size()))) return true;
  return !query_token.empty() && same(query_token);
}

Dashboard::Snapshot Dashboard::snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  return snap_;
}

void Dashboard::on_train_begin(const RunInfo& info) {
  std::lock_guard<std::mutex> lock(mu_);
  snap_.run["state"] = "running";
  snap_.run["total_steps"] = info.total_steps();
  snap_.run["params"] = info.params;
  snap_.run["global_batch"] = info.samples_per_step;
  snap_.run["peak_tflops"] = info.peak_flops / 1e12;
}

void Dashboard::on_step_end(const StepMetrics& m, Control&) {
  if (!m.logged) return;
  nlohmann::json line = step_json(m);  // built outside the lock
  std::lock_guard<std::mutex> lock(mu_);
  if (snap_.latest.contains("val_loss")) line["val_loss"] = snap_.latest["val_loss"];
  auto shared = std::make_shared<const nlohmann::json>(line);
  snap_.latest = std::move(line);
  snap_.lines.push_back(std::move(shared));
}

void Dashboard::on_eval_end(const EvalMetrics& m, Control&) {
  auto line = std::make_shared<const nlohmann::json>(eval_json(m));
  std::lock_guard<std::mutex> lock(mu_);
  snap_.latest["val_loss"] = (*line)["val_loss"];
  snap_.lines.push_back(std::move(line));
}

void Dashboard::on_train_end(const nlohmann::json& summary) {
  std::lock_guard<std::mutex> lock(mu_);
  snap_.summary = summary;
  snap_.run["state"] = "finished";
}

}  // namespace frugal
