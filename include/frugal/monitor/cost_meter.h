// The cost and carbon meter, and the budget guard ([budget]). From the hourly price (given, or
// looked up in the price table data/prices.toml by instance name) and the power draw it turns
// elapsed time into dollars, kWh and kg CO2; it projects the cost of the whole run from the
// measured pace, logs an alert the first time spend crosses each configured fraction of the
// limit (optionally running a user command with the figures in environment variables), and
// requests a guard stop (exit code 3) when the hard limit would be crossed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "frugal/core/callback.h"
#include "frugal/core/config.h"
#include "frugal/core/config_values.h"

namespace frugal {

struct CostFigures {
  double hours = 0;
  double usd = 0;
  double kwh = 0;
  double kg_co2 = 0;
  double burn_usd_per_hour = 0;
  double projected_usd = 0;  // for the run's steps (train.steps, or an end moved before it) at the pace so far
};

// Pure arithmetic of the meter (tested directly).
CostFigures cost_at(double elapsed_s, int64_t step, int64_t total_steps, double usd_per_hour, double watts,
                    double grid_g_per_kwh);

// A price-table row: data/prices.toml, [instance-name] usd_per_hour, spot_usd_per_hour, watts,
// peak_tflops (the accelerators' dense bf16 peak, for `frugal plan --instance`; 0 = not given).
struct PriceEntry {
  std::string name;
  double usd_per_hour = 0;
  double spot_usd_per_hour = 0;
  double watts = 0;
  double peak_tflops = 0;
};
// Reads the table; throws ConfigError naming the file and the bad entry.
std::vector<PriceEntry> load_price_table(const std::string& path);
// The price table to use: FRUGAL_PRICE_TABLE where set, else the one shipped with frugal, looked
// for beside `exe` (a build: ../data, ../../data; an install: ../share/frugal/prices.toml) and
// then as data/prices.toml under the current directory (a source checkout). Throws ConfigError
// naming every place tried (or the variable's missing file) and FRUGAL_PRICE_TABLE=FILE.
std::string default_price_table_path(const std::string& exe);
// The same for this program (/proc/self/exe).
std::string default_price_table_path();

class CostMeter : public Callback {
 public:
  // Resolves budget.instance against the price table when usd_per_hour/watts are not given.
  explicit CostMeter(const BudgetConfig& budget);

  // A producer: the spend so far into StepMetrics::cost_usd.
  void on_step_metrics(StepMetrics& m) override;
  // Alerts, and a budget stop before the next step would cross budget.limit_usd.
  void on_step_end(const StepMetrics& m, Control& control) override;
  // A run resumed with its budget spent stops before another step (no alerts: they fired before).
  void on_resume(const StepMetrics& m, Control& control) override;
  // The price, power and limit, when a price is known.
  void add_to_banner(std::vector<std::string>& lines) const override;
  void add_to_summary(nlohmann::ordered_json& summary) override;
  // The alerts already fired survive a resume: none fires twice, and the summary lists them all.
  // Money spent stays spent: a divergence rollback keeps this state.
  std::string state_key() const override { return "cost_meter"; }
  void save_state(nlohmann::json& out) const override;
  void load_state(const nlohmann::json& in) override;
  bool state_survives_rollback() const override { return true; }

  const CostFigures& figures() const { return figures_; }
  double usd_per_hour() const { return usd_per_hour_; }
  double watts() const { return watts_; }
  const std::vector<std::string>& alerts_fired() const { return alerts_fired_; }

 private:
  void stop_before_the_limit(int64_t step, int64_t total_steps, Control& control) const;
  void alert(double fraction);

  BudgetConfig budget_;
  double usd_per_hour_ = 0;
  double watts_ = 0;
  double price_spot_ = 0;
  std::vector<double> fractions_;
  std::vector<bool> fired_;
  std::vector<std::string> alerts_fired_;
  CostFigures figures_;
};

}  // namespace frugal
