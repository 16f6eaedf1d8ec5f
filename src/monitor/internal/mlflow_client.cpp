// MLflow's REST API over plain HTTP; see mlflow_client.h.
#include "monitor/internal/mlflow_client.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>

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
nlohmann::json answer(const httplib::Result& res, const std::string& what) {
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

}  // namespace

MlflowClient::MlflowClient(HttpUrl url)
    : url_(std::move(url)),
      token_(env_or_empty("MLFLOW_TRACKING_TOKEN")),
      user_(env_or_empty("MLFLOW_TRACKING_USERNAME")),
      password_(env_or_empty("MLFLOW_TRACKING_PASSWORD")) {}

nlohmann::json MlflowClient::post(const std::string& api, const nlohmann::json& body, double timeout_s) const {
  const auto cli = client_for(url_, timeout_s, token_, user_, password_);
  const std::string path = url_.base_path + "/api/2.0/mlflow/" + api;
  return answer(cli->Post(path, body.dump(), "application/json"), "POST " + path);
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
  return answer(cli->Get(path), "GET " + path);
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
  answer(cli->Put(target, size, provider, "application/octet-stream"), "PUT " + target);
}

}  // namespace frugal::detail
