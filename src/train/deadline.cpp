// Deadline-aware stops; see deadline.h.
#include "frugal/train/deadline.h"

#include <httplib.h>

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <iomanip>
#include <sstream>

#include "frugal/core/errors.h"
#include "frugal/train/lr_schedule.h"

namespace frugal {

namespace {
std::optional<double> parse_unix_seconds(const std::string& t) {
  if (t.empty() || t.size() > 15 || t.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  return static_cast<double>(std::stoll(t));
}

std::optional<double> parse_iso_utc(const std::string& t) {
  std::tm tm{};
  std::istringstream in(t);
  in >> std::get_time(&tm, "%Y-%m-%dT%H:%M:%S");
  if (in.fail()) return std::nullopt;
  std::string rest;
  in >> rest;
  if (rest != "Z" && rest != "+00:00") return std::nullopt;
  return static_cast<double>(::timegm(&tm));
}
}  // namespace

std::optional<Deadline> resolve_deadline(const std::string& text, const std::function<const char*(const char*)>& env) {
  auto get = [&](const char* name) -> const char* { return env ? env(name) : std::getenv(name); };
  if (text.empty()) return std::nullopt;
  if (text == "auto" || text == "slurm") {
    const char* end = get("SLURM_JOB_END_TIME");
    if (end && *end) {
      if (auto s = parse_unix_seconds(end)) return Deadline{*s, "SLURM_JOB_END_TIME"};
      throw ConfigError(
          fmt::format("SLURM_JOB_END_TIME = \"{}\" is not Unix seconds (checkpoint.deadline = \"{}\")", end, text));
    }
    if (text == "slurm")
      throw ConfigError(
          "checkpoint.deadline = \"slurm\" but SLURM_JOB_END_TIME is not set (not in a Slurm job, or "
          "a Slurm older than 22.05); use \"auto\", or give the end time as \"2026-11-24T18:00:00Z\"");
    return std::nullopt;
  }
  if (auto s = parse_unix_seconds(text)) return Deadline{*s, "checkpoint.deadline"};
  if (auto s = parse_iso_utc(text)) return Deadline{*s, "checkpoint.deadline"};
  throw ConfigError(
      fmt::format("checkpoint.deadline = \"{}\" is not a time; write \"\" (none), \"auto\", \"slurm\", "
                  "a UTC time like \"2026-11-24T18:00:00Z\", or Unix seconds",
                  text));
}

bool must_stop_for_deadline(double now_unix, double deadline_unix, double step_s, double save_s, double margin_s) {
  return now_unix + step_s + save_s + margin_s >= deadline_unix;
}

int64_t steps_before_deadline(double now_unix, double deadline_unix, double step_s, double eval_s, int64_t eval_every,
                              double save_s, double margin_s) {
  const double left = deadline_unix - now_unix - eval_s - save_s - margin_s;
  const double per_step = step_s + (eval_every > 0 ? eval_s / static_cast<double>(eval_every) : 0.0);
  if (left <= 0 || per_step <= 0) return 0;
  // Strictly before, as must_stop_for_deadline counts: n steps with n x per_step < left.
  return std::max<int64_t>(0, static_cast<int64_t>(std::ceil(left / per_step)) - 1);
}

// ---- notice poller -----------------------------------------------------------------------------

NoticePoller::NoticePoller(const std::string& url, double poll_s) : poll_s_(std::max(poll_s, 0.05)) {
  const std::string scheme = "http://";
  if (url.rfind(scheme, 0) != 0)
    throw ConfigError(
        fmt::format("checkpoint.notice_url = \"{}\" must start with http:// (the cloud metadata "
                    "endpoints are plain HTTP on a link-local address)",
                    url));
  const size_t slash = url.find('/', scheme.size());
  const std::string authority =
      url.substr(scheme.size(), slash == std::string::npos ? std::string::npos : slash - scheme.size());
  const size_t colon = authority.rfind(':');
  const std::string host = authority.substr(0, colon);
  const std::string port = colon == std::string::npos ? "80" : authority.substr(colon + 1);
  const bool port_ok = !port.empty() && port.size() <= 5 && port.find_first_not_of("0123456789") == std::string::npos &&
                       std::stoi(port) >= 1 && std::stoi(port) <= 65535;
  if (host.empty() || host.find_first_of(" @?#[]") != std::string::npos || !port_ok)
    throw ConfigError(
        fmt::format("checkpoint.notice_url = \"{}\" is not a URL frugal can poll: it needs a host "
                    "and, if given, a port from 1 to 65535 (http://HOST[:PORT]/PATH)",
                    url));
  scheme_host_ = url.substr(0, slash);
  path_ = slash == std::string::npos ? "/" : url.substr(slash);
  thread_ = std::thread([this] { run(); });
}

NoticePoller::~NoticePoller() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    quit_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

std::string NoticePoller::notice() const {
  std::lock_guard<std::mutex> lock(mu_);
  return body_;
}

void NoticePoller::run() {
  try {
    poll();
  } catch (const std::exception& e) {
    // The training goes on without notices rather than ending on a thread's uncaught exception.
    fmt::print(stderr, "warning: checkpoint.notice_url: polling stopped: {}\n", e.what());
  }
}

void NoticePoller::poll() {
  httplib::Client client(scheme_host_);
  client.set_connection_timeout(1, 0);
  client.set_read_timeout(1, 0);
  // GCP wants Metadata-Flavor; AWS instances that require IMDSv2 answer 401 until a session token
  // (PUT /latest/api/token) comes with each request. The token is fetched on the first 401 and
  // again whenever one comes back (it expired).
  std::string token;
  std::unique_lock<std::mutex> lock(mu_);
  while (!quit_) {
    lock.unlock();
    httplib::Headers headers = {{"Metadata-Flavor", "Google"}};
    if (!token.empty()) headers.emplace("X-aws-ec2-metadata-token", token);
    auto r = client.Get(path_.c_str(), headers);
    if (r && r->status == 401) {
      const httplib::Headers ttl = {{"X-aws-ec2-metadata-token-ttl-seconds", "21600"}};
      auto t = client.Put("/latest/api/token", ttl, std::string(), "text/plain");
      token = t && t->status == 200 ? t->body : "";
      if (!token.empty()) {
        headers.emplace("X-aws-ec2-metadata-token", token);
        r = client.Get(path_.c_str(), headers);
      }
    }
    std::string body;
    bool notice = false;
    if (r && r->status >= 200 && r->status < 300) {
      body = r->body;
      body.erase(body.find_last_not_of(" \t\r\n") + 1);
      std::string lower = body;
      std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
      notice = !body.empty() && lower != "false";
    }
    lock.lock();
    if (notice) {
      body_ = body.substr(0, 300);
      noticed_ = true;
      return;  // one notice is all it takes
    }
    cv_.wait_for(lock, std::chrono::duration<double>(poll_s_), [&] { return quit_; });
  }
}

// ---- the callback ------------------------------------------------------------------------------

DeadlineGuard::DeadlineGuard(const CheckpointConfig& config, std::optional<Deadline> deadline, int64_t eval_every,
                             std::function<double()> clock)
    : config_(config), deadline_(std::move(deadline)), clock_(std::move(clock)), eval_every_(eval_every) {
  if (!config_.notice_url.empty()) poller_ = std::make_unique<NoticePoller>(config_.notice_url, config_.notice_poll_s);
}

DeadlineGuard::~DeadlineGuard() = default;

void DeadlineGuard::on_checkpoint(const CheckpointEvent& e) {
  save_s_ = std::max({save_s_, e.stall_s, e.last_write_s});
}

void DeadlineGuard::on_eval_end(const EvalMetrics& m, Control&) { eval_s_ = std::max(eval_s_, m.eval_s); }

void DeadlineGuard::on_step_end(const StepMetrics& m, Control& control) {
  // The step time may vary (evaluations, data stalls): the longest of the recent ones, decaying.
  step_s_ = std::max(m.step_s, 0.9 * step_s_);
  // On a GPU the steps between log steps do not wait for the device: the host's clock runs ahead
  // of the device's work, and a stop (whose save first waits for the queued steps) pays that
  // backlog. A log step's step_s holds a window's backlog: kept for the whole next window,
  // decaying per log step only.
  if (m.logged) logged_step_s_ = std::max(m.step_s, 0.9 * logged_step_s_);
  if (poller_ && poller_->noticed()) {
    control.request_stop(fmt::format("preemption notice from {}: {}", config_.notice_url, poller_->notice()),
                         StopKind::kPreempted);
    return;
  }
  if (!deadline_ || m.step >= m.total_steps) return;
  const double now = clock_();
  if (wsd_ && !end_requested_) {
    const int64_t fit = steps_before_deadline(now, deadline_->unix_s, std::max(step_s_, logged_step_s_), eval_s_,
                                              eval_every_, save_s_, config_.deadline_margin_s);
    const int64_t end = m.step + fit;
    if (fit > 0 && end < m.total_steps && wsd_decay_start(end, wsd_->warmup_steps, wsd_->decay_fraction) <= m.step) {
      end_requested_ = true;
      control.request_end_at(
          end,
          fmt::format("deadline ({}) in {:.0f} s: {} more steps fit ({:.2f} s each, a save of {:.1f} s, the margin "
                      "{:.0f} s), so the decay ends at step {} instead of train.steps = {} "
                      "(checkpoint.deadline_action = \"decay\")",
                      deadline_->source, deadline_->unix_s - now, fit, std::max(step_s_, logged_step_s_), save_s_,
                      config_.deadline_margin_s, end, m.total_steps));
    }
  }
  // Going on means this step's evaluation (when it has one) and one more step before the save; a
  // stop now defers the evaluation to the resumed run.
  const bool evaluates = eval_every_ > 0 && m.step % eval_every_ == 0;
  const double next_s = std::max(step_s_, logged_step_s_) + (evaluates ? eval_s_ : 0);
  if (must_stop_for_deadline(now, deadline_->unix_s, next_s, save_s_, config_.deadline_margin_s))
    control.request_stop(fmt::format("deadline ({}) in {:.0f} s: {} ({:.1f} s), a checkpoint ({:.1f} s) and the margin "
                                     "(checkpoint.deadline_margin_s = {:.0f}) would not fit",
                                     deadline_->source, deadline_->unix_s - now,
                                     evaluates ? "an evaluation and one more step" : "one more step", next_s, save_s_,
                                     config_.deadline_margin_s),
                         StopKind::kPreempted);
}

}  // namespace frugal
