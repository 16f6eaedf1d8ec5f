// Structured config values; see config_values.h.
#include "frugal/core/config_values.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstdlib>
#include <sstream>

#include <fmt/format.h>

#include "frugal/core/errors.h"

namespace frugal {

HttpAddress parse_http_address(const std::string& text) {
  auto bad = [&](const std::string& why) {
    return ConfigError(
        fmt::format("monitor.http = \"{}\": {}; expected HOST:PORT, e.g. \"127.0.0.1:8080\" "
                    "(port 0 = any free port)",
                    text, why));
  };
  const size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0) throw bad("no HOST:PORT");
  HttpAddress a;
  a.host = text.substr(0, colon);
  if (a.host.size() >= 2 && a.host.front() == '[' && a.host.back() == ']') a.host = a.host.substr(1, a.host.size() - 2);
  const std::string port = text.substr(colon + 1);
  if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos)
    throw bad("the port is not a number");
  a.port = std::stoi(port);
  if (a.port > 65535) throw bad("the port is above 65535");
  if (a.host.empty() || a.host.find_first_of(" /?#") != std::string::npos) throw bad("bad host");
  return a;
}

std::string HttpUrl::origin() const {
  const std::string h = host.find(':') != std::string::npos ? "[" + host + "]" : host;
  return fmt::format("http://{}:{}", h, port);
}

HttpUrl parse_http_url(const std::string& text, const std::string& key) {
  auto bad = [&](const std::string& why) {
    return ConfigError(
        fmt::format("{} = \"{}\": {}; expected http://HOST:PORT, e.g. \"http://127.0.0.1:5000\"", key, text, why));
  };
  const std::string scheme = "http://";
  if (text.rfind("https://", 0) == 0)
    throw bad(
        "https is not supported (frugal's client speaks plain HTTP); reach the server over http on a trusted "
        "network, or through a local TLS-terminating proxy");
  if (text.rfind(scheme, 0) != 0) throw bad("not an http:// URL");
  const std::string rest = text.substr(scheme.size());
  if (rest.find_first_of("?#") != std::string::npos) throw bad("a query or fragment is not allowed");
  const size_t slash = rest.find('/');
  const std::string authority = rest.substr(0, slash);
  if (authority.find('@') != std::string::npos)
    throw bad(
        "credentials do not belong in the URL (it is written into the run directory); set "
        "MLFLOW_TRACKING_TOKEN, or MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD, in the environment");
  HttpUrl u;
  std::string host = authority, port;
  if (!host.empty() && host.front() == '[') {
    const size_t close = host.find(']');
    if (close == std::string::npos) throw bad("unclosed '[' in the host");
    if (close + 1 < host.size()) {
      if (host[close + 1] != ':') throw bad("bad host");
      port = host.substr(close + 2);
    }
    host = host.substr(1, close - 1);
  } else if (const size_t colon = host.rfind(':'); colon != std::string::npos) {
    port = host.substr(colon + 1);
    host = host.substr(0, colon);
  }
  if (host.empty() || host.find_first_of(" /") != std::string::npos) throw bad("no host");
  u.host = host;
  if (!port.empty()) {
    if (port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos)
      throw bad("the port is not a number");
    u.port = std::stoi(port);
    if (u.port < 1 || u.port > 65535) throw bad("the port is not in 1..65535");
  }
  if (slash != std::string::npos) {
    u.base_path = rest.substr(slash);
    while (!u.base_path.empty() && u.base_path.back() == '/') u.base_path.pop_back();
  }
  return u;
}

std::vector<std::string> resolve_host_addresses(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), nullptr, &hints, &found) != 0) return {};
  std::vector<std::string> out;
  for (const addrinfo* a = found; a; a = a->ai_next) {
    char text[NI_MAXHOST];
    if (::getnameinfo(a->ai_addr, a->ai_addrlen, text, sizeof text, nullptr, 0, NI_NUMERICHOST) != 0) continue;
    if (std::find(out.begin(), out.end(), text) == out.end()) out.emplace_back(text);
  }
  ::freeaddrinfo(found);
  return out;
}

bool is_loopback_address(const std::string& numeric) {
  in_addr v4{};
  if (::inet_pton(AF_INET, numeric.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  if (::inet_pton(AF_INET6, numeric.c_str(), &v6) != 1) return false;
  if (IN6_IS_ADDR_LOOPBACK(&v6)) return true;
  return IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127;  // ::ffff:127.x.y.z
}

bool is_loopback_host(const std::string& host) {
  const std::vector<std::string> addresses = resolve_host_addresses(host);
  return !addresses.empty() && std::all_of(addresses.begin(), addresses.end(), is_loopback_address);
}

std::vector<double> parse_alert_fractions(const std::string& text) {
  std::vector<double> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    item.erase(0, item.find_first_not_of(" \t"));
    item.erase(item.find_last_not_of(" \t") + 1);
    if (item.empty()) continue;
    char* end = nullptr;
    double x = std::strtod(item.c_str(), &end);
    if (*end != '\0' || !(x > 0 && x <= 1))
      throw ConfigError(fmt::format("budget.alert_at: '{}' is not a fraction in (0, 1]", item));
    out.push_back(x);
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace frugal
