// The Trainer's checkpoints (capture, restore), its banner and its summary; see
// internal/trainer_state.h (saving and the divergence rollback: trainer_checkpoint.cpp).
#include "train/internal/trainer_state.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "frugal/ckpt/retention.h"
#include "frugal/ckpt/run_dir.h"
#include "frugal/ckpt/safetensors.h"
#include "frugal/core/atomic_file.h"
#include "frugal/core/console.h"
#include "frugal/core/crash_report.h"
#include "frugal/core/device.h"
#include "frugal/core/errors.h"
#include "frugal/core/memory.h"
#include "frugal/core/phase_trace.h"
#include "frugal/data/token_dataset.h"
#include "frugal/model/freeze.h"
#include "frugal/model/weights.h"
#include "frugal/monitor/report.h"
#include "frugal/train/lr_schedule.h"
#include "frugal/train/run_config.h"

namespace frugal {
namespace fs = std::filesystem;

namespace {

// The resolved value of every key, to diff a checkpoint's config against this run's.
nlohmann::json config_values(const Config& c) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& k : config_schema()) j[k.key] = format_value_shown(k, c);
  return j;
}

}  // namespace

// A resume continues with the run's own config: keys left at their defaults take the run's values,
// deliberate changes of safe keys are said and recorded, others refused (run_config.h). The
// precision `auto` chose before is settled by precision_to_continue (run_setup.h).
void Trainer::State::adopt_run_config(const LoadedCheckpoint& ck) {
  check_same_dataset(ck);
  if (ck.state.contains("config_changes") && ck.state["config_changes"].is_array())
    config_changes = ck.state["config_changes"];
  if (!ck.state.contains("config_values")) return;
  std::vector<std::string> not_taken;
  for (const ConfigChange& change : reconcile_resume_config(rc, ck.state["config_values"], ck.path, &not_taken)) {
    Console::get().line(fmt::format("resume: {} = {} -> {} ({}), as asked; recorded in summary.json", change.key,
                                    change.from, change.to, change.origin));
    config_changes.push_back(change.to_json(ck.step));
    warn_if_rewarmed(change, ck.step);
  }
  if (!not_taken.empty())
    Console::get().line(
        fmt::format("resume: {} is another run's checkpoint: its {} not taken (commands and servers "
                    "are the run's own); set them here to use them",
                    ck.path, fmt::join(not_taken, ", ")));
}

// A prepared dataset is the checkpoint's when its shard list is (dataset_fingerprint): the same
// path prepared again from other inputs (`frugal prepare --force`) would continue the data order
// over other documents. Refused before anything is written; checkpoints from before the
// fingerprint was kept are taken as they are.
void Trainer::State::check_same_dataset(const LoadedCheckpoint& ck) {
  const DataSource& src = rc.config.data.source;
  const std::string then = ck.state.value("dataset_fingerprint", "");
  if (then.empty() || dataset_fingerprint_at_start.empty() || then == dataset_fingerprint_at_start) return;
  throw ConfigError(
      fmt::format("{}: data.source = \"{}\" is not the dataset this checkpoint trained on: its manifest.json lists "
                  "other shards (prepared again since, from other inputs?)\n  hint: resume on the dataset the run "
                  "started with, or start a new run from these weights: frugal export {} --weights {} --out DIR, "
                  "then --set run.name=NEW --set model.init_from=hf:DIR",
                  ck.path, to_string(src), fs::path(ck.path).parent_path().parent_path().string(), ck.path));
}

// More train.steps on a WSD run stopped in its decay moves the decay later: the rate goes back up
// to the peak first. On a cosine schedule any new length moves the rate of the steps still to come
// (a finished run's floor jumps back up). Allowed (a run may be extended on purpose), and said.
void Trainer::State::warn_if_rewarmed(const ConfigChange& change, int64_t at_step) const {
  const TrainConfig& t = rc.config.train;
  if (change.key != "train.steps" || task.hooks.lr_schedule) return;
  int64_t before = 0;
  try {
    before = std::stoll(change.from);
  } catch (const std::exception&) {
    return;
  }
  if (t.schedule == LrSchedule::kCosine) {
    const double from = schedule_lr(std::min(at_step, before - 1), t, before), to = schedule_lr(at_step, t, t.steps);
    if (at_step >= t.warmup_steps && std::abs(to - from) > 0.01 * std::abs(from))
      Console::get().line(fmt::format(
          "warning: resume: the cosine decay follows train.steps, so with {} instead of {} the rate at step {} is "
          "{:.4g}, not the {:.4g} the run was at. train.schedule = \"wsd\" extends a run without moving its rate "
          "(docs/levers.md)",
          t.steps, before, at_step, to, from));
    return;
  }
  const int64_t was = wsd_decay_start(before, t.warmup_steps, t.decay_fraction);
  const int64_t now = wsd_decay_start(t.steps, t.warmup_steps, t.decay_fraction);
  if (at_step <= was || now <= was) return;
  const double from = schedule_lr(at_step, t, before), to = schedule_lr(at_step, t, t.steps);
  Console::get().line(fmt::format(
      "warning: resume: the WSD decay had begun (at step {} of train.steps = {}; this checkpoint is at step {}); "
      "with train.steps = {} it begins at step {}, so the rate goes back up, from {:.4g} to {:.4g}{}. To finish "
      "the decay instead, keep train.steps = {}",
      was, before, at_step, t.steps, now, from, to,
      at_step < now ? fmt::format(" (the peak, train.lr, until step {})", now) : "", before));
}

// --resume auto on a run that has no sound checkpoint (killed before its first, or its only one
// damaged): the run starts again from step 0 with its own config.toml, as a resume would continue
// it (keys left unset take the run's values, deliberate changes follow the resume rules), never
// with the defaults of what this invocation left unset, which would train another model on other
// data over the run's files.
void Trainer::State::start_over_with_run_config() {
  const std::string file = RunDir::of(rc.config).config();
  std::error_code ec;
  if (!fs::is_regular_file(file, ec)) return;
  const Config own = resolve_config(file, {}, {}).config;
  nlohmann::json values = nlohmann::json::object();
  for (const KeySpec& k : config_schema())
    if (!k.secret) values[k.key] = format_value(k.get(own));
  for (const ConfigChange& change : reconcile_resume_config(rc, values, file)) {
    Console::get().line(fmt::format("resume: {} = {} -> {} ({}), as asked; recorded in summary.json", change.key,
                                    change.from, change.to, change.origin));
    config_changes.push_back(change.to_json(0));
  }
  started_over = true;
  Console::get().line(fmt::format("resume: starting over from step 0 with the run's own config, {}", file));
}

CheckpointData Trainer::State::capture(bool snapshot) {
  CheckpointData d;
  {
    CrashPhase phase(snapshot ? "capture: weights and optimizer state, copied to the host"
                              : "capture: weights and optimizer state");
    // Sharded (ZeRO on several processes): each rank writes its own pieces of the weights and the
    // optimizer state instead (save_checkpoint).
    if (!step->optimizer().shards_state()) {
      d.model = saved_tensors();
      if (step->optimizer().gathers_parameters())  // block by block
        d.model = host_copies(step->optimizer(), d.model, is_writer());
      d.optimizer = step->optimizer().state_tensors();
    }
    if (snapshot && is_writer()) writer->snapshot(d);  // the others write no copy of it
    loop.loss_sum = loss_sum.item<double>();
  }
  nlohmann::json& st = d.state;
  st["loop"] = detail::to_json(loop);
  // The wall time of every session up to this capture (tokens_per_s and train.max_minutes after a
  // resume count all of it, not only the last session's).
  st["loop"]["elapsed_s"] = loop.elapsed_s + seconds_since(session_start);
  st["loop"]["startup_s"] = loop.startup_s + startup_s;
  st["optimizer_steps"] = step->optimizer().step_count();
  if (!frozen.is_null()) st["frozen"] = frozen;
  st["global_batch"] = setup.global_batch;  // sequences per step over every process (elastic resume)
  if (!dataset_fingerprint_at_start.empty()) st["dataset_fingerprint"] = dataset_fingerprint_at_start;
  st["world_size"] = setup.world_size;
  const ScaleState& ss = step->scaler().state();
  st["loss_scaler"] = {{"enabled", step->scaler().enabled()},
                       {"scale", ss.scale},
                       {"growth_tracker", ss.growth_tracker},
                       {"skipped", ss.skipped},
                       {"skipped_at_floor", ss.skipped_at_floor}};
  st["precision"] = step->precision().name();
  st["kernels"] = setup.kernels;     // model.kernels = "auto" keeps it on resume (choose_kernels)
  st["threads"] = threads.intra_op;  // kept on resume with run.threads = 0 (trainer.cpp)
  st["rng"] = {{"cpu", detail::cpu_rng_state_hex()}};
  if (device.is_cuda()) {  // every visible GPU's generator: dropout masks on the GPU resume exactly
    CrashPhase phase("capture: GPU random-number state");
    nlohmann::json gpus = nlohmann::json::array();
    for (const auto& bytes : device::cuda_rng_states()) gpus.push_back(detail::bytes_to_hex(bytes));
    st["rng"]["cuda"] = gpus;
  }
  st["lr_schedule"] = {{"position", step->optimizer().step_count()}, {"lr_scale", loop.lr_scale}};
  nlohmann::json cbs = nlohmann::json::object();
  CrashPhase callbacks_phase("capture: callbacks' state");
  for (const auto& cb : callbacks) {
    if (cb->state_key().empty()) continue;
    nlohmann::json one;
    cb->save_state(one);
    cbs[cb->state_key()] = one;
  }
  st["callbacks"] = cbs;
  // The ranking value for checkpoint.keep_best, only when measured at this very step.
  const Metric metric = rc.config.checkpoint.best_metric;
  double value = NAN;
  if (metric == Metric::kValLoss && loop.last_eval_step == loop.step) value = loop.final_val;
  if (metric == Metric::kLoss && loop.window_steps == 0) value = loop.final_train;
  if (metric == Metric::kGradNorm && logged_grad_norm_step == loop.step) value = logged_grad_norm;
  if (!std::isnan(value)) st["metric"] = {{"name", metric_name(metric)}, {"value", value}};
  st["config_toml"] = rc.to_toml();
  st["config_values"] = config_values(rc.config);
  st["config_changes"] = config_changes;
  st["frugal_version"] = FRUGAL_VERSION;
  // In-memory sources draw micro-batch i as a function of (seed, i): the cursor is the next i.
  d.data_state = {{"kind", "index"},
                  {"next_micro_batch", loop.step * step->accum()},
                  {"next_sample", loop.step * setup.global_batch},
                  {"world_size", setup.world_size}};
  // Shard sources also record their (epoch, position) cursor; it names the same place.
  CrashPhase data_phase("capture: data cursor");
  if (nlohmann::json cursor = data->state(); !cursor.is_null()) {
    d.data_state["cursor"] = cursor;
    // Data parallel: each rank has its own cursor; rank 0's checkpoint lists them in rank order.
    if (dp) {
      auto all = dp->gather_strings(cursor.dump(), fmt::format("cursor/{}/{}", ++checkpoint_exchanges, loop.step));
      for (const auto& one : all) d.data_state["cursors"].push_back(nlohmann::json::parse(one));
    }
  }
  return d;
}

void Trainer::State::restore(const LoadedCheckpoint& ck) {
  const nlohmann::json& st = ck.state;
  {
    torch::NoGradGuard no_grad;
    const nlohmann::json kept = st.value("frozen", nlohmann::json());
    if (!kept.is_null()) check_frozen_base(*model, kept, ck.path);  // loaded from model.init_from
    const NamedTensors params = without_frozen(module_tensors(*model), kept);
    const std::vector<at::Tensor> weights = matched_weights(params, SafetensorsFile{ck.weights, {}}, ck.path);
    // The optimizer's state first: reading it from the ranks' files is what can still fail.
    const int64_t steps = st.at("optimizer_steps").get<int64_t>();
    if (st.contains("optimizer_shards"))  // each process reads its own pieces
      step->optimizer().load_state_shards(ck.path, st["optimizer_shards"], steps);
    else
      step->optimizer().load_state(ck.optimizer, steps);
    // Under ZeRO-3 each rank writes its own chunk into its shard: the model is never whole here.
    step->optimizer().load_weights(params, weights);
  }
  const auto& ls = st.at("loss_scaler");
  step->scaler().set_state({ls.at("scale").get<double>(), ls.at("growth_tracker").get<int64_t>(),
                            ls.at("skipped").get<int64_t>(), ls.at("skipped_at_floor").get<int64_t>()});
  loop = detail::loop_state_from_json(st.at("loop"));
  loss_sum = torch::full({}, loop.loss_sum, torch::TensorOptions().dtype(torch::kFloat).device(device));
  restore_data_position(ck);
  detail::set_cpu_rng_state_hex(st.at("rng").at("cpu").get<std::string>());
  if (device.is_cuda() && st.at("rng").contains("cuda")) {
    std::vector<std::vector<uint8_t>> gpus;
    for (const auto& h : st["rng"]["cuda"]) gpus.push_back(detail::hex_to_bytes(h.get<std::string>(), "rng.cuda"));
    device::set_cuda_rng_states(gpus);
  }
  nlohmann::json cbs = st.at("callbacks");
  // Checkpoints of frugal 0.1 kept the noise scale's averages beside the callbacks.
  if (!cbs.contains("grad_noise") && st.contains("grad_noise")) cbs["grad_noise"] = st["grad_noise"];
  for (auto& cb : callbacks) {
    const std::string key = cb->state_key();
    if (!key.empty() && cbs.contains(key)) cb->load_state(cbs[key]);
  }
  last_saved_step = ck.step;
  last_checkpoint = ck.path;
}

// The processes that wrote `ck`: state.json's world_size, else (older checkpoints) the number of
// data cursors, else one.
int64_t Trainer::State::checkpoint_world_size(const LoadedCheckpoint& ck) {
  if (ck.state.contains("world_size")) return ck.state["world_size"].get<int64_t>();
  const nlohmann::json& cursors = ck.data_state.contains("cursors") ? ck.data_state["cursors"] : nlohmann::json();
  return cursors.is_array() ? static_cast<int64_t>(cursors.size()) : 1;
}

// Where the data continues: every source draws micro-batch `step x accum` next as a pure function
// of the step (and the sampler's rank and world size), so the position only needs checking; the
// shard and record sources also take their cursors, to start prefetching there. On another
// number of processes the cursors describe other streams and are not used.
void Trainer::State::restore_data_position(const LoadedCheckpoint& ck) {
  const int64_t world = setup.world_size;
  if (ck.data_state.contains("next_sample")) {
    const int64_t expect = loop.step * setup.global_batch, got = ck.data_state["next_sample"].get<int64_t>();
    if (got != expect)
      throw CheckpointError(
          fmt::format("{}: data_state.json's next_sample {} does not match step {} x the global batch "
                      "{}; data.micro_batch, train.accum or train.global_batch changed since the "
                      "checkpoint",
                      ck.path, got, loop.step, setup.global_batch));
  } else if (checkpoint_world_size(ck) == world) {
    const int64_t expect = loop.step * step->accum();
    if (ck.data_state.value("next_micro_batch", expect) != expect)
      throw CheckpointError(
          fmt::format("{}: data_state.json's next_micro_batch {} does not match step {} x "
                      "accum {}; train.accum or the batch size changed since the checkpoint",
                      ck.path, ck.data_state.value("next_micro_batch", int64_t{0}), loop.step, step->accum()));
  }
  if (checkpoint_world_size(ck) != world) return;
  const nlohmann::json& cursors = ck.data_state.contains("cursors") ? ck.data_state["cursors"] : nlohmann::json();
  if (dp && cursors.is_array())
    data->load_state(cursors[static_cast<size_t>(dp->rank())]);
  else if (!dp && ck.data_state.contains("cursor"))
    data->load_state(ck.data_state["cursor"]);
}

void Trainer::State::print_banner() const {
  const Config& c = rc.config;
  auto& con = Console::get();
  // threads.blas < 0: the BLAS has no pool of its own (the wheel's MKL follows LibTorch's threads).
  const std::string blas = threads.blas >= 0 ? fmt::format(", BLAS threads {}", threads.blas) : "";
  con.line(fmt::format("frugal {} | LibTorch {} | device {} | threads {} ({}){}", FRUGAL_VERSION, TORCH_VERSION,
                       device.str(), threads.intra_op, threads.reason, blas));
  con.line(fmt::format("config (besides the defaults; all of it in {}/config.toml):\n{}", run_dir, rc.summary()));
  const std::string what = task.hooks.describe.empty() ? model->name() : task.hooks.describe;
  con.line(fmt::format(
      "model: {} | {:.3f}M parameters{}", what, static_cast<double>(info.params) / 1e6,
      setup.flops_per_token > 0 ? fmt::format(" | {:.1f} MFLOP/token (training)", setup.flops_per_token / 1e6) : ""));
  con.line(fmt::format("data: {} | {} training {}s, {} validation {}s | run dir {}", data->describe(),
                       data->train_tokens(), setup.item, data->val_tokens(), setup.item, run_dir));
  con.line("levers: " + levers_line(setup, c));
  std::vector<std::string> lines;
  for (const auto& cb : callbacks) cb->add_to_banner(lines);
  for (const auto& l : lines) con.line(l);
}

nlohmann::json Trainer::State::finish(const Control& ended) {
  const Config& c = rc.config;
  Control control = ended;
  // Past the budget, no more compute is spent on a final evaluation; the weights are still saved.
  auto evaluates = [](StopKind k) {
    return k != StopKind::kPreempted && k != StopKind::kGuard && k != StopKind::kBudget;
  };
  settle_queued_steps();  // on a GPU, the steps since the last log step
  if (evaluates(control.stop_kind()) && loop.last_eval_step != loop.step) {
    CrashPhase phase("final evaluation");
    Control during;  // the run is over: what this evaluation's callbacks ask changes nothing
    // A stop signal during it stops the run as one during training does: checkpointed with the
    // evaluation pending (the resumed run evaluates first), exit 75, not a completed run without it.
    if (!run_eval(during)) check_signal(control);
    if (dp) dp->agree(control);
  }
  const StopKind kind = stopped = control.stop_kind();
  const bool healthy = kind != StopKind::kPreempted && kind != StopKind::kGuard;
  const bool evaluate = evaluates(kind);
  {
    CrashPhase phase("final checkpoint");
    // A resumed session that trained no step (stopped before it) has nothing new to save: the
    // checkpoint it resumed from holds this very state.
    const bool trained = session_steps > 0 || loop.step == 0;
    if (trained && ((c.checkpoint.enabled && healthy) || kind == StopKind::kPreempted)) save_checkpoint();
    writer->wait();
  }
  CrashPhase phase("summary");
  nlohmann::ordered_json summary = loop_summary(control, evaluate);
  if (healthy) {
    CrashPhase weights("final weights");
    NamedTensors tensors = module_tensors(*model);
    if (step->optimizer().gathers_parameters())  // a collective; only rank 0 keeps them
      tensors = host_copies(step->optimizer(), tensors, is_writer());
    if (is_writer())
      save_safetensors(RunDir(run_dir).final_weights(), tensors,
                       {{"format", "pt"}, {"frugal_step", std::to_string(loop.step)}});
  }
  for (auto& cb : callbacks) cb->add_to_summary(summary);
  if (is_writer()) {
    write_file_atomic(RunDir(run_dir).summary(), summary.dump(2) + "\n");
    write_report(run_dir);
  }
  CrashPhase end("callbacks' on_train_end");
  for (auto& cb : callbacks) cb->on_train_end(summary);
  return summary;
}

// The loop's own figures for summary.json (the callbacks add theirs after).
nlohmann::ordered_json Trainer::State::loop_summary(const Control& control, bool evaluated) {
  const Config& c = rc.config;
  const double wall_s = loop.elapsed_s + seconds_since(session_start);
  nlohmann::ordered_json summary;
  summary["run_name"] = c.run.name;
  summary["steps"] = loop.step;
  summary["tokens"] = loop.tokens;
  summary["wall_s"] = wall_s;
  summary["startup_s"] = loop.startup_s + startup_s;  // billed, not part of wall_s or tokens_per_s
  summary["tokens_per_s"] = static_cast<double>(loop.tokens) / wall_s;
  summary["samples_per_s"] = wall_s > 0 ? static_cast<double>(loop.step * setup.global_batch) / wall_s : 0.0;
  summary["final_train_loss"] = loop.final_train;
  summary["final_val_loss"] = loop.final_val;
  summary["best_val_loss"] = loop.best_val;
  if (!final_metrics.empty()) summary["final_metrics"] = final_metrics;  // the task's own figures
  summary["unigram_baseline_loss"] = data->unigram_baseline();
  summary["model"] = task.hooks.describe.empty() ? model->name() : task.hooks.describe;
  summary["params"] = info.params;
  summary["trainable_params"] = info.trainable_params;
  summary["flops_per_token"] = setup.flops_per_token;
  summary["stop_reason"] = control.should_stop() ? control.stop_reason()
                           : total_steps() < rc.config.train.steps
                               ? fmt::format("completed at step {}, before train.steps = {}: {}", total_steps(),
                                             rc.config.train.steps, loop.end_reason)
                               : "completed";
  if (total_steps() < rc.config.train.steps)
    summary["end_moved"] = {
        {"step", total_steps()}, {"train_steps", rc.config.train.steps}, {"reason", loop.end_reason}};
  summary["stop_kind"] = stop_kind_name(control.stop_kind());
  const double n_steps = static_cast<double>(std::max<int64_t>(1, session_steps));
  summary["data_ms_per_step"] = 1e3 * session_phases.data_s / n_steps;
  summary["forward_ms_per_step"] = 1e3 * session_phases.forward_s / n_steps;
  summary["backward_ms_per_step"] = 1e3 * session_phases.backward_s / n_steps;
  summary["optimizer_ms_per_step"] = 1e3 * session_phases.optimizer_s / n_steps;
  summary["data_wait_fraction"] = session_step_s > 0 ? session_phases.data_s / session_step_s : 0.0;
  summary["eval_ms_per_step"] = 1e3 * eval_s_total / n_steps;
  summary["checkpoint_ms_per_step"] = 1e3 * checkpoint_s_total / n_steps;
  summary["eval_s_total"] = eval_s_total;
  summary["checkpoint_s_total"] = checkpoint_s_total;
  summary["precision"] = step->precision().name();  // it may have fallen back from fp16 during the run
  summary["precision_reason"] = step->precision().reason();
  summary["global_batch"] = setup.global_batch;
  summary["accum"] = setup.accum;
  summary["micro_batch_effective"] = step->micro_batch_effective();
  summary["accum_effective"] = step->accum_effective();
  summary["oom_backoffs"] = step->oom_backoffs();
  summary["cuda_graph_steps"] = step->graphed_steps();
  summary["optimizer_steps"] = step->optimizer().step_count();
  summary["skipped_steps"] = step->scaler().state().skipped;
  summary["loss_scale"] = step->scaler().scale();
  summary["activation_checkpointing"] = to_string(setup.activation_checkpointing);
  // The levers decided at the start; the precision as it ended (an fp16 run may fall back to bf16).
  summary["levers"] = levers_json(setup, rc.config);
  summary["levers"]["precision"]["mode"] = step->precision().name();
  summary["levers"]["precision"]["reason"] = step->precision().reason();
  add_memory_summary(summary);
  if (dp) dp->add_to_summary(summary, session_step_s, session_steps);
  if (evaluated && task.hooks.extend_summary) {
    WholeParameters whole(step->optimizer(), /*keep_writes=*/false);  // its decoding reads every block
    if (is_writer()) task.hooks.extend_summary(summary);
  }
  add_checkpoint_summary(summary);
  summary["rollbacks"] = rollback_log;
  if (!config_changes.empty()) summary["config_changes"] = config_changes;
  summary["lr_scale"] = loop.lr_scale;
  summary["device"] = device.str();
  summary["threads"] = threads.intra_op;
  summary["data"] = data->describe();
  summary["frugal_version"] = FRUGAL_VERSION;
  summary["torch_version"] = TORCH_VERSION;
  return summary;
}

void Trainer::State::add_memory_summary(nlohmann::ordered_json& summary) const {
  if (tensor_bytes_limit() > 0) summary["memory_limit_mb"] = static_cast<double>(tensor_bytes_limit()) / 1048576.0;
  if (counting_allocator_installed()) summary["peak_tensor_mb"] = static_cast<double>(tensor_bytes_peak()) / 1e6;
  summary["peak_rss_mb"] = static_cast<double>(rss_peak_bytes()) / 1e6;
  if (device.is_cuda()) {  // the caching allocator's figures: live tensors and what it reserved
    const device::MemoryFigures g = device::cuda_memory(device);
    summary["peak_tensor_mb"] = static_cast<double>(g.allocated_peak) / 1e6;
    summary["peak_reserved_mb"] = static_cast<double>(g.reserved_peak) / 1e6;
  }
  if (dp) {  // every rank's peak, in rank order (a collective)
    const std::string mine = summary.contains("peak_tensor_mb") ? summary["peak_tensor_mb"].dump() : "null";
    nlohmann::json all = nlohmann::json::array();
    for (const std::string& one : dp->gather_strings(mine, fmt::format("peak/{}", loop.step)))
      all.push_back(nlohmann::json::parse(one));
    if (is_writer()) summary["peak_tensor_mb_per_rank"] = all;
  }
  summary["optimizer_state_mb"] = static_cast<double>(step->optimizer().state_bytes()) / 1e6;
  const TrainStep::StateBytes b = step->state_bytes();
  summary["state_bytes_per_rank"] = {{"parameters", b.parameters}, {"working_weights", b.working_weights},
                                     {"gradients", b.gradients},   {"optimizer", b.optimizer},
                                     {"total", b.total()},         {"optimizer_in_host_memory", b.optimizer_host}};
}

}  // namespace frugal
