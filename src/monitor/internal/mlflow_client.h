// The few calls of MLflow's REST API (2.0) the tracker makes, over plain HTTP (monitor/mlflow.h).
#pragma once

#include <functional>
#include <map>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "frugal/core/config_values.h"

namespace frugal::detail {

// A call that failed. retryable: the server did not answer, timed out, or answered 429 or 5xx
// (try again later); else it refused the request (4xx: a bad name, no permission, ...), and
// `code` is MLflow's error_code ("RESOURCE_DOES_NOT_EXIST", ...) when it sent one.
struct MlflowError : std::runtime_error {
  MlflowError(const std::string& what, bool can_retry, std::string error_code = "", int http_status = 0)
      : std::runtime_error(what), retryable(can_retry), code(std::move(error_code)), status(http_status) {}
  bool retryable;
  std::string code;
  int status;  // the HTTP status (0: no answer)
};

// The most a reply may hold (MLflow's are a few KiB): a larger one is refused, never read into memory.
constexpr size_t kMaxMlflowReply = size_t{16} << 20;

// Every call is bounded as a whole: `timeout_s` covers connecting, sending, the reply's headers
// and its body together (a server that trickles a byte now and then is cut at the deadline, not
// kept alive by it), and `give_up` (polled every 20 ms from a watchdog thread) cuts a call at
// once, e.g. when a stop signal arrives. A cut call throws a retryable MlflowError.
class MlflowClient {
 public:
  // Credentials from the environment: MLFLOW_TRACKING_TOKEN (Bearer), else
  // MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD (basic auth).
  explicit MlflowClient(HttpUrl url, std::function<bool()> give_up = {});

  // POST /api/2.0/mlflow/<api> with a JSON body; the answer's JSON. Throws MlflowError.
  nlohmann::json post(const std::string& api, const nlohmann::json& body, double timeout_s) const;
  // GET /api/2.0/mlflow/<api>?<query>. Throws MlflowError.
  nlohmann::json get(const std::string& api, const std::map<std::string, std::string>& query, double timeout_s) const;
  // PUT the file at `file` to /api/2.0/mlflow-artifacts/artifacts/<path> (the server's own
  // artifact store). Throws MlflowError, IoError when the file cannot be read.
  void put_file(const std::string& path, const std::string& file, double timeout_s) const;

  const HttpUrl& url() const { return url_; }
  std::string base() const { return url_.origin() + url_.base_path; }  // for messages and links

 private:
  HttpUrl url_;
  std::function<bool()> give_up_;
  std::string token_, user_, password_;
};

}  // namespace frugal::detail
