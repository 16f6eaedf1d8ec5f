// The training loop; see trainer.h. Checkpoint capture/restore and the run summary live in
// trainer_state.cpp; this file holds construction and the loop.
#include "frugal/train/trainer.h"

#include <torch/torch.h>

#include <atomic>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <optional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "frugal/ckpt/retention.h"
#include "frugal/core/atomic_file.h"
#include "frugal/core/device.h"
#include "frugal/core/dir_lock.h"
#include "frugal/core/errors.h"
#include "frugal/data/token_dataset.h"
#include "frugal/monitor/console.h"
#include "frugal/monitor/memory.h"
#include "frugal/monitor/metrics_writer.h"
#include "frugal/monitor/phase_trace.h"
#include "frugal/train/deadline.h"
#include "frugal/train/early_stopping.h"
#include "frugal/train/gpt_task.h"
#include "frugal/train/divergence_guard.h"
#include "frugal/train/lr_schedule.h"
#include "frugal/train/preemption.h"
#include "train/internal/trainer_state.h"

namespace frugal {
namespace fs = std::filesystem;
using detail::seconds_since;

namespace {

// Prepares runs/<name>/: refuses to clobber an earlier run unless asked to or resuming, and
// locks it (one process per run directory: a second one would delete the first one's in-flight
// checkpoint writes as debris).
std::string prepare_run_dir(const Config& c, bool overwrite, bool resuming, std::unique_ptr<DirLock>& lock) {
  fs::path dir = fs::path(c.run.out_dir) / c.run.name;
  bool used = fs::exists(dir / "metrics.jsonl") || fs::exists(dir / "summary.json") ||
              fs::exists(dir / "final") || fs::exists(dir / "checkpoints");
  if (used && !overwrite && !resuming)
    throw ConfigError(fmt::format(
        "run directory {} already holds a run; pass --resume auto to continue it, --overwrite to "
        "replace it, or choose another name with --set run.name=NAME",
        dir.string()));
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw IoError(fmt::format("cannot create run directory {}: {}", dir.string(), ec.message()));
  if (!lock) lock = std::make_unique<DirLock>(dir.string());  // a resume took it already
  if (used && overwrite && !resuming) {
    for (const char* f : {"metrics.jsonl", "summary.json", "final", "config.toml", "checkpoints"})
      fs::remove_all(dir / f, ec);
  }
  // Temp directories of checkpoint writes whose process died (a kill, a full disk) go now, before
  // the first save needs the space. The lock says no other process writes here, so every one is
  // stale, whatever pid its name carries (pids are reused, in containers from 1 up).
  for (const auto& p : remove_stale_debris((dir / "checkpoints").string(), /*all=*/true))
    Console::get().line(fmt::format("removed {} (left by a run that was killed while saving)", p));
  return dir.string();
}

// FRUGAL_FAULT_KILL_AT=STAGE:N (tests/chaos/chaos_test.sh): SIGKILL this process right after STAGE
// (a write_stage_name) of its Nth checkpoint write, as a power cut or the OOM killer would; unset
// in normal use.
std::function<void(WriteStage)> fault_kill_hook() {
  const char* env = std::getenv("FRUGAL_FAULT_KILL_AT");
  if (!env || !*env) return {};
  const std::string v(env);
  const size_t colon = v.find(':');
  const std::string stage = v.substr(0, colon);
  const std::string nth = colon == std::string::npos ? "1" : v.substr(colon + 1);
  bool known = false;
  for (WriteStage w : {WriteStage::kTempDir, WriteStage::kModel, WriteStage::kMaster, WriteStage::kOptimizer,
                       WriteStage::kDataState, WriteStage::kState, WriteStage::kRenamed, WriteStage::kMarker})
    known = known || stage == write_stage_name(w);
  if (!known || nth.empty() || nth.size() > 9 || nth.find_first_not_of("0123456789") != std::string::npos)
    throw ConfigError(fmt::format("FRUGAL_FAULT_KILL_AT = \"{}\" must be STAGE:N with STAGE one of temp_dir, model, "
                                  "master, optimizer, data_state, state, renamed, marker and N a save number "
                                  "(1 = the first); unset it for a normal run",
                                  v));
  const int64_t n = std::stoll(nth);
  auto saves = std::make_shared<std::atomic<int64_t>>(0);
  return [stage, n, saves](WriteStage now) {
    if (now == WriteStage::kTempDir) ++*saves;  // every write starts with this stage
    if (*saves == n && stage == write_stage_name(now)) ::raise(SIGKILL);
  };
}

// data.source = "shards:DIR" records its vocabulary in the manifest: a model.vocab left at its
// default takes it from there, so that the two need not be kept in step by hand.
void adopt_dataset_vocab(ResolvedConfig& rc) {
  const std::string& src = rc.config.data.source;
  if (src.rfind("shards:", 0) != 0) return;
  ValueOrigin& origin = rc.origins.at("model.vocab");
  if (origin.kind != ValueOrigin::Kind::kDefault) return;  // set on purpose: checked against the data later
  const std::string dir = src.substr(7);
  const std::optional<ManifestTokenizer> tok = manifest_tokenizer(dir);
  if (!tok || tok->vocab == rc.config.model.vocab) return;
  rc.config.model.vocab = tok->vocab;
  origin = ValueOrigin{ValueOrigin::Kind::kFile, (fs::path(dir) / "manifest.json").string() + " tokenizer.vocab"};
}

// The checkpoint to resume from: "" for a fresh run.
std::string choose_checkpoint(const Config& c, const std::string& resume) {
  if (resume.empty()) return "";
  auto& con = Console::get();
  if (resume != "auto") return resume;
  const std::string root = (fs::path(c.run.out_dir) / c.run.name / "checkpoints").string();
  auto found = find_resumable(root, [&](const std::string& w) { con.line("resume: " + w); });
  if (!found) {
    con.line(fmt::format("resume: no sound checkpoint under {}; starting from step 0", root));
    return "";
  }
  return *found;
}

}  // namespace

Trainer::Trainer(ResolvedConfig config, TrainerOptions options)
    : Trainer(std::move(config), TaskFactory(make_gpt_task), std::move(options)) {}

Trainer::Trainer(ResolvedConfig config, Task task, TrainerOptions options)
    : Trainer(std::move(config), TaskFactory([t = std::move(task)](const Config&) { return t; }),
              std::move(options)) {}

Trainer::Trainer(ResolvedConfig config, TaskFactory make_task, TrainerOptions options)
    : s_(std::make_unique<State>()) {
  State& s = *s_;
  s.rc = std::move(config);
  adopt_dataset_vocab(s.rc);
  s.opts = std::move(options);
  // Installed first, so a stop signal during start-up (data, model, precision measurement) is
  // honoured too: fit() checks the flag before the first step.
  if (s.opts.handle_signals) s.signals = std::make_unique<SignalHandlers>();
  auto& con = Console::get();
  con.set_quiet(s.opts.quiet);
  con.set_json_mode(s.opts.json);  // stdout carries only JSON lines (--json)

  // A checkpoint is read first: it may pin the precision that `auto` chose before. A resume locks
  // the run directory before it picks a checkpoint, so a run still writing there is named rather
  // than read from mid-rotation.
  const fs::path run_path = fs::path(s.rc.config.run.out_dir) / s.rc.config.run.name;
  if (!s.opts.resume.empty() && (!s.opts.process_group || s.opts.process_group->rank() == 0) &&
      fs::is_directory(run_path))
    s.run_lock = std::make_unique<DirLock>(run_path.string());
  std::optional<LoadedCheckpoint> ck;
  const std::string ck_path = choose_checkpoint(s.rc.config, s.opts.resume);
  if (!ck_path.empty()) {
    ck = load_checkpoint(ck_path);
    s.adopt_checkpoint_config(*ck);
  }
  const Config& c = s.rc.config;
  s.device = torch::Device(c.run.device);
  if (s.device.is_cuda()) {
    if (!device::build_info().cuda_compiled)
      throw ConfigError(fmt::format("run.device = \"{}\" but frugal was built against a LibTorch without "
                                    "CUDA; rebuild against the CUDA wheel (scripts/install-deps.sh) or use "
                                    "run.device = \"cpu\"",
                                    c.run.device));
    const int gpus = device::cuda_device_count();
    if (gpus == 0 || (s.device.has_index() && s.device.index() >= gpus))
      throw ConfigError(fmt::format("run.device = \"{}\" but this process sees {} GPU(s) (check nvidia-smi "
                                    "and CUDA_VISIBLE_DEVICES); use run.device = \"cpu\" or \"cuda:0\"",
                                    c.run.device, gpus));
    device::set_deterministic(c.run.deterministic);
    device::set_tf32(c.precision.tf32);
  }
  s.threads = apply_thread_plan(static_cast<int>(c.run.threads));
  if (c.memory.reuse_freed) keep_freed_memory_in_process();
  if (!s.device.is_cuda()) {
    install_counting_allocator();  // exact peak tensor memory, and memory.limit_mb
    s.memory_limit = std::make_unique<TensorBytesLimitGuard>(resolve_tensor_bytes_limit(c.memory.limit_mb));
  }
  torch::manual_seed(static_cast<uint64_t>(c.run.seed));

  if (s.opts.process_group) s.dp = std::make_unique<dist::DataParallel>(s.opts.process_group, c);
  const int64_t rank = s.dp ? s.dp->rank() : 0, world = s.dp ? s.dp->world_size() : 1;
  s.task = make_task(c);  // before the run dir: bad data must not leave a husk
  if (!s.task.module || !s.task.loss)
    throw ConfigError("the Trainer's Task needs a module and a loss function (train/task.h)");
  // data.source, this process's share of it (a task's own data is used as given on every rank).
  if (!s.task.data) s.task.data = make_batch_source(c, rank, world);
  s.data = s.task.data;
  s.model = s.task.module;
  s.cost = std::make_shared<CostMeter>(c.budget);
  s.model->to(s.device);
  const std::string& ac = c.memory.activation_checkpointing;
  if (s.task.hooks.activation_checkpointing)
    s.task.hooks.activation_checkpointing(ac);
  else if (ac != "none")
    throw ConfigError(fmt::format("memory.activation_checkpointing = \"{}\" needs a model that supports it "
                                  "(TaskHooks::activation_checkpointing); this task has none, so set it to "
                                  "\"none\"",
                                  ac));
  s.step = std::make_unique<TrainStep>(c, s.model, s.task.loss, *s.data, s.device,
                                       s.task.hooks.tokens_per_sample, s.dp.get());
  s.loss_sum = torch::zeros({}, torch::TensorOptions().dtype(torch::kFloat).device(s.device));
  const bool writer = s.is_writer();  // rank 0 alone writes the run directory
  s.run_dir = writer ? prepare_run_dir(c, s.opts.overwrite, !s.opts.resume.empty(), s.run_lock)
                     : (fs::path(c.run.out_dir) / c.run.name).string();
  if (writer) write_file_atomic(s.run_dir + "/config.toml", s.rc.to_toml());
  const std::string metrics = s.run_dir + "/metrics.jsonl";
  if (writer && !s.opts.resume.empty()) truncate_metrics_after(metrics, ck ? ck->step : 0);

  if (writer) s.callbacks.push_back(std::make_shared<MetricsWriter>(metrics, !s.opts.resume.empty()));
  s.cadence = std::make_shared<CheckpointCadence>(c.checkpoint);
  s.callbacks.push_back(s.cadence);
  if (c.early_stop.enabled) s.callbacks.push_back(std::make_shared<EarlyStopping>(c.early_stop));
  const std::optional<Deadline> deadline = resolve_deadline(c.checkpoint.deadline);
  if (deadline && deadline->unix_s <= unix_now())  // stopping at once would requeue forever
    throw ConfigError(fmt::format("the deadline {} ({}) has passed; set checkpoint.deadline to a later time, or "
                                  "\"\" for none",
                                  format_utc(deadline->unix_s), deadline->source));
  if (deadline || !c.checkpoint.notice_url.empty()) {
    s.callbacks.push_back(std::make_shared<DeadlineGuard>(c.checkpoint, deadline, c.train.eval_every));
    if (deadline)
      con.line(fmt::format("deadline: {} ({}); the run checkpoints and exits 75 in time for it",
                           format_utc(deadline->unix_s), deadline->source));
  }
  if (c.guard.enabled) s.callbacks.push_back(std::make_shared<DivergenceGuard>(c.guard));
  s.install_monitors();  // progress display, profiler, dashboard
  for (auto& cb : s.opts.callbacks) s.callbacks.push_back(cb);

  WriteOptions wo;
  wo.weights_dtype = c.checkpoint.weights_dtype;
  wo.exact_resume = c.checkpoint.exact_resume;
  wo.after_stage = fault_kill_hook();
  s.writer = std::make_unique<CheckpointWriter>(
      s.run_dir + "/checkpoints", wo,
      RetentionPolicy{c.checkpoint.keep_last, c.checkpoint.keep_best, c.checkpoint.best_mode},
      c.checkpoint.async);
  if (ck) {
    s.restore(*ck);
    s.resumed_from = ck->path;
    s.cadence->resumed_at(ck->step);
    con.line(fmt::format("resume: continuing from {} (step {}{})", ck->path, ck->step,
                         ck->exact ? "" : "; weights stored in reduced precision, so not bitwise"));
  }
  if (s.dp) s.dp->broadcast_parameters(s.model->parameters());  // every rank starts from rank 0's
  if (c.train.warmup_steps > 0 && c.train.warmup_steps >= c.train.steps)
    con.line(fmt::format("warning: train.steps = {} ends within the warm-up (train.warmup_steps = {}): the "
                         "learning rate never reaches train.lr = {}; set train.warmup_steps below train.steps",
                         c.train.steps, c.train.warmup_steps, c.train.lr));

  s.info.config = &s.rc.config;
  s.info.run_dir = s.run_dir;
  s.info.params = parameter_count(*s.model);
  s.info.flops_per_token = s.task.hooks.flops_per_token;
  s.info.tokens_per_step = c.data.micro_batch * accumulation_steps(c) * s.task.hooks.tokens_per_sample * world;
  s.info.item = s.task.hooks.item;
  s.info.threads = s.threads.intra_op;
}

Trainer::~Trainer() = default;

const std::string& Trainer::run_dir() const { return s_->run_dir; }
const std::string& Trainer::resumed_from() const { return s_->resumed_from; }
std::string Trainer::dashboard_url() const { return s_->dashboard ? s_->dashboard->url() : ""; }

// One optimizer step and its bookkeeping; fills `m` and runs on_step_end.
void Trainer::State::train_one_step(StepMetrics& m, Control& control) {
  const Config& c = rc.config;
  detail::LoopState& L = loop;
  const auto t0 = detail::Clock::now();
  // The schedule follows optimizer steps actually taken: a skipped (inf/NaN) step does not
  // advance it. The divergence guard scales it down after each rollback.
  const double lr = L.lr_scale * lr_at(step->optimizer().step_count(), c.train.steps,
                                       c.train.warmup_steps, c.train.lr, c.train.min_lr_ratio);
  PhaseTrace::set_step(L.step + 1);
  step->set_grad_noise_probe(c.monitor.grad_noise && next_step_logs());
  StepResult r;
  {
    PhaseSpan span("step");
    r = step->run(L.step, lr);
  }
  if (dp) r.tokens *= dp->world_size();  // every rank consumed as many (r.loss is already the mean)
  loss_sum += r.loss;
  ++L.step;

  const double step_s = seconds_since(t0);
  L.window_steps += 1;
  L.window_tokens += r.tokens;
  L.window_s += step_s;
  L.tokens += r.tokens;
  m.step = L.step;
  m.lr = lr;
  m.step_s = step_s;
  m.tokens = L.tokens;
  m.elapsed_s = billed_s();
  m.data_wait_s = r.data_s;  // the trainer blocked on the batch source for this long
  session_step_s += step_s;
  m.forward_s = r.forward_s;
  m.backward_s = r.backward_s;
  m.optimizer_s = r.optimizer_s;
  phase_s[0] += r.data_s;
  phase_s[1] += r.forward_s;
  phase_s[2] += r.backward_s;
  phase_s[3] += r.optimizer_s;
  session_steps += 1;
  m.loss_scale = step->scaler().scale();
  m.skipped_steps = step->scaler().state().skipped;
  m.micro_batch = step->micro_batch_effective();
  m.oom_backoffs = step->oom_backoffs();
  m.logged = L.step % c.train.log_every == 0 || L.step == c.train.steps;
  if (m.logged) {  // the only host syncs of the step (besides the fp16 scaler's verdict)
    m.loss = loss_sum.item<double>() / static_cast<double>(L.window_steps);
    m.grad_norm = r.grad_norm.item<double>();
    logged_grad_norm = m.grad_norm;
    logged_grad_norm_step = L.step;
    m.tokens_per_s = static_cast<double>(L.window_tokens) / L.window_s;
    m.rss_mb = static_cast<double>(rss_now_bytes()) / 1e6;
    L.final_train = m.loss;
    observe_logged_step(m, r);
    if (!std::isfinite(m.loss) && !step->scaler().enabled() && !c.guard.enabled)
      control.request_stop(fmt::format("loss became {} at step {}", m.loss, L.step));
    loss_sum.zero_();
    L.window_steps = L.window_tokens = 0;
    L.window_s = 0;
  }
  cost->on_step_end(m, control);
  m.cost_usd = cost->figures().usd;
  for (auto& cb : callbacks) cb->on_step_end(m, control);
}

// A validation pass at the current step. Returns false (and marks the evaluation pending) when a
// stop signal interrupted it.
bool Trainer::State::run_eval(Control& control) {
  torch::NoGradGuard no_grad;
  PhaseSpan span("eval");
  const auto t0 = detail::Clock::now();
  model->eval();
  at::Tensor sum = torch::zeros({}, torch::TensorOptions().dtype(torch::kFloat).device(device));
  const int64_t n = rc.config.train.eval_batches;
  const LossFn& loss = task.eval_loss ? task.eval_loss : task.loss;
  for (int64_t i = 0; i < n; ++i) {
    if (preemption_requested()) {
      model->train();
      loop.eval_pending = true;
      return false;
    }
    Batch b = data->val_batch(i);
    // In the training step's chunks, so an out-of-memory back-off covers evaluation too.
    const int64_t k = step->chunks(), rows = b.x.size(0) / k;
    for (int64_t j = 0; j < k; ++j) {
      Batch part = b;
      if (k > 1) {
        part.x = b.x.narrow(0, j * rows, rows);
        if (b.y.defined()) part.y = b.y.narrow(0, j * rows, rows);
      }
      sum += loss(*model, to_device(part, device)).detach().to(torch::kFloat) / static_cast<double>(k);
    }
  }
  model->train();
  loop.eval_pending = false;
  loop.final_val = sum.item<double>() / static_cast<double>(n);
  loop.best_val = std::min(loop.best_val, loop.final_val);
  loop.last_eval_step = loop.step;
  EvalMetrics e{loop.step, loop.final_val, loop.best_val, seconds_since(t0)};
  eval_s_window += e.eval_s;
  eval_s_total += e.eval_s;
  for (auto& cb : callbacks) cb->on_eval_end(e, control);
  return true;
}

nlohmann::json Trainer::fit() {
  State& s = *s_;
  const Config& c = s.rc.config;
  s.print_banner();
  s.cost->on_train_begin(s.info);
  for (auto& cb : s.callbacks) cb->on_train_begin(s.info);

  Control control;
  StepMetrics m;
  m.total_steps = c.train.steps;
  m.tokens = s.loop.tokens;
  s.session_start = detail::Clock::now();
  s.startup_s = std::chrono::duration<double>(s.session_start - s.constructed).count();
  s.model->train();
  reset_tensor_bytes_peak();
  device::reset_cuda_peak(s.device);
  auto check_signal = [&] {
    if (preemption_requested())
      control.request_stop(fmt::format("stop signal {} ({})", preemption_signal(),
                                       strsignal(preemption_signal())),
                           StopKind::kPreempted);
  };
  auto over_time = [&] {
    return c.train.max_minutes > 0 && s.billed_s() >= c.train.max_minutes * 60;
  };

  check_signal();  // a signal during start-up (or warm-up) stops before the first step
  if (s.dp) s.dp->agree(control);  // stops and checkpoints are decided by all ranks together
  if (s.loop.eval_pending && !control.should_stop) s.run_eval(control);
  while (s.loop.step < c.train.steps && !control.should_stop) {
    s.writer->poll();  // an async write's error surfaces here, on the trainer thread
    s.train_one_step(m, control);
    if (control.rollback_requested) {
      s.rollback(control);
      continue;
    }
    check_signal();
    if (c.train.eval_every > 0 && s.loop.step % c.train.eval_every == 0) {
      if (control.kind == StopKind::kPreempted && control.should_stop)
        s.loop.eval_pending = true;  // the resumed run evaluates this step first
      else if (!control.should_stop)
        s.run_eval(control);
    }
    if (over_time())
      control.request_stop(fmt::format("train.max_minutes = {} reached", c.train.max_minutes),
                           StopKind::kMaxMinutes);
    check_signal();
    if (s.dp) s.dp->agree(control);
    if (control.checkpoint_requested && !control.should_stop) s.save_checkpoint();
    control.checkpoint_requested = false;
  }
  return s.finish(control);
}

}  // namespace frugal
