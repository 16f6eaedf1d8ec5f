// Strict reading of a Hugging Face config.json for the families' readers (hf_gpt2.cpp,
// llama/hf_llama.cpp): a field of the wrong type, a fraction where a count belongs, a number past
// the double range or a string where a number belongs is a ConfigError naming the file and field,
// never a silent conversion or a JSON library message.
#pragma once

#include <fmt/format.h>

#include <cmath>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "frugal/core/errors.h"

namespace frugal::hf_json {

using nlohmann::json;

[[noreturn]] inline void refuse(const std::string& origin, const std::string& key, const json& value,
                                const std::string& why) {
  throw ConfigError(fmt::format("{}: \"{}\" = {}: {}", origin, key, value.dump(), why));
}

inline bool has(const json& j, const std::string& key) { return j.contains(key) && !j[key].is_null(); }

[[noreturn]] inline void missing(const std::string& origin, const std::string& key, const std::string& what) {
  throw ConfigError(fmt::format("{}: key \"{}\" is missing; a {} config.json names it", origin, key, what));
}

// An integer: a JSON integer, or a float with no fractional part (48.0); not 48.5, not "48".
inline int64_t get_int(const json& j, const std::string& key, const std::string& origin, const std::string& what,
                       std::optional<int64_t> fallback = {}) {
  if (!has(j, key)) {
    if (fallback) return *fallback;
    missing(origin, key, what);
  }
  const json& v = j[key];
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.0e15) return static_cast<int64_t>(d);
  }
  refuse(origin, key, v, "must be a whole number");
}

inline double get_double(const json& j, const std::string& key, const std::string& origin, const std::string& what,
                         std::optional<double> fallback = {}) {
  if (!has(j, key)) {
    if (fallback) return *fallback;
    missing(origin, key, what);
  }
  const json& v = j[key];
  if (!v.is_number()) refuse(origin, key, v, "must be a number");
  const double d = v.get<double>();
  if (!std::isfinite(d)) refuse(origin, key, v, "must be a finite number");
  return d;
}

inline bool get_bool(const json& j, const std::string& key, const std::string& origin, const std::string& what,
                     std::optional<bool> fallback = {}) {
  if (!has(j, key)) {
    if (fallback) return *fallback;
    missing(origin, key, what);
  }
  if (!j[key].is_boolean()) refuse(origin, key, j[key], "must be true or false");
  return j[key].get<bool>();
}

inline std::string get_string(const json& j, const std::string& key, const std::string& origin, const std::string& what,
                              std::optional<std::string> fallback = {}) {
  if (!has(j, key)) {
    if (fallback) return *fallback;
    missing(origin, key, what);
  }
  if (!j[key].is_string()) refuse(origin, key, j[key], "must be a string");
  return j[key].get<std::string>();
}

}  // namespace frugal::hf_json
