// The trainer's loop counters and the process RNG, as JSON for a checkpoint's state.json. Every
// value that influences a later step or a later metrics line is here, so a resumed run continues
// bitwise (docs/formats/checkpoint.md lists the fields).
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace frugal::detail {

struct LoopState {
  int64_t step = 0;     // optimizer iterations completed
  int64_t tokens = 0;   // tokens consumed
  double loss_sum = 0;  // fp32 sum of step losses in the open log window (exact)
  int64_t window_steps = 0;
  int64_t window_tokens = 0;
  double window_s = 0;
  double final_val = std::numeric_limits<double>::quiet_NaN();
  double best_val = std::numeric_limits<double>::infinity();
  double final_train = std::numeric_limits<double>::quiet_NaN();
  int64_t last_eval_step = -1;
  bool eval_pending = false;  // a stop signal interrupted the evaluation at `step`
  double elapsed_s = 0;       // wall time of earlier sessions' training (tokens_per_s)
  double startup_s = 0;       // start-up time of earlier sessions (billed and counted by
                              // train.max_minutes, not by tokens_per_s)
  double lr_scale = 1;        // product of guard.lr_factor over rollbacks
  int64_t rollbacks = 0;
  // The step the run ends at, its schedule with it, when moved before train.steps (Control::
  // request_end_at: checkpoint.deadline_action = "decay"); 0 = train.steps. Kept by a resume.
  int64_t end_step = 0;
  std::string end_reason;
  // With that end, the optimizer step the WSD decay begins at when its own start had passed
  // already (wsd_lr_at's decay_from); 0 = the schedule's own start.
  int64_t decay_from = 0;
};

nlohmann::json to_json(const LoopState& s);
LoopState loop_state_from_json(const nlohmann::json& j);

// Doubles that may be NaN or infinite (JSON has neither): finite numbers as numbers, the rest as
// "nan", "inf", "-inf".
nlohmann::json json_double(double x);
double double_from_json(const nlohmann::json& j);

// The default CPU generator's state as hex, and back.
// Bytes as lowercase hex and back (a CheckpointError naming `what` on malformed text).
std::string bytes_to_hex(const std::vector<uint8_t>& bytes);
std::vector<uint8_t> hex_to_bytes(const std::string& hex, const std::string& what);
std::string cpu_rng_state_hex();
void set_cpu_rng_state_hex(const std::string& hex);

}  // namespace frugal::detail
