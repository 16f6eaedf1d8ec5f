// Config values with structure (an address, a list of fractions), parsed in one place: the schema
// checks them when a config is loaded (config_keys.cpp), and the components that use them
// (the dashboard, the cost meter) parse them the same way.
#pragma once

#include <string>
#include <vector>

namespace frugal {

struct HttpAddress {
  std::string host;  // "127.0.0.1", "0.0.0.0", "::1", "localhost", ...
  int port = 0;      // 0 = any free port
};
// Parses "HOST:PORT" (IPv6 as "[::1]:8080"); throws ConfigError naming the value.
HttpAddress parse_http_address(const std::string& text);
// Every address `host` resolves to (a name through the system's resolver, a number as it is), as
// numeric text, in the resolver's order; empty when it does not resolve.
std::vector<std::string> resolve_host_addresses(const std::string& host);
// A numeric address in 127.0.0.0/8, ::1 or ::ffff:127.0.0.0/104.
bool is_loopback_address(const std::string& numeric);
// True when `host` resolves and every address it resolves to is a loopback address: decided on
// the addresses, not the spelling ("127.evil.example" may resolve to anything).
bool is_loopback_host(const std::string& host);

// An http:// URL of a service frugal talks to (track.mlflow_uri).
struct HttpUrl {
  std::string host;
  int port = 80;
  std::string base_path;       // "" or "/prefix" (a server behind a proxy path), no trailing '/'
  std::string origin() const;  // "http://HOST:PORT" ([HOST] for IPv6)
};
// Parses "http://HOST[:PORT][/PATH]"; throws ConfigError naming `key` and the value. Refused:
// another scheme (https included: frugal's HTTP client speaks plain HTTP), credentials in the
// URL (they would be written into the run directory: the environment carries them), a query
// or fragment.
HttpUrl parse_http_url(const std::string& text, const std::string& key);

// Parses budget.alert_at ("0.5,0.8,0.95"); throws ConfigError.
std::vector<double> parse_alert_fractions(const std::string& text);

}  // namespace frugal
