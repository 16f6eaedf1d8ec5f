// The Trainer's checkpoint saves (every rank's optimizer shard, then rank 0's write), the
// divergence guard's rollback and the checkpoint figures of summary.json; see
// internal/trainer_state.h.
#include <fmt/format.h>

#include <filesystem>

#include "frugal/ckpt/retention.h"
#include "frugal/ckpt/run_dir.h"
#include "frugal/ckpt/state_shards.h"
#include "frugal/core/atomic_file.h"
#include "frugal/core/console.h"
#include "frugal/core/crash_report.h"
#include "frugal/core/errors.h"
#include "frugal/core/phase_trace.h"
#include "train/internal/trainer_state.h"

namespace frugal {
namespace fs = std::filesystem;

// Sharded checkpoints: every rank writes its pieces of the weights and of the optimizer state to
// staged files at once (in parallel), then rank 0 learns of each file (its path, size, xxh3 and
// pieces) and moves them into the checkpoint it writes. A rank that cannot write its files stops
// every rank with the reason.
void Trainer::State::stage_shards(CheckpointData& d) {
  const int64_t rank = dp ? dp->rank() : 0, world = dp ? dp->world_size() : 1;
  // No retention pass of rank 0's previous write runs while the ranks stage: it removes the
  // staging directories of processes it cannot see (another machine's).
  writer->wait();
  if (dp) dp->any(false);
  StagedShard weights, moments;
  std::string error;
  int error_number = 0;  // a full disk stays one (exit 2)
  {
    CrashPhase phase("write this rank's shards of the weights and the optimizer state");
    try {
      const Optimizer& opt = step->optimizer();
      StateShard w = opt.weights_shard(saved_tensors());
      const c10::ScalarType dtype = sharded_weights_dtype(writer->options());
      for (auto& e : w.entries)
        for (auto& v : e.values)
          if (v.is_floating_point()) v = v.to(dtype);
      weights = stage_state_shard(writer->root(), loop.step, rank, world, w, kModelShards);
      moments = stage_state_shard(writer->root(), loop.step, rank, world, opt.state_shard());
    } catch (const std::exception& e) {
      error = e.what();
      if (const auto* io = dynamic_cast<const IoError*>(&e)) error_number = io->error_number();
    }
  }
  auto remove_staged = [&] {
    std::error_code ec;
    for (const StagedShard* s : {&weights, &moments})
      if (!s->path.empty()) remove_tree(fs::path(s->path).parent_path().string(), ec);
  };
  const bool failed = dp ? dp->any(!error.empty()) : !error.empty();
  if (!error.empty()) {
    remove_staged();
    throw IoError(fmt::format("checkpoint at step {}: {}", loop.step, error), error_number);
  }
  if (failed) {  // this rank's files will not be moved in: not left behind either
    remove_staged();
    throw IoError(
        fmt::format("checkpoint at step {}: another rank could not write its shards (its output says why)", loop.step));
  }
  if (!dp) {
    d.model_shards.push_back(std::move(weights));
    d.optimizer_shards.push_back(std::move(moments));
    return;
  }
  const nlohmann::json mine = {{"model", weights.to_json()}, {"optimizer", moments.to_json()}};
  const auto all = dp->gather_strings(mine.dump(), fmt::format("shard/{}/{}", ++checkpoint_exchanges, loop.step));
  for (const std::string& one : all) {
    const nlohmann::json j = nlohmann::json::parse(one);
    d.model_shards.push_back(StagedShard::from_json(j.at("model")));
    d.optimizer_shards.push_back(StagedShard::from_json(j.at("optimizer")));
  }
}

void Trainer::State::save_checkpoint() {
  if (last_saved_step == loop.step) return;  // nothing new since the last save (or the resume)
  settle_queued_steps();
  PhaseSpan span("checkpoint");
  const auto t0 = detail::Clock::now();
  CheckpointData d = capture(writer->async());  // a collective under ZeRO-1: every rank calls it
  if (step->optimizer().shards_state()) stage_shards(d);
  if (is_writer()) {
    CrashPhase phase(writer->async() ? "hand over to the checkpoint writer" : "write");
    last_checkpoint = writer->save(loop.step, std::move(d));
  }
  const double stall = seconds_since(t0);
  writer->record_stall(stall);
  checkpoint_s_window += stall;
  checkpoint_s_total += stall;
  last_saved_step = loop.step;
  CheckpointEvent e{loop.step, last_checkpoint, stall, writer->async(), writer->stats().last_write_s};
  CrashPhase phase("callbacks' on_checkpoint");
  for (auto& cb : callbacks) cb->on_checkpoint(e);
}

// A resumed run applies its checkpoint.keep_last and keep_best to the checkpoints already there as
// it starts (the run directory locked, nothing written yet), not only after its first save: a
// lower keep_last then frees space on a full disk before the run needs it. The checkpoint it
// resumed from stays, whatever the rules say.
void Trainer::State::apply_retention_on_resume() {
  if (resumed_from.empty() || !is_writer()) return;
  const CheckpointConfig& k = rc.config.checkpoint;
  note_written(resumed_from);  // load_checkpoint verified it whole: not read again
  std::vector<std::string> removed, not_removed;
  try {
    removed = apply_retention(RunDir(run_dir).checkpoints(), RetentionPolicy{k.keep_last, k.keep_best, k.best_mode},
                              resumed_from, &not_removed);
  } catch (const std::exception& e) {  // the run can still go on; its first save tries again
    Console::get().line(
        fmt::format("resume: warning: checkpoints beyond checkpoint.keep_last were not removed: {}", e.what()));
    return;
  }
  for (const std::string& p : removed)
    Console::get().line(fmt::format("resume: removed {} (checkpoint.keep_last = {}, checkpoint.keep_best = {})", p,
                                    k.keep_last, k.keep_best));
  for (const std::string& p : not_removed)
    Console::get().line(
        fmt::format("resume: warning: cannot remove {} (beyond checkpoint.keep_last = {}); it stays, "
                    "using disk space: fix its permissions or remove it by hand",
                    p, k.keep_last));
}

void Trainer::State::rollback(Control& control) {
  control.clear_rollback_request();
  const GuardConfig& g = rc.config.guard;
  const std::string why = control.rollback_reason();
  if (loop.rollbacks >= g.max_rollbacks) {
    control.request_stop(fmt::format("divergence guard: {}; stopped after {} rollback(s) "
                                     "(guard.max_rollbacks = {})",
                                     why, loop.rollbacks, g.max_rollbacks),
                         StopKind::kGuard);
    return;
  }
  writer->wait();
  if (dp) dp->any(false);  // a barrier: rank 0's last write is complete before any rank lists
  const std::string root = writer->root();
  std::string target;
  for (const auto& c : list_checkpoints(root)) {
    if (c.complete && c.step <= control.rollback_max_step() && verify_checkpoint(c.path).empty()) {
      target = c.path;
      break;
    }
  }
  if (target.empty()) {
    control.request_stop(fmt::format("divergence guard: {}; no sound checkpoint at or before step {} to "
                                     "roll back to (set checkpoint.every_steps to keep some)",
                                     why, control.rollback_max_step()),
                         StopKind::kGuard);
    return;
  }
  LoadedCheckpoint ck = load_checkpoint(target);
  if (is_writer()) remove_checkpoints_after(root, ck.step);  // they hold the diverged trajectory
  const double lr_scale = loop.lr_scale * g.lr_factor;
  const int64_t rollbacks = loop.rollbacks + 1;
  const int64_t from = loop.step;
  // The time and money spent on the diverged steps stay spent: billing and the state that
  // describes the world (the cost meter's alerts) carry across the rollback (restore() would take
  // the checkpoint's).
  const double elapsed_s = loop.elapsed_s, startup = loop.startup_s;
  // So does an end a deadline moved (the deadline did not move with the weights).
  const int64_t end_step = loop.end_step, decay_from = loop.decay_from;
  const std::string end_reason = loop.end_reason;
  std::vector<nlohmann::json> kept(callbacks.size());
  for (size_t i = 0; i < callbacks.size(); ++i)
    if (callbacks[i]->state_survives_rollback()) callbacks[i]->save_state(kept[i]);
  restore(ck);
  loop.elapsed_s = elapsed_s;
  loop.startup_s = startup;
  loop.end_step = end_step;
  loop.decay_from = decay_from;
  loop.end_reason = end_reason;
  for (size_t i = 0; i < callbacks.size(); ++i)
    if (callbacks[i]->state_survives_rollback()) callbacks[i]->load_state(kept[i]);
  loop.lr_scale = lr_scale;
  loop.rollbacks = rollbacks;
  rollback_log.push_back({{"at_step", from}, {"to_step", ck.step}, {"reason", why}, {"lr_scale", lr_scale}});
  Console::get().line(
      fmt::format("guard: {}; rolled back from step {} to {} with the learning rate x{} "
                  "(rollback {} of {})",
                  why, from, ck.step, lr_scale, rollbacks, g.max_rollbacks));
}

void Trainer::State::add_checkpoint_summary(nlohmann::ordered_json& summary) const {
  const CheckpointWriterStats cs = writer->stats();
  const auto listing = list_checkpoints(writer->root());
  summary["checkpoint"] = {{"saves", cs.saves},
                           {"async", writer->async()},
                           {"stall_s_total", cs.stall_s_total},
                           {"stall_s_mean", cs.saves ? cs.stall_s_total / static_cast<double>(cs.saves) : 0.0},
                           {"stall_s_max", cs.stall_s_max},
                           {"stall_s_each", cs.stall_s_each},
                           {"write_s_mean", cs.saves ? cs.write_s_total / static_cast<double>(cs.saves) : 0.0},
                           {"bytes", cs.last_bytes},
                           {"latest", last_checkpoint},
                           {"best", best_checkpoint(listing, rc.config.checkpoint.best_mode)},
                           {"resumed_from", resumed_from}};
}

}  // namespace frugal
