// What the run report (report.cpp) and the run comparison (compare.cpp) share: a run's JSON files
// read as bad input when they are missing or malformed, and figures taken from them.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace frugal::detail {

// summary.json and the like. DataError (exit 2) naming the file when it is missing or not JSON.
nlohmann::json read_json(const std::string& path);

// j[k] when it is a number; NaN when it is absent or not a number.
double get(const nlohmann::json& j, const char* k);

// A whole number with thousands separators: 14200 -> "14,200".
std::string with_commas(double x);

}  // namespace frugal::detail
