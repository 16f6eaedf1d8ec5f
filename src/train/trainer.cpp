// The Trainer's start-up; see trainer.h. The loop is in trainer_loop.cpp, checkpoint capture,
// restore and the summary in trainer_state.cpp, the callbacks' wiring in callback_connector.cpp.
#include "frugal/train/trainer.h"

#include <torch/torch.h>

#include <atomic>
#include <cerrno>
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
#include "frugal/ckpt/run_dir.h"
#include "frugal/core/atomic_file.h"
#include "frugal/core/console.h"
#include "frugal/core/crash_report.h"
#include "frugal/core/device.h"
#include "frugal/core/dir_lock.h"
#include "frugal/core/errors.h"
#include "frugal/core/memory.h"
#include "frugal/core/threads.h"
#include "frugal/data/dataset_source.h"
#include "frugal/data/token_dataset.h"
#include "frugal/data/tokenizer.h"
#include "frugal/monitor/metrics_writer.h"
#include "frugal/model/hf_gpt2.h"
#include "frugal/model/kernel_ops.h"
#include "frugal/model/freeze.h"
#include "frugal/model/hf_checkpoint.h"
#include "frugal/train/model_task.h"
#include "frugal/train/run_config.h"
#include "train/internal/callback_connector.h"
#include "train/internal/trainer_state.h"

namespace frugal {
namespace fs = std::filesystem;

namespace {

// Throws the error for a run directory that cannot be created: where run.out_dir names a place that
// cannot hold one (read-only, not a directory, no permission), bad input (exit 2) naming what to
// change; another failure (EIO, a full disk) as IoError.
[[noreturn]] void throw_run_dir_error(const std::string& root, const std::error_code& ec) {
  const std::string what = fmt::format("cannot create the run directory {}: {}", root, ec.message());
  switch (ec.value()) {
    case EROFS:
    case EACCES:
    case EPERM:
    case ENOTDIR:
    case EEXIST:
    case ENAMETOOLONG:
    case ELOOP:
      throw ConfigError(what +
                        "; choose another run.out_dir (--set run.out_dir=DIR) or make that path a "
                        "writable directory");
    default:
      throw IoError(what);
  }
}

// Prepares runs/<name>/: refuses to clobber an earlier run unless asked to or resuming, and
// locks it (one process per run directory: a second one would delete the first one's in-flight
// checkpoint writes as debris).
std::string prepare_run_dir(const Config& c, bool overwrite, bool resuming, std::unique_ptr<DirLock>& lock) {
  const RunDir dir = RunDir::of(c);
  const bool used = dir.holds_run();
  if (used && !overwrite && !resuming) {
    // A run that is training now is said so (DirLock throws naming its pid), not taken for a
    // finished one to continue.
    const DirLock running(dir.root());
    throw ConfigError(
        fmt::format("run directory {} already holds a run; pass --resume auto to continue it, --overwrite to "
                    "replace it, or choose another name with --set run.name=NAME",
                    dir.root()));
  }
  std::error_code ec;
  fs::create_directories(dir.root(), ec);
  if (ec) throw_run_dir_error(dir.root(), ec);
  if (!lock) lock = std::make_unique<DirLock>(dir.root());  // a resume took it already
  if (used && overwrite && !resuming) {
    for (const std::string& p : {dir.metrics(), dir.summary(), dir.final_dir(), dir.config(), dir.checkpoints(),
                                 dir.tokenizer_dir(), dir.hf_source(), dir.tensorboard(), dir.mlflow()})
      remove_tree(p, ec);
  }
  // Temp directories of checkpoint writes whose process died (a kill, a full disk) go now, before
  // the first save needs the space. The lock says no other process writes here, so every one is
  // stale, whatever pid its name carries (pids are reused, in containers from 1 up).
  for (const auto& p : remove_stale_debris(dir.checkpoints(), /*all=*/true))
    Console::get().line(fmt::format("removed {} (left by a run that was killed while saving)", p));
  // So do the temporary files of a final weights, summary or config write that a kill cut short
  // (final/model.safetensors.tmp-<pid> is as large as the model). Another live process's stay.
  for (const std::string& d : {dir.root(), dir.final_dir(), dir.tokenizer_dir(), dir.hf_source()})
    for (const auto& p : remove_stale_temp_files(d))
      Console::get().line(fmt::format("removed {} (left by a process that was killed while writing it)", p));
  return dir.root();
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
    throw ConfigError(
        fmt::format("FRUGAL_FAULT_KILL_AT = \"{}\" must be STAGE:N with STAGE one of temp_dir, model, "
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

// The checkpoint to resume from: "" for a fresh run.
std::string choose_checkpoint(const Config& c, const std::string& resume) {
  if (resume.empty()) return "";
  auto& con = Console::get();
  if (resume != "auto") {
    // A run directory where a checkpoint was meant: said as such (its missing COMPLETE marker read
    // like a damaged checkpoint), with the two forms that work.
    std::error_code ec;
    if (fs::is_directory(RunDir(resume).checkpoints(), ec)) {
      const auto newest = find_resumable(RunDir(resume).checkpoints(), nullptr);
      throw ConfigError(fmt::format(
          "--resume {} is a run directory, not a checkpoint: pass --resume auto (the newest sound checkpoint of "
          "run.name under run.out_dir){}",
          resume, newest ? fmt::format(", or a checkpoint such as --resume {}", *newest) : ""));
    }
    return resume;
  }
  const std::string root = RunDir::of(c).checkpoints();
  auto found = find_resumable(root, [&](const std::string& w) { con.line("resume: " + w); });
  if (!found) {
    con.line(fmt::format("resume: no sound checkpoint under {}; starting from step 0", root));
    return "";
  }
  return *found;
}

}  // namespace

Trainer::Trainer(ResolvedConfig config, TrainerOptions options)
    : Trainer(std::move(config), TaskFactory(make_model_task), std::move(options)) {}

Trainer::Trainer(ResolvedConfig config, Task task, TrainerOptions options)
    : Trainer(std::move(config), TaskFactory([t = std::move(task)](const Config&) { return t; }), std::move(options)) {}

Trainer::Trainer(ResolvedConfig config, TaskFactory make_task, TrainerOptions options) : s_(std::make_unique<State>()) {
  State& s = *s_;
  s.rc = std::move(config);
  s.opts = std::move(options);
  // Installed first, so a stop signal during start-up (data, model, precision measurement) is
  // honoured too: fit() checks the flag before the first step.
  if (s.opts.handle_signals) s.signals = std::make_unique<SignalHandlers>();
  Console::get().set_quiet(s.opts.quiet);
  // stdout carries only JSON lines (--json). A probe (tune, plan, smoke) keeps the mode its
  // command set, so `frugal tune --json` and `frugal train --json` with auto_tune or smoke_first
  // still send their human lines to stderr.
  if (!s.opts.probe) Console::get().set_json_mode(s.opts.json);
  // The config completed from its inputs, reconciled with the run's own on a resume (run_config.h),
  // and completed again from what the run's config names.
  complete_config(s.rc);
  const std::optional<LoadedCheckpoint> ck = s.open_checkpoint();
  if (ck || s.started_over) complete_config(s.rc);
  s.set_up_device(ck);
  // Nothing is written into the run directory before every check has passed: bad data, a bad
  // price table, a state-key clash, a checkpoint that does not fit the model all leave it as it was.
  s.build_task(make_task);
  s.frozen = frozen_base(*s.model, s.rc.config.model.init_from);
  s.make_setup(ck);
  s.connect();
  if (ck) s.continue_from(*ck);
  s.open_run_dir(ck);
  s.open_checkpoint_writer();
  s.describe_run();
}

Trainer::~Trainer() {
  CrashPhase phase("trainer teardown");
  s_.reset();
}

const std::string& Trainer::run_dir() const { return s_->run_dir; }
const std::string& Trainer::resumed_from() const { return s_->resumed_from; }
std::string Trainer::dashboard_url() const { return s_->dashboard_url; }
StopKind Trainer::stop_kind() const { return s_->stopped; }

// A resume locks the run directory before it picks a checkpoint, so a run still writing there is
// named rather than read from mid-rotation. A checkpoint is read first: it may pin the precision
// that `auto` chose before.
std::optional<LoadedCheckpoint> Trainer::State::open_checkpoint() {
  if (const DataSource& src = rc.config.data.source;
      src.kind == DataSource::Kind::kShards || src.kind == DataSource::Kind::kRecords)
    dataset_fingerprint_at_start = dataset_fingerprint(src.path);  // kept in every checkpoint
  const std::string run_path = RunDir::of(rc.config).root();
  if (!opts.resume.empty() && opts.data_parallel.rank == 0 && fs::is_directory(run_path))
    run_lock = std::make_unique<DirLock>(run_path);
  const std::string path = choose_checkpoint(rc.config, opts.resume);
  if (path.empty()) {
    if (opts.resume == "auto") start_over_with_run_config();
    return std::nullopt;
  }
  // A checkpoint named with --resume PATH that cannot be read is bad input (exit 2); with --resume
  // auto, one find_resumable judged sound and then failed to load is frugal's failure (exit 1).
  LoadedCheckpoint ck = opts.resume == "auto"
                            ? load_checkpoint(path)
                            : reading_named_input("--resume " + path, [&] { return load_checkpoint(path); });
  adopt_run_config(ck);
  return ck;
}

void Trainer::State::set_up_device(const std::optional<LoadedCheckpoint>& ck) {
  const Config& c = rc.config;
  device = torch::Device(c.run.device);
  if (device.is_cuda()) {
    if (!device::build_info().cuda_compiled)
      throw ConfigError(
          fmt::format("run.device = \"{}\" but frugal was built against a LibTorch without "
                      "CUDA; rebuild against the CUDA wheel (scripts/install-deps.sh) or use "
                      "run.device = \"cpu\"",
                      c.run.device));
    const int gpus = device::cuda_device_count();
    if (gpus == 0 || (device.has_index() && device.index() >= gpus))
      throw ConfigError(fmt::format(
          "run.device = \"{}\" but this process sees {} GPU(s) (check nvidia-smi "
          "and CUDA_VISIBLE_DEVICES); use run.device = \"cpu\"{}",
          c.run.device, gpus, gpus == 0 ? "" : fmt::format(" or one of \"cuda:0\" to \"cuda:{}\"", gpus - 1)));
    device::set_deterministic(c.run.deterministic);
    device::set_tf32(c.precision.tf32);
  }
  continued_precision =
      precision_to_continue(c.precision.mode, ck ? ck->state.value("precision", "") : "", &precision_warning);
  kernels_resumed = ck ? ck->state.value("kernels", "aten") : "";
  // run.threads = 0 (auto) on a resume keeps the count the run trained with: another count sums
  // in another order, and the continuation would not be the uninterrupted run bitwise.
  const int kept = ck && c.run.threads == 0 ? ck->state.value("threads", 0) : 0;
  if (kept > 0 && kept <= usable_cpu_count()) {
    threads = apply_thread_settings(kept);
    threads.reason = fmt::format("auto, kept on resume: the {} thread(s) the run trained with", kept);
  } else {
    threads = apply_thread_settings(static_cast<int>(c.run.threads));
    if (kept > 0)
      Console::get().line(
          fmt::format("resume: warning: the run trained with {} threads but this process may use {} "
                      "CPU(s); continuing with {}, so not bitwise the uninterrupted run",
                      kept, usable_cpu_count(), threads.intra_op));
  }
  if (c.memory.reuse_freed) keep_freed_memory_in_process();
  if (!device.is_cuda()) {
    install_counting_allocator();  // exact peak tensor memory, and memory.limit_mb
    memory_limit = std::make_unique<TensorBytesLimitGuard>(resolve_tensor_bytes_limit(c.memory.limit_mb));
  }
  torch::manual_seed(static_cast<uint64_t>(c.run.seed));
}

// The task (model, loss, data), on the device, with activation checkpointing installed, and the
// data-parallel side when this is one of several processes.
void Trainer::State::build_task(const TaskFactory& make_task) {
  const Config& c = rc.config;
  if (opts.data_parallel.make) dp = opts.data_parallel.make(c);
  const int64_t rank = dp ? dp->rank() : 0, world = dp ? dp->world_size() : 1;
  // The model is built with model.kernels resolved; the run's config keeps what was asked for.
  kernels = choose_kernels(c, device.is_cuda(), device.is_cuda() ? cuda_kernels_unavailable(device) : "",
                           continued_precision, world, kernels_resumed);
  Config built = c;
  built.model.kernels = kernels.kernels;
  task = make_task(built);
  kernels = confirm_kernels(kernels, c, task.hooks);
  FRUGAL_CHECK(task.module && task.loss, ConfigError,
               "the Trainer's Task needs a module and a loss function (train/task.h)");
  // data.source, this process's share of it (a task's own data is used as given on every rank).
  if (!task.data) task.data = make_batch_source(c, rank, world);
  // A task's own dataset gets data.workers loader threads too (the sources of data.source have
  // their own loaders).
  if (auto* ds = dynamic_cast<DatasetSource*>(task.data.get()))
    ds->set_workers(static_cast<int>(c.data.workers), static_cast<int>(c.data.prefetch));
  data = task.data;
  model = task.module;
  // ZeRO-3 keeps the model in host memory until its optimizer copies each block into its flat
  // buffer on the device and shards it (ZeroAdamW), so that the device never holds the whole model;
  // the rest (buffers, frozen parameters) moves after (make_setup).
  if (!staged_in_host_memory()) model->to(device);
  // Every rank starts from rank 0's parameters, broadcast while each holds them whole (before
  // ZeRO-3 shards them, one tensor at a time through the device where they are in host memory; a
  // resume then loads the same checkpoint on every rank).
  if (dp) dp->broadcast_parameters(model->parameters());
  const ActivationCheckpointing& ac = c.memory.activation_checkpointing;
  if (task.hooks.activation_checkpointing)
    task.hooks.activation_checkpointing(ac);
  else
    FRUGAL_CHECK(!ac.enabled(), ConfigError,
                 fmt::format("memory.activation_checkpointing = \"{}\" needs a model that supports it "
                             "(TaskHooks::activation_checkpointing); this task has none, so set it to \"none\"",
                             to_string(ac)));
}

// Everything resolved once: the batch arithmetic, the precision (measured for `auto`, or the one a
// resumed checkpoint trained in), MFU's peak in that precision; then the step that follows it.
void Trainer::State::make_setup(const std::optional<LoadedCheckpoint>& ck) {
  const Config& c = rc.config;
  const PrecisionMode mode = continued_precision;
  if (!precision_warning.empty()) Console::get().line("resume: warning: " + precision_warning);
  const std::string why = mode != c.precision.mode ? "resumed: the checkpoint trained in " + precision_name(mode) : "";
  Config resolved = c;
  resolved.model.kernels = kernels.kernels;
  setup = set_up_run(resolved, task.hooks, dp ? dp->world_size() : 1, PrecisionPolicy(mode, device, why));
  setup.kernels_reason = kernels.reason;
  check_model_kernels(resolved.model, device, setup.precision.mode());
  check_cuda_graphs(c, device, setup.world_size);
  if (setup.offload && !device.is_cuda())
    Console::get().line("dist.offload = \"optimizer\": this run is on " + device.str() +
                        ", where the optimizer's state is in host memory already; offloading only adds copies");
  if (setup.world_size == 1 && c.dist.zero != ZeroStage::kNone)
    Console::get().line(
        fmt::format("dist.zero = {}: this run is one process, so nothing is sharded (ZeRO splits the "
                    "training state across the processes of `frugal launch -n N`)",
                    static_cast<int>(c.dist.zero)));
  setup.precision.set_fp8_cast_kernels(kernels.kernels == ModelConfig::Kernels::kFrugal);
  if (ck) continue_on_this_world(*ck);
  {
    // The peak probe is frugal's own start-up measurement (a 1024^3 matmul), not training work:
    // memory.limit_mb does not apply to it, or a tight limit would fail before the first step.
    TensorBytesLimitGuard unlimited(0);
    const c10::ScalarType dtype = setup.precision.autocast() ? setup.precision.dtype() : torch::kFloat;
    setup.peak = resolve_peak_flops(c.monitor, dtype, device);
  }
  step = std::make_unique<TrainStep>(
      setup, c.train, c.precision, model, task.loss, *data, device, dp.get(),
      task.hooks.param_groups ? task.hooks.param_groups(*model) : std::vector<ParamGroup>{});
  if (staged_in_host_memory()) model->to(device);  // the trainable parameters are on it already
  loss_sum = torch::zeros({}, torch::TensorOptions().dtype(torch::kFloat).device(device));
}

// Elastic resume: a checkpoint written by another number of processes continues with its global
// batch (the data order is a function of the step and the seed, not of the world size). The
// checkpoint's global batch wins on its own number of processes too: after an earlier elastic
// resume it is not the config's micro_batch x accum x world (the batch keys cannot change on a
// resume, so the config still describes the run's first world size).
void Trainer::State::continue_on_this_world(const LoadedCheckpoint& ck) {
  const int64_t from = checkpoint_world_size(ck);
  const int64_t global = ck.state.contains("global_batch") ? ck.state["global_batch"].get<int64_t>()
                                                           : setup.global_batch / setup.world_size * from;
  if (global == setup.global_batch && from == setup.world_size) return;
  // The accumulation in force when the checkpoint was written (data.micro_batch is fixed on resume).
  const int64_t old_accum = global / (setup.micro_batch * from);
  const int64_t configured = setup.accum;
  continue_global_batch(setup, global, from);
  if (from == setup.world_size)
    Console::get().line(
        fmt::format("resume: accumulation {} on {} process(es), as at the checkpoint (not the configured {}), "
                    "keeps the global batch of {} sequences and the data order",
                    setup.accum, setup.world_size, configured, setup.global_batch));
  else
    Console::get().line(
        fmt::format("resume: {} -> {} process(es): accumulation {} -> {} keeps the global batch of {} "
                    "sequences and the data order",
                    from, setup.world_size, old_accum, setup.accum, setup.global_batch));
}

namespace {
// A resume continues the run from its checkpoint's step; what was written past it belongs to a run
// this one no longer continues. final/ goes (sample and export would read an end the run has gone
// past or away from; the run writes it again at its own end): its weights file first, so a
// half-removed final/ reads as none. Where --resume named one of this run's own checkpoints, its
// newer checkpoints go too (a branch from an earlier step: --resume auto would go back to them),
// as the divergence guard's rollback removes them.
void drop_what_the_resume_leaves(const RunDir& dir, const std::optional<LoadedCheckpoint>& ck, bool named) {
  auto& con = Console::get();
  std::error_code ec;
  if (fs::exists(dir.final_dir(), ec)) {
    fs::remove(dir.final_weights(), ec);
    remove_tree(dir.final_dir(), ec);
    con.line(fmt::format("resume: removed {} (the run continues from step {}; its end writes it again)",
                         dir.final_dir(), ck ? ck->step : 0));
  }
  if (!named || !ck || !fs::equivalent(fs::path(ck->path).parent_path(), dir.checkpoints(), ec)) return;
  for (const std::string& p : remove_checkpoints_after(dir.checkpoints(), ck->step))
    con.line(
        fmt::format("resume: removed {}, past step {}: it belongs to the run this one branches from", p, ck->step));
}
}  // namespace

// runs/<name>/ (rank 0 alone writes it): prepared; on a resume, what the resume leaves dropped and
// the run's retention applied, before anything is written (both free space on a full disk); its
// resolved config.toml, and metrics.jsonl cut back to the checkpoint a resume continues from.
void Trainer::State::open_run_dir(const std::optional<LoadedCheckpoint>& ck) {
  const Config& c = rc.config;
  run_dir = is_writer() ? prepare_run_dir(c, opts.overwrite, !opts.resume.empty(), run_lock) : RunDir::of(c).root();
  if (!is_writer()) return;
  const RunDir dir(run_dir);
  if (!opts.resume.empty()) drop_what_the_resume_leaves(dir, ck, /*named=*/opts.resume != "auto");
  if (ck) apply_retention_on_resume();
  write_file_atomic(dir.config(), rc.to_toml());
  if (!opts.resume.empty()) truncate_metrics_after(dir.metrics(), ck ? ck->step : 0);
  // The checkpoint's descriptive files travel with the run (export writes its chat template and token ids).
  if (const std::string hf = hf_init_dir(c.model); !hf.empty() && ck == std::nullopt) {
    try {
      keep_hf_source_files(hf, dir.hf_source());
    } catch (const std::exception& e) {
      Console::get().line(fmt::format("warning: the run keeps no copy of {}'s config files ({})", hf, e.what()));
    }
  }
  // The dataset's tokenizer travels with the run: sample and export then need only the run directory.
  if (c.data.source.kind == DataSource::Kind::kShards) {
    try {
      keep_tokenizer(c.data.source.path, dir.tokenizer_dir());
    } catch (const std::exception& e) {
      Console::get().line(
          fmt::format("warning: the run keeps no copy of its tokenizer ({}); sample and export will "
                      "read it from the dataset",
                      e.what()));
    }
  }
}

// The callbacks (callback_connector.cpp). They touch nothing on disk before on_train_begin.
void Trainer::State::connect() {
  const Config& c = rc.config;
  detail::ConnectorContext ctx;
  ctx.config = &c;
  ctx.setup = &setup;
  ctx.run_dir = RunDir::of(c).root();
  ctx.writer = is_writer();
  ctx.resuming = !opts.resume.empty();
  ctx.quiet = opts.quiet;
  ctx.json = opts.json;
  ctx.device = device;
  ctx.user = opts.callbacks;
  ctx.stop_at_step = opts.stop_at_step;
  ctx.probe = opts.probe;
  detail::Connection connection = detail::connect_callbacks(ctx);
  callbacks = std::move(connection.callbacks);
  dashboard_url = connection.dashboard_url;
}

void Trainer::State::open_checkpoint_writer() {
  const Config& c = rc.config;
  WriteOptions wo;
  wo.weights_dtype = c.checkpoint.weights_dtype;
  wo.exact_resume = c.checkpoint.exact_resume;
  wo.after_stage = fault_kill_hook();
  writer = std::make_unique<CheckpointWriter>(
      RunDir(run_dir).checkpoints(), wo,
      RetentionPolicy{c.checkpoint.keep_last, c.checkpoint.keep_best, c.checkpoint.best_mode}, c.checkpoint.async);
}

void Trainer::State::continue_from(const LoadedCheckpoint& ck) {
  restore(ck);
  resumed_from = ck.path;
  Console::get().line(fmt::format("resume: continuing from {} (step {}{})", ck.path, ck.step,
                                  ck.exact ? "" : "; weights stored in reduced precision, so not bitwise"));
}

// What the callbacks learn at on_train_begin, and a warning for a run that ends in its warm-up.
void Trainer::State::describe_run() {
  const Config& c = rc.config;
  if (c.train.warmup_steps > 0 && c.train.warmup_steps >= c.train.steps)
    Console::get().line(
        fmt::format("warning: train.steps = {} ends within the warm-up (train.warmup_steps = {}): "
                    "the learning rate never reaches train.lr = {}; set train.warmup_steps below "
                    "train.steps",
                    c.train.steps, c.train.warmup_steps, c.train.lr));
  info.config = &rc.config;
  info.run_dir = run_dir;
  info.params = parameter_count(*model);
  info.trainable_params = trainable_parameter_count(*model);
  info.flops_per_token = setup.flops_per_token;
  info.tokens_per_step = setup.items_per_step;
  info.samples_per_step = setup.global_batch;
  info.item = setup.item;
  info.threads = threads.intra_op;
  info.peak_flops = setup.peak.flops;
  info.dashboard_url = dashboard_url;
  info.start_step = loop.step;
  info.end_step = total_steps();
}

}  // namespace frugal
