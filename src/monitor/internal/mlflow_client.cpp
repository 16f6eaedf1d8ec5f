// MLflow's REST API over plain HTTP; see mlflow_client.h.
#include "monitor/internal/mlflow_client.h"

#include <cerrno>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <thread>

#include <fmt/format.h>
#include <httplib.h>

#include "frugal/core/errors.h"

namespace frugal::detail {
namespace {

std::string env_or_empty(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

std::string url_encode(const std::string& s) {
  std::string out;
  for (unsigned char ch : s) {
    if (std::isalnum(ch) || ch == '-' || ch == '_' || ch == '.' || ch == '~')
      out += static_cast<char>(ch);
    else
      out += fmt::format("%{:02X}", ch);
  }
  return out;
}

std::unique_ptr<httplib::Client> client_for(const HttpUrl& url, double timeout_s, const std::string& token,
                                            const std::string& user, const std::string& password) {
  auto cli = std::make_unique<httplib::Client>(url.host, url.port);
  const double t = std::max(timeout_s, 0.01);
  const auto sec = static_cast<time_t>(std::floor(t));
  const auto usec = static_cast<time_t>((t - std::floor(t)) * 1e6);
  cli->set_connection_timeout(sec, usec);
  cli->set_read_timeout(sec, usec);
  cli->set_write_timeout(sec, usec);
  if (!token.empty())
    cli->set_bearer_token_auth(token);
  else if (!user.empty())
    cli->set_basic_auth(user, password);
  return cli;
}

// The answer's JSON, or MlflowError naming the call, the status and the server's message.
nlohmann::json answer(const httplib::Result& res, const std::string& what, const std::string& cut) {
  if (!cut.empty()) throw MlflowError(fmt::format("{}: {}", what, cut), cut.rfind("the reply", 0) != 0);
  if (!res) throw MlflowError(fmt::format("{}: no answer ({})", what, httplib::to_string(res.error())), true);
  const auto j = nlohmann::json::parse(res->body, nullptr, /*allow_exceptions=*/false);
  if (res->status >= 200 && res->status < 300) return j.is_discarded() ? nlohmann::json::object() : j;
  std::string code, message = res->body.substr(0, 300);
  if (j.is_object()) {
    code = j.value("error_code", "");
    message = j.value("message", message);
  }
  const bool retryable = res->status == 429 || res->status >= 500;
  throw MlflowError(fmt::format("{}: HTTP {}{}: {}", what, res->status, code.empty() ? "" : " " + code, message),
                    retryable, code, res->status);
}

// Sends `req` on `cli` within `timeout_s` in all, and gives the answer's JSON. httplib's own
// timeouts are per read and write, so a watchdog thread stops the call at the deadline (or when
// `give_up` says so); the reply is read into memory only up to kMaxMlflowReply.
nlohmann::json exchange(httplib::Client& cli, httplib::Request& req, double timeout_s,
                        const std::function<bool()>& give_up) {
  using Clock = std::chrono::steady_clock;
  const std::string what = req.method + " " + req.path;
  std::string body, cut;
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  const auto too_big = [&] {
    std::lock_guard<std::mutex> lock(mu);
    cut = fmt::format("the reply is larger than {} MiB; it was not read", kMaxMlflowReply >> 20);
    return false;
  };
  req.response_handler = [&](const httplib::Response& r) {
    const std::string length = r.get_header_value("Content-Length");
    return length.empty() || std::strtoull(length.c_str(), nullptr, 10) <= kMaxMlflowReply || too_big();
  };
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    if (body.size() + n > kMaxMlflowReply) return too_big();
    body.append(data, n);
    return true;
  };
  const auto deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s));
  std::thread watchdog([&] {
    std::unique_lock<std::mutex> lock(mu);
    while (!done) {
      const bool late = Clock::now() >= deadline;
      if (late || (give_up && give_up())) {
        if (cut.empty()) cut = late ? fmt::format("no complete answer within {:g} s", timeout_s) : "given up";
        cli.stop();  // shuts the socket down under the call: its read or write fails at once
      }
      cv.wait_for(lock, std::chrono::milliseconds(20), [&] { return done; });
    }
  });
  httplib::Result res = cli.send(req);
  {
    std::lock_guard<std::mutex> lock(mu);
    done = true;
  }
  cv.notify_one();
  watchdog.join();
  if (res && cut.empty()) res->body = std::move(body);
  return answer(res, what, cut);
}

}  // namespace

MlflowClient::MlflowClient(HttpUrl url, std::function<bool()> give_up)
    : url_(std::move(url)),
      give_up_(std::move(give_up)),
      token_(env_or_empty("MLFLOW_TRACKING_TOKEN")),
      user_(env_or_empty("MLFLOW_TRACKING_USERNAME")),
      password_(env_or_empty("MLFLOW_TRACKING_PASSWORD")) {}

nlohmann::json MlflowClient::post(const std::string& api, const nlohmann::json& body, double timeout_s) const {
  const auto cli = client_for(url_, timeout_s, token_, user_, password_);
  httplib::Request req;
  req.method = "POST";
  req.path = url_.base_path + "/api/2.0/mlflow/" + api;
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");
  return exchange(*cli, req, timeout_s, give_up_);
}

nlohmann::json MlflowClient::get(const std::string& api, const std::map<std::string, std::string>& query,
                                 double timeout_s) const {
  const auto cli = client_for(url_, timeout_s, token_, user_, password_);
  std::string path = url_.base_path + "/api/2.0/mlflow/" + api;
  char sep = '?';
  for (const auto& [k, v] : query) {
    path += sep + url_encode(k) + "=" + url_encode(v);
    sep = '&';
  }
  httplib::Request req;
  req.method = "GET";
  req.path = path;
  return exchange(*cli, req, timeout_s, give_up_);
}

void MlflowClient::put_file(const std::string& path, const std::string& file, double timeout_s) const {
  auto in = std::make_shared<std::ifstream>(file, std::ios::binary);
  if (!*in) throw IoError(fmt::format("cannot read {}: {}", file, std::strerror(errno)));
  in->seekg(0, std::ios::end);
  const auto size = static_cast<size_t>(in->tellg());
  in->seekg(0);
  const auto cli = client_for(url_, timeout_s, token_, user_, password_);
  const std::string target = url_.base_path + "/api/2.0/mlflow-artifacts/artifacts/" + path;
  // Streamed in 1 MiB pieces: the final weights need not fit in memory twice.
  auto provider = [in](size_t offset, size_t length, httplib::DataSink& sink) {
    std::string buf(std::min<size_t>(length, 1 << 20), '\0');
    in->seekg(static_cast<std::streamoff>(offset));
    in->read(buf.data(), static_cast<std::streamsize>(buf.size()));
    const auto got = static_cast<size_t>(in->gcount());
    if (got == 0) return false;
    sink.write(buf.data(), got);
    return true;
  };
  httplib::Request req;
  req.method = "PUT";
  req.path = target;
  req.set_header("Content-Type", "application/octet-stream");
  req.content_length_ = size;  // httplib's request fields for a streamed body (what Client::Put sets)
  req.content_provider_ = provider;
  exchange(*cli, req, timeout_s, give_up_);
}

}  // namespace frugal::detail
