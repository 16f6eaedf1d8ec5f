// Cost, energy and carbon meter with a budget guard; see cost_meter.h.
#pragma GCC diagnostic push                      // popped at the end: the file may share a unity translation unit
#pragma GCC diagnostic ignored "-Warray-bounds"  // toml++ + GCC 12 false positive
#define TOML_HEADER_ONLY 1
#include <toml++/toml.h>

#include "frugal/monitor/cost_meter.h"

#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "frugal/core/atomic_file.h"
#include "frugal/core/console.h"
#include "frugal/core/errors.h"
#include "frugal/monitor/progress.h"  // format_usd

namespace frugal {
namespace fs = std::filesystem;

CostFigures cost_at(double elapsed_s, int64_t step, int64_t total_steps, double usd_per_hour, double watts,
                    double grid_g_per_kwh) {
  CostFigures f;
  f.hours = elapsed_s / 3600.0;
  f.usd = f.hours * usd_per_hour;
  f.kwh = f.hours * watts / 1000.0;
  f.kg_co2 = f.kwh * grid_g_per_kwh / 1000.0;
  f.burn_usd_per_hour = usd_per_hour;
  f.projected_usd = step > 0 ? f.usd * static_cast<double>(total_steps) / static_cast<double>(step) : 0;
  return f;
}

std::string default_price_table_path(const std::string& exe) {
  std::error_code ec;
  if (const char* env = std::getenv("FRUGAL_PRICE_TABLE"); env && *env) {
    if (!fs::exists(env, ec))
      throw ConfigError(
          fmt::format("FRUGAL_PRICE_TABLE = {}: no such file; set FRUGAL_PRICE_TABLE=FILE to a price "
                      "table (frugal ships data/prices.toml), or unset it to use the shipped one",
                      env));
    return env;
  }
  const fs::path dir = fs::path(exe).parent_path();
  std::vector<std::string> tried;
  for (const char* rel : {"../data/prices.toml", "../../data/prices.toml", "../share/frugal/prices.toml"}) {
    const fs::path p = (dir / rel).lexically_normal();
    if (fs::exists(p, ec)) return fs::weakly_canonical(p, ec).string();
    tried.push_back(p.string());
  }
  if (fs::exists("data/prices.toml", ec)) return "data/prices.toml";
  tried.push_back((fs::current_path(ec) / "data/prices.toml").string());
  std::string places;
  for (const auto& t : tried) places += (places.empty() ? "" : ", ") + t;
  throw ConfigError(
      fmt::format("no price table found (looked for {}); set FRUGAL_PRICE_TABLE=FILE to a price table "
                  "(frugal ships data/prices.toml; `cmake --install` puts it in share/frugal/)",
                  places));
}

std::string default_price_table_path() {
  std::error_code ec;
  return default_price_table_path(fs::read_symlink("/proc/self/exe", ec).string());
}

std::vector<PriceEntry> load_price_table(const std::string& path) {
  toml::table root;
  try {
    root = toml::parse(read_small_file(path), path);
  } catch (const frugal::Error& e) {  // not a regular file, too large, unreadable: bad input
    throw ConfigError(fmt::format("price table {}: {}", path, e.what()));
  } catch (const toml::parse_error& e) {
    throw ConfigError(fmt::format("price table {}:{}: {}", path, e.source().begin.line, e.description()));
  }
  std::vector<PriceEntry> out;
  for (const auto& [name, node] : root) {
    const auto* t = node.as_table();
    auto usd = t ? (*t)["usd_per_hour"].value<double>() : std::nullopt;
    if (!usd || *usd < 0)
      throw ConfigError(fmt::format("price table {}:{}: [{}] needs usd_per_hour = a number >= 0", path,
                                    node.source().begin.line, name.str()));
    out.push_back({std::string(name.str()), *usd, (*t)["spot_usd_per_hour"].value_or(0.0), (*t)["watts"].value_or(0.0),
                   (*t)["peak_tflops"].value_or(0.0)});
  }
  return out;
}

CostMeter::CostMeter(const BudgetConfig& b) : budget_(b) {
  usd_per_hour_ = b.usd_per_hour;
  watts_ = b.watts;
  if (!b.instance.empty()) {
    const std::string path = default_price_table_path();
    const PriceEntry* hit = nullptr;
    auto table = load_price_table(path);
    std::string names;
    for (const auto& e : table) {
      if (e.name == b.instance) hit = &e;
      names += (names.empty() ? "" : ", ") + e.name;
    }
    if (!hit)
      throw ConfigError(
          fmt::format("budget.instance = \"{}\" is not in the price table {}; known: {}", b.instance, path, names));
    if (usd_per_hour_ == 0) {
      if (b.spot && hit->spot_usd_per_hour <= 0)
        throw ConfigError(fmt::format("budget.spot = true but {} has no spot price in {}", b.instance, path));
      usd_per_hour_ = b.spot ? hit->spot_usd_per_hour : hit->usd_per_hour;
    }
    if (watts_ == 0) watts_ = hit->watts;
  }
  fractions_ = parse_alert_fractions(b.alert_at);
  fired_.assign(fractions_.size(), false);
}

void CostMeter::alert(double fraction) {
  std::string msg =
      fmt::format("budget alert: {} spent = {:.0f}% of the {} limit; burn ${:.3f}/h, projected {} for the whole run",
                  format_usd(figures_.usd), 100 * figures_.usd / budget_.limit_usd, format_usd(budget_.limit_usd),
                  figures_.burn_usd_per_hour, format_usd(figures_.projected_usd));
  alerts_fired_.push_back(msg);
  Console::get().line(msg);
  if (budget_.alert_command.empty()) return;
  ::setenv("FRUGAL_COST_USD", fmt::format("{:.6f}", figures_.usd).c_str(), 1);
  ::setenv("FRUGAL_COST_LIMIT_USD", fmt::format("{:.6f}", budget_.limit_usd).c_str(), 1);
  ::setenv("FRUGAL_COST_FRACTION", fmt::format("{:.4f}", fraction).c_str(), 1);
  ::setenv("FRUGAL_COST_PROJECTED_USD", fmt::format("{:.6f}", figures_.projected_usd).c_str(), 1);
  ::setenv("FRUGAL_COST_KG_CO2", fmt::format("{:.6f}", figures_.kg_co2).c_str(), 1);
  int rc = std::system(budget_.alert_command.c_str());
  if (rc != 0) Console::get().line(fmt::format("budget alert command exited with status {}", rc));
}

void CostMeter::on_step_metrics(StepMetrics& m) {
  figures_ = cost_at(m.elapsed_s, m.step, m.total_steps, usd_per_hour_, watts_, budget_.grid_g_per_kwh);
  m.cost_usd = figures_.usd;
  m.energy_kwh = figures_.kwh;
  m.kg_co2 = figures_.kg_co2;
}

void CostMeter::add_to_banner(std::vector<std::string>& lines) const {
  if (usd_per_hour_ <= 0 && watts_ <= 0) return;
  lines.push_back(fmt::format("budget: ${:.3f}/h{}, {:.0f} W, {:.0f} g CO2/kWh{}", usd_per_hour_,
                              budget_.spot ? " (spot)" : "", watts_, budget_.grid_g_per_kwh,
                              budget_.limit_usd > 0 ? ", limit " + format_usd(budget_.limit_usd) : ""));
}

void CostMeter::on_step_end(const StepMetrics& m, Control& control) {
  // The same figures on_step_metrics made (recomputed: a caller may run only this event).
  figures_ = cost_at(m.elapsed_s, m.step, m.total_steps, usd_per_hour_, watts_, budget_.grid_g_per_kwh);
  if (budget_.limit_usd <= 0) return;
  for (size_t i = 0; i < fractions_.size(); ++i) {
    if (!fired_[i] && figures_.usd >= fractions_[i] * budget_.limit_usd) {
      fired_[i] = true;
      alert(fractions_[i]);
    }
  }
  stop_before_the_limit(m.step, m.total_steps, control);
}

void CostMeter::on_resume(const StepMetrics& m, Control& control) {
  figures_ = cost_at(m.elapsed_s, m.step, m.total_steps, usd_per_hour_, watts_, budget_.grid_g_per_kwh);
  if (budget_.limit_usd > 0) stop_before_the_limit(m.step, m.total_steps, control);
}

// Stop before the next step would cross the limit (a step costs about the average so far).
void CostMeter::stop_before_the_limit(int64_t step, int64_t total_steps, Control& control) const {
  const double next = step > 0 ? figures_.usd / static_cast<double>(step) : 0;
  if (figures_.usd + next > budget_.limit_usd && step < total_steps)
    control.request_stop(fmt::format("budget: {} spent of the {} limit (budget.limit_usd)", format_usd(figures_.usd),
                                     format_usd(budget_.limit_usd)),
                         StopKind::kBudget);
}

void CostMeter::save_state(nlohmann::json& out) const {
  nlohmann::json fired = nlohmann::json::array();
  for (size_t i = 0; i < fractions_.size(); ++i)
    if (fired_[i]) fired.push_back(fractions_[i]);
  out = {{"fired_fractions", fired}, {"alerts", alerts_fired_}};
}

void CostMeter::load_state(const nlohmann::json& in) {
  if (!in.is_object()) return;
  for (const auto& f : in.value("fired_fractions", nlohmann::json::array()))
    for (size_t i = 0; i < fractions_.size(); ++i)
      if (f.is_number() && std::abs(f.get<double>() - fractions_[i]) < 1e-12) fired_[i] = true;
  alerts_fired_ = in.value("alerts", std::vector<std::string>{});
}

void CostMeter::add_to_summary(nlohmann::ordered_json& s) {
  s["cost_usd"] = figures_.usd;
  s["usd_per_hour"] = usd_per_hour_;
  s["energy_kwh"] = figures_.kwh;
  s["kg_co2"] = figures_.kg_co2;
  s["watts"] = watts_;
  s["grid_g_per_kwh"] = budget_.grid_g_per_kwh;
  s["budget_alerts"] = alerts_fired_;
}

}  // namespace frugal
#pragma GCC diagnostic pop
