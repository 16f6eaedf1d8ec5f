// The outputs of `frugal search`: search.json, search.html and best.toml in the search folder.
#pragma once

#include <nlohmann/json.hpp>

#include "frugal/search/halving.h"
#include "frugal/search/search.h"
#include "search/internal/search_runner.h"

namespace frugal::detail {

// search.json's object (docs/search.md lists its fields).
nlohmann::json search_json(const SearchContext& ctx, const HalvingSchedule& schedule);

// Writes search.json, search.html and best.toml (when a trial measured its metric) and fills the
// outcome's folder, best trial, best.toml path and table.
SearchOutcome write_search_outputs(const SearchContext& ctx, const HalvingSchedule& schedule, SearchOutcome outcome);

}  // namespace frugal::detail
