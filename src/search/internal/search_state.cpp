// The state file of `frugal search`; see search_state.h.
#include "search/internal/search_state.h"

#include <cmath>

#include <fmt/format.h>

#include "frugal/core/atomic_file.h"
#include "frugal/core/errors.h"

namespace frugal::detail {

namespace {

constexpr const char* kFormat = "frugal-search-state";
constexpr int kVersion = 1;

// NaN and infinities are not JSON: they are written as null and read back as NaN.
nlohmann::json number(double x) { return std::isfinite(x) ? nlohmann::json(x) : nlohmann::json(nullptr); }
double number_of(const nlohmann::json& j) { return j.is_number() ? j.get<double>() : NAN; }

std::vector<std::pair<std::string, std::string>> values_from(const nlohmann::json& j) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& [k, v] : j.items()) out.emplace_back(k, v.get<std::string>());
  return out;
}

nlohmann::json result_json(const RungResult& r) {
  return {{"rung", r.rung},
          {"steps", r.steps},
          {"metric", number(r.metric)},
          {"tokens_per_s", number(r.tokens_per_s)},
          {"cost_usd", r.cost_usd},
          {"kg_co2", r.kg_co2},
          {"energy_kwh", r.energy_kwh},
          {"wall_s", r.wall_s},
          {"stop_kind", r.stop_kind}};
}

RungResult result_from(const nlohmann::json& j) {
  RungResult r;
  r.rung = j.at("rung").get<int64_t>();
  r.steps = j.at("steps").get<int64_t>();
  r.metric = number_of(j.at("metric"));
  r.tokens_per_s = number_of(j.at("tokens_per_s"));
  r.cost_usd = j.at("cost_usd").get<double>();
  r.kg_co2 = j.at("kg_co2").get<double>();
  r.energy_kwh = j.value("energy_kwh", 0.0);
  r.wall_s = j.at("wall_s").get<double>();
  r.stop_kind = j.at("stop_kind").get<std::string>();
  return r;
}

}  // namespace

nlohmann::json values_json(const std::vector<std::pair<std::string, std::string>>& values) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [k, v] : values) j[k] = v;
  return j;
}

nlohmann::json decision_json(const RungDecision& d) {
  return {{"rung", d.rung}, {"ranked", d.ranked}, {"promoted", d.promoted}, {"stopped", d.stopped}};
}

nlohmann::json SearchState::to_json() const {
  nlohmann::json trials_j = nlohmann::json::array();
  for (const auto& t : trials) {
    nlohmann::json results_j = nlohmann::json::array();
    for (const auto& r : t.results) results_j.push_back(result_json(r));
    trials_j.push_back({{"id", t.id},
                        {"draw", t.draw},
                        {"values", values_json(t.values)},
                        {"search_sets", t.search_sets},
                        {"status", t.status},
                        {"rung", t.rung},
                        {"results", results_j},
                        {"note", t.note},
                        {"sessions", t.sessions},
                        {"steps", t.steps},
                        {"spent_usd", t.spent_usd},
                        {"spent_kg_co2", t.spent_kg_co2},
                        {"spent_kwh", t.spent_kwh},
                        {"spent_s", t.spent_s},
                        {"usd_per_hour", t.usd_per_hour}});
  }
  nlohmann::json skipped_j = nlohmann::json::array();
  for (const auto& s : skipped)
    skipped_j.push_back(
        {{"draw", s.draw}, {"values", values_json(s.values)}, {"kind", s.kind}, {"why", s.why}, {"times", s.times}});
  nlohmann::json decisions_j = nlohmann::json::array();
  for (const auto& d : decisions) decisions_j.push_back(decision_json(d));
  return {{"format", kFormat},    {"version", kVersion},        {"identity", identity}, {"trials", trials_j},
          {"skipped", skipped_j}, {"decisions", decisions_j},   {"rung", rung},         {"elapsed_s", elapsed_s},
          {"sessions", sessions}, {"max_running", max_running}, {"end", end},           {"reason", reason}};
}

SearchState SearchState::from_json(const nlohmann::json& j) {
  SearchState s;
  s.identity = j.at("identity");
  for (const auto& t : j.at("trials")) {
    TrialState x;
    x.id = t.at("id").get<std::string>();
    x.draw = t.at("draw").get<int64_t>();
    x.values = values_from(t.at("values"));
    x.search_sets = t.at("search_sets").get<std::vector<std::string>>();
    x.status = t.at("status").get<std::string>();
    x.rung = t.at("rung").get<int64_t>();
    for (const auto& r : t.at("results")) x.results.push_back(result_from(r));
    x.note = t.at("note").get<std::string>();
    x.sessions = t.at("sessions").get<int64_t>();
    x.steps = t.at("steps").get<int64_t>();
    x.spent_usd = t.at("spent_usd").get<double>();
    x.spent_kg_co2 = t.at("spent_kg_co2").get<double>();
    x.spent_kwh = t.value("spent_kwh", 0.0);
    x.spent_s = t.at("spent_s").get<double>();
    x.usd_per_hour = t.at("usd_per_hour").get<double>();
    s.trials.push_back(std::move(x));
  }
  for (const auto& k : j.at("skipped"))
    s.skipped.push_back({k.at("draw").get<int64_t>(), values_from(k.at("values")), k.at("kind").get<std::string>(),
                         k.at("why").get<std::string>(), k.at("times").get<int64_t>()});
  for (const auto& d : j.at("decisions"))
    s.decisions.push_back({d.at("rung").get<int64_t>(), d.at("ranked").get<std::vector<std::string>>(),
                           d.at("promoted").get<std::vector<std::string>>(),
                           d.at("stopped").get<std::vector<std::string>>()});
  s.rung = j.at("rung").get<int64_t>();
  s.elapsed_s = j.at("elapsed_s").get<double>();
  s.sessions = j.at("sessions").get<int64_t>();
  s.max_running = j.value("max_running", int64_t{0});
  s.end = j.at("end").get<std::string>();
  s.reason = j.at("reason").get<std::string>();
  return s;
}

SearchState load_search_state(const std::string& path) {
  try {
    const nlohmann::json j = nlohmann::json::parse(read_small_file(path));
    if (j.value("format", "") != kFormat || j.value("version", 0) != kVersion)
      throw CheckpointError(
          fmt::format("{} is not a frugal search state (format {} version {} expected)", path, kFormat, kVersion));
    return SearchState::from_json(j);
  } catch (const nlohmann::json::exception& e) {
    throw CheckpointError(fmt::format("{} is damaged ({}); start the search again with --overwrite", path, e.what()));
  }
}

void save_search_state(const std::string& path, const SearchState& state) {
  write_file_atomic(path, state.to_json().dump(1) + "\n");
}

}  // namespace frugal::detail
