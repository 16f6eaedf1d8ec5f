// Fuzz target: a checkpoint's state.json (docs/formats/checkpoint.md). The input is the state
// text; the directory holds a valid checkpoint's other files, and COMPLETE is rewritten to match
// the input (so mutations get past the marker to the fields behind it). Listing, verifying and
// loading run as `--resume auto` would, and the loop counters are read as the trainer reads them.
#include <ATen/ATen.h>
#include <fmt/format.h>

#include "frugal/ckpt/checkpoint.h"
#include "frugal/core/atomic_file.h"
#include "frugal/core/errors.h"
#include "fuzz_util.h"
#include "train/internal/run_state.h"

using namespace frugal;

namespace {
std::string g_root, g_dir;
}

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  g_root = fuzz::scratch() + "/checkpoints";
  CheckpointData d;
  d.model = {{"w", at::arange(6, at::kFloat)}};
  d.optimizer = {{"g0.exp_avg", at::zeros({6})}};
  d.state = {{"loop",
              {{"step", 7},
               {"tokens", 700},
               {"loss_sum", 1.5},
               {"window_steps", 1},
               {"window_tokens", 100},
               {"window_s", 0.1},
               {"final_val", "nan"},
               {"best_val", "inf"},
               {"final_train", 2.0},
               {"last_eval_step", -1},
               {"eval_pending", false},
               {"elapsed_s", 3.0},
               {"startup_s", 1.0},
               {"lr_scale", 1.0},
               {"rollbacks", 0}}},
             {"metric", {{"name", "val_loss"}, {"value", 2.5}}}};
  d.data_state = {{"kind", "index"}, {"next_micro_batch", 14}};
  g_dir = write_checkpoint(g_root, 7, d);
  if (const char* s = fuzz::seed_dir())
    fuzz::write_whole(std::string(s) + "/state.json", read_file(g_dir + "/state.json"));
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string state(reinterpret_cast<const char*>(data), size);
  fuzz::write_whole(g_dir + "/state.json", state);
  fuzz::write_whole(g_dir + "/COMPLETE", fmt::format("frugal-checkpoint {} state.json xxh3={} bytes={}\n",
                                                     kCheckpointVersion, xxh3_hex(state), state.size()));
  try {
    list_checkpoints(g_root);
    if (verify_checkpoint(g_dir).empty()) {
      LoadedCheckpoint c = load_checkpoint(g_dir);
      if (c.state.contains("loop")) frugal::detail::loop_state_from_json(c.state["loop"]);
    }
  } catch (const Error&) {
  }
  return 0;
}
