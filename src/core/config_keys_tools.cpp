// The [tune] and [plan] keys (the tools that run before training: tune/tuner.h, tune/plan.h); the
// other sections are in config_keys.cpp.
#include "core/internal/schema_keys.h"

namespace frugal::schema {

void add_tune_keys(std::vector<KeySpec>& s) {
  KeyList k{s};
  k.may(float_key(FRUGAL_FIELD(tune, max_fraction), 0.001, 1,
                  "tuning time bound, as a fraction of the run's projected time"));
  k.may(int_key(FRUGAL_FIELD(tune, probe_steps), 1, 10000, "measured steps per candidate (after one warm-up step)"));
  k.may(
      int_key(FRUGAL_FIELD(tune, rounds), 1, 100,
              "measurement rounds, candidates in turn; each candidate's figure is its median step time (of two middle "
              "values the slower), from which its tokens/s and run time follow"));
  k.may(float_key(FRUGAL_FIELD(tune, min_speedup), 0, 10,
                  "a candidate must beat the configuration as given by this fraction to replace it"));
  k.may(float_key(FRUGAL_FIELD(tune, loss_tolerance), 0, 10,
                  "a candidate's loss must be within this relative distance of fp32's"));
  k.may(int_key(FRUGAL_FIELD(tune, loss_check_steps), 0, 1000000,
                "steps the chosen candidate and fp32 train to compare losses; 0 = probe losses"));
  k.may(float_key(FRUGAL_FIELD(tune, memory_margin), 0, 0.9,
                  "batch-size finder: keep peak memory below (1 - margin) x the budget"));
  k.may(int_key(FRUGAL_FIELD(tune, max_micro_batch), 1, 1 << 20, "batch-size finder: largest micro-batch probed"));
  k.may(bool_key(FRUGAL_FIELD(tune, cache),
                 "cache finder results in ~/.cache/frugal/batch_finder.json (FRUGAL_CACHE_DIR overrides)"));
}

void add_plan_keys(std::vector<KeySpec>& s) {
  KeyList k{s};
  k.may(bool_key(FRUGAL_FIELD(plan, before_train),
                 "`frugal train` probes and projects the run first, shows it in the banner and exits 3 "
                 "before step 1 when budget.limit_usd is below the projected cost (the CLI only: a program "
                 "calls make_cost_plan, tune/plan.h, itself)"));
  k.may(
      int_key(FRUGAL_FIELD(plan, probe_steps), 3, 100000, "steps the plan's probe measures (after one warm-up step)"));
  k.may(float_key(FRUGAL_FIELD(plan, max_probe_s), 1, 1e6,
                  "the probe stops after this many seconds of steps (3 measured at least)"));
  k.may(
      float_key(FRUGAL_FIELD(plan, margin), 0, 10, "smallest relative half-width of each term of the projected range"));
}

}  // namespace frugal::schema
