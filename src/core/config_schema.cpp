// Every configuration key, declared once. Docs (docs/config.md, `frugal config --list`), env
// variable names, parsing and range checks all come from this table, so they cannot drift.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cctype>
#include <regex>

#include "frugal/core/config_loader.h"
#include "frugal/monitor/cost_meter.h"
#include "frugal/monitor/dashboard.h"

namespace frugal {
namespace {

// Accessor for the field a key binds to.
template <class T>
using Field = T& (*)(Config&);

// A key bound to a field of type T (int64_t, double, std::string or bool).
template <class T>
KeySpec field_key(std::string key, ValueType type, Field<T> f, std::string help) {
  KeySpec k;
  k.key = std::move(key);
  k.type = type;
  k.help = std::move(help);
  k.get = [f](const Config& c) { return ConfigValue(f(const_cast<Config&>(c))); };
  k.set = [f](Config& c, const ConfigValue& v) { f(c) = std::get<T>(v); };
  return k;
}

KeySpec int_key(std::string key, Field<int64_t> f, double min, double max, std::string help) {
  KeySpec k = field_key<int64_t>(std::move(key), ValueType::kInt, f, std::move(help));
  k.min = min;
  k.max = max;
  return k;
}

KeySpec float_key(std::string key, Field<double> f, double min, double max, std::string help) {
  KeySpec k = field_key<double>(std::move(key), ValueType::kFloat, f, std::move(help));
  k.min = min;
  k.max = max;
  return k;
}

KeySpec string_key(std::string key, Field<std::string> f, std::string help,
                   std::function<std::string(const ConfigValue&)> check = nullptr) {
  KeySpec k = field_key<std::string>(std::move(key), ValueType::kString, f, std::move(help));
  k.check = std::move(check);
  return k;
}

KeySpec bool_key(std::string key, Field<bool> f, std::string help) {
  return field_key<bool>(std::move(key), ValueType::kBool, f, std::move(help));
}

// An enum class field spelled as one of `names` in the config.
template <class E>
KeySpec enum_key(std::string key, Field<E> f, std::vector<std::pair<std::string, E>> names,
                 std::string help) {
  KeySpec k;
  k.key = std::move(key);
  k.type = ValueType::kEnum;
  k.help = std::move(help);
  for (const auto& n : names) k.choices.push_back(n.first);
  k.get = [f, names](const Config& c) {
    for (const auto& n : names)
      if (n.second == f(const_cast<Config&>(c))) return ConfigValue(n.first);
    return ConfigValue(std::string("?"));
  };
  k.set = [f, names](Config& c, const ConfigValue& v) {
    for (const auto& n : names)
      if (n.first == std::get<std::string>(v)) f(c) = n.second;
  };
  return k;
}

std::string check_activation_checkpointing(const ConfigValue& v) {
  const auto& s = std::get<std::string>(v);
  if (s == "none" || s == "blocks") return "";
  if (s.rfind("every:", 0) == 0 && s.size() > 6 &&
      s.find_first_not_of("0123456789", 6) == std::string::npos && std::stol(s.substr(6)) >= 1)
    return "";
  return "must be \"none\", \"blocks\" or \"every:N\" with N >= 1";
}

std::string check_run_name(const ConfigValue& v) {
  const auto& s = std::get<std::string>(v);
  if (s.empty()) return "must not be empty";
  for (char ch : s) {
    if (!(std::isalnum(static_cast<unsigned char>(ch)) || ch == '-' || ch == '_' || ch == '.'))
      return "may contain only letters, digits, '-', '_' and '.' (it names a folder)";
  }
  if (s == "." || s == "..") return "must not be '.' or '..'";
  return "";
}

std::string check_source(const ConfigValue& v) {
  const auto& s = std::get<std::string>(v);
  if (s == "builtin:arith") return "";
  if (s.rfind("text:", 0) == 0 && s.size() > 5) return "";
  if (s.rfind("shards:", 0) == 0 && s.size() > 7) return "";
  if (s.rfind("records:", 0) == 0 && s.size() > 8) return "";
  return "must be \"builtin:arith\", \"text:PATH\", \"shards:DIR\" or \"records:DIR\"";
}

std::string check_device(const ConfigValue& v) {
  const auto& s = std::get<std::string>(v);
  if (s == "cpu" || s == "cuda" || s.rfind("cuda:", 0) == 0) return "";
  return "must be \"cpu\", \"cuda\" or \"cuda:N\"";
}

std::string check_metric(const ConfigValue& v) {
  const auto& s = std::get<std::string>(v);
  if (s == "val_loss" || s == "loss" || s == "grad_norm") return "";
  return "must be \"val_loss\", \"loss\" or \"grad_norm\"";
}

// The spelling only; train/deadline.cpp resolves it (SLURM_JOB_END_TIME) when the run starts.
std::string check_deadline(const ConfigValue& v) {
  const auto& s = std::get<std::string>(v);
  static const std::regex iso(R"(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(Z|\+00:00))");
  if (s.empty() || s == "auto" || s == "slurm" || std::regex_match(s, iso)) return "";
  if (s.size() <= 15 && s.find_first_not_of("0123456789") == std::string::npos) return "";
  return "must be \"auto\", \"slurm\", \"\", a UTC time like \"2026-11-24T18:00:00Z\" or Unix seconds";
}

std::string check_notice_url(const ConfigValue& v) {
  const auto& s = std::get<std::string>(v);
  if (s.empty() || (s.rfind("http://", 0) == 0 && s.size() > 7)) return "";
  return "must be \"\" or an http:// URL (the cloud metadata endpoints are plain HTTP)";
}

const std::vector<std::pair<std::string, MetricMode>> kMetricModes = {{"min", MetricMode::kMin},
                                                                      {"max", MetricMode::kMax}};

std::vector<KeySpec> build_schema() {
  constexpr double kBig = 1e12;
  std::vector<KeySpec> s;
  // [run]
  s.push_back(string_key("run.name", [](Config& c) -> std::string& { return c.run.name; },
                         "run name; the run writes to <out_dir>/<name>/", check_run_name));
  s.push_back(string_key("run.out_dir", [](Config& c) -> std::string& { return c.run.out_dir; },
                         "parent folder of run directories"));
  s.push_back(int_key("run.seed", [](Config& c) -> int64_t& { return c.run.seed; }, 0, 9.0e15,
                      "seed for initialisation, data order and dropout"));
  s.push_back(int_key("run.threads", [](Config& c) -> int64_t& { return c.run.threads; }, 0, 1024,
                      "intra-op and BLAS threads; 0 = auto (what frugal doctor measured fastest here, else physical cores)"));
  s.push_back(string_key("run.device", [](Config& c) -> std::string& { return c.run.device; },
                         "\"cpu\", \"cuda\" or \"cuda:N\"", check_device));
  s.push_back(bool_key("run.deterministic", [](Config& c) -> bool& { return c.run.deterministic; },
                       "deterministic GPU kernels, so a resumed GPU run reproduces the uninterrupted one "
                       "bitwise (slower; CPU runs are deterministic either way)"));
  // [model]
  s.push_back(int_key("model.layers", [](Config& c) -> int64_t& { return c.model.layers; }, 1,
                      1024, "transformer blocks"));
  s.push_back(int_key("model.heads", [](Config& c) -> int64_t& { return c.model.heads; }, 1, 1024,
                      "attention heads; must divide model.embd"));
  s.push_back(int_key("model.embd", [](Config& c) -> int64_t& { return c.model.embd; }, 8, 65536,
                      "residual width"));
  s.push_back(int_key("model.block", [](Config& c) -> int64_t& { return c.model.block; }, 2,
                      1 << 20, "context length in tokens"));
  s.push_back(int_key("model.vocab", [](Config& c) -> int64_t& { return c.model.vocab; }, 2,
                      1 << 24, "vocabulary size (256 for byte-level data); unset, a shards:DIR dataset's manifest sets it"));
  s.push_back(float_key("model.dropout", [](Config& c) -> double& { return c.model.dropout; }, 0,
                        0.9, "dropout probability; 0 = off"));
  // [data]
  s.push_back(string_key("data.source", [](Config& c) -> std::string& { return c.data.source; },
                         "\"builtin:arith\", \"text:PATH\", \"shards:DIR\" or \"records:DIR\" (docs/data.md)",
                         check_source));
  s.push_back(int_key("data.micro_batch", [](Config& c) -> int64_t& { return c.data.micro_batch; },
                      1, 1 << 20, "sequences per forward/backward pass"));
  s.push_back(float_key("data.val_fraction",
                        [](Config& c) -> double& { return c.data.val_fraction; }, 0.001, 0.5,
                        "text: fraction of the file held out (its end) for validation"));
  s.push_back(int_key("data.arith_digits",
                      [](Config& c) -> int64_t& { return c.data.arith_digits; }, 1, 9,
                      "arith: operands have 1..N digits"));
  s.push_back(int_key("data.arith_lines", [](Config& c) -> int64_t& { return c.data.arith_lines; },
                      10, 1e8, "arith: training problems generated"));
  s.push_back(int_key("data.workers", [](Config& c) -> int64_t& { return c.data.workers; }, 0, 64,
                      "shards, records: loader threads; 0 = build batches inline on the trainer thread"));
  s.push_back(int_key("data.prefetch", [](Config& c) -> int64_t& { return c.data.prefetch; }, 1,
                      1024, "shards, records: batches built ahead of the trainer at most"));
  // [train]
  s.push_back(int_key("train.steps", [](Config& c) -> int64_t& { return c.train.steps; }, 1, kBig,
                      "training iterations (each one optimizer step over train.global_batch sequences)"));
  s.push_back(int_key("train.global_batch",
                      [](Config& c) -> int64_t& { return c.train.global_batch; }, 0, 1 << 24,
                      "sequences per optimizer step, a multiple of data.micro_batch; 0 = micro_batch"));
  s.push_back(int_key("train.accum", [](Config& c) -> int64_t& { return c.train.accum; }, 0, 1 << 20,
                      "micro-batches per optimizer step; 0 = global_batch / micro_batch"));
  s.push_back(enum_key<OptimizerKind>(
      "train.optimizer", [](Config& c) -> OptimizerKind& { return c.train.optimizer; },
      {{"fused_adamw", OptimizerKind::kFusedAdamW}, {"torch_adamw", OptimizerKind::kTorchAdamW}},
      "fused_adamw: one flat multi-tensor update; torch_adamw: LibTorch's per-parameter AdamW"));
  s.push_back(float_key("train.lr", [](Config& c) -> double& { return c.train.lr; }, 0, 10,
                        "peak learning rate"));
  s.push_back(int_key("train.warmup_steps",
                      [](Config& c) -> int64_t& { return c.train.warmup_steps; }, 0, kBig,
                      "linear warm-up steps before the cosine decay"));
  s.push_back(float_key("train.min_lr_ratio",
                        [](Config& c) -> double& { return c.train.min_lr_ratio; }, 0, 1,
                        "final learning rate as a fraction of train.lr"));
  s.push_back(float_key("train.weight_decay",
                        [](Config& c) -> double& { return c.train.weight_decay; }, 0, 10,
                        "AdamW decoupled weight decay on weight matrices"));
  s.push_back(float_key("train.beta1", [](Config& c) -> double& { return c.train.beta1; }, 0,
                        0.999999, "AdamW first-moment decay"));
  s.push_back(float_key("train.beta2", [](Config& c) -> double& { return c.train.beta2; }, 0,
                        0.999999, "AdamW second-moment decay"));
  s.push_back(float_key("train.grad_clip", [](Config& c) -> double& { return c.train.grad_clip; },
                        0, 1e6, "global gradient-norm clip; 0 = off"));
  s.push_back(int_key("train.eval_every", [](Config& c) -> int64_t& { return c.train.eval_every; },
                      0, kBig, "evaluate every N steps (and at the end); 0 = only at the end"));
  s.push_back(int_key("train.eval_batches",
                      [](Config& c) -> int64_t& { return c.train.eval_batches; }, 1, 1 << 20,
                      "validation batches per evaluation"));
  s.push_back(int_key("train.log_every", [](Config& c) -> int64_t& { return c.train.log_every; }, 1,
                      kBig, "write a metrics.jsonl line every N steps"));
  s.push_back(int_key("train.answer_samples",
                      [](Config& c) -> int64_t& { return c.train.answer_samples; }, 0, 1 << 20,
                      "arith: held-out problems completed for answer_accuracy; 0 = skip"));
  s.push_back(float_key("train.max_minutes", [](Config& c) -> double& { return c.train.max_minutes; },
                        0, 1e9, "stop with a checkpoint after this many minutes (summed over resumes); 0 = no limit"));
  s.push_back(bool_key("train.smoke_first", [](Config& c) -> bool& { return c.train.smoke_first; },
                       "run `frugal smoke` (2 tiny steps, checkpoint, kill, resume) before training"));
  s.push_back(bool_key("train.auto_tune", [](Config& c) -> bool& { return c.train.auto_tune; },
                       "run `frugal tune` first and train with its choice (recorded in summary.json)"));
  // [precision]
  s.push_back(enum_key<PrecisionMode>(
      "precision.mode", [](Config& c) -> PrecisionMode& { return c.precision.mode; },
      {{"fp32", PrecisionMode::kFp32}, {"bf16", PrecisionMode::kBf16},
       {"fp16", PrecisionMode::kFp16}, {"auto", PrecisionMode::kAuto}},
      "compute precision: bf16/fp16 autocast with fp32 master weights; auto = bf16 where measured fast"));
  s.push_back(enum_key<LossScaling>(
      "precision.loss_scaling", [](Config& c) -> LossScaling& { return c.precision.loss_scaling; },
      {{"auto", LossScaling::kAuto}, {"dynamic", LossScaling::kDynamic}, {"none", LossScaling::kNone}},
      "dynamic loss scaling: auto = on for fp16 only"));
  s.push_back(bool_key("precision.tf32", [](Config& c) -> bool& { return c.precision.tf32; },
                       "TF32 tensor-core math for fp32 matmuls on Ampere and newer GPUs (no effect on CPU)"));
  s.push_back(float_key("precision.init_scale",
                        [](Config& c) -> double& { return c.precision.init_scale; }, 1, 3e38,
                        "fp16: initial loss scale"));
  s.push_back(float_key("precision.growth_factor",
                        [](Config& c) -> double& { return c.precision.growth_factor; }, 1.0001, 1e3,
                        "fp16: scale multiplier after growth_interval finite steps"));
  s.push_back(float_key("precision.backoff_factor",
                        [](Config& c) -> double& { return c.precision.backoff_factor; }, 1e-6, 0.9999,
                        "fp16: scale multiplier after a step with inf/NaN gradients"));
  s.push_back(int_key("precision.growth_interval",
                      [](Config& c) -> int64_t& { return c.precision.growth_interval; }, 1, kBig,
                      "fp16: consecutive finite steps before the scale grows"));
  s.push_back(float_key("precision.min_scale",
                        [](Config& c) -> double& { return c.precision.min_scale; }, 1e-30, 3e38,
                        "fp16: floor of the loss scale"));
  s.push_back(int_key("precision.fallback_after",
                      [](Config& c) -> int64_t& { return c.precision.fallback_after; }, 0, kBig,
                      "fp16: switch to bf16 after N consecutive skips at the floor; 0 = never"));
  // [memory]
  s.push_back(string_key("memory.activation_checkpointing",
                         [](Config& c) -> std::string& { return c.memory.activation_checkpointing; },
                         "\"none\", \"blocks\" or \"every:N\": recompute block activations in backward",
                         check_activation_checkpointing));
  s.push_back(int_key("memory.limit_mb", [](Config& c) -> int64_t& { return c.memory.limit_mb; }, 0,
                      kBig, "CPU live tensor memory limit in MiB (out-of-memory past it); 0 = cgroup limit or none"));
  s.push_back(bool_key("memory.reuse_freed", [](Config& c) -> bool& { return c.memory.reuse_freed; },
                       "keep freed tensor memory in the process for reuse (no page faults for repeat "
                       "sizes); false = glibc returns it to the OS"));
  // [checkpoint]
  s.push_back(bool_key("checkpoint.enabled", [](Config& c) -> bool& { return c.checkpoint.enabled; },
                       "write checkpoints on the cadence and at the end; off = only on a stop signal"));
  s.push_back(int_key("checkpoint.every_steps",
                      [](Config& c) -> int64_t& { return c.checkpoint.every_steps; }, 0, kBig,
                      "save every N steps; 0 = no step cadence"));
  s.push_back(float_key("checkpoint.every_minutes",
                        [](Config& c) -> double& { return c.checkpoint.every_minutes; }, 0, 1e9,
                        "save when N minutes passed since the last save; 0 = off"));
  s.push_back(bool_key("checkpoint.auto", [](Config& c) -> bool& { return c.checkpoint.auto_interval; },
                       "Young/Daly interval sqrt(2 x measured save stall x mtbf); overrides every_minutes"));
  s.push_back(float_key("checkpoint.mtbf_minutes",
                        [](Config& c) -> double& { return c.checkpoint.mtbf_minutes; }, 0.01, 1e9,
                        "expected minutes between preemptions, for checkpoint.auto"));
  s.push_back(int_key("checkpoint.keep_last", [](Config& c) -> int64_t& { return c.checkpoint.keep_last; },
                      1, 1e6, "newest complete checkpoints kept"));
  s.push_back(int_key("checkpoint.keep_best", [](Config& c) -> int64_t& { return c.checkpoint.keep_best; },
                      0, 1e6, "best checkpoints by checkpoint.best_metric kept besides; 0 = none"));
  s.push_back(string_key("checkpoint.best_metric",
                         [](Config& c) -> std::string& { return c.checkpoint.best_metric; },
                         "metric ranking checkpoints: \"val_loss\", \"loss\" or \"grad_norm\"", check_metric));
  s.push_back(enum_key<MetricMode>("checkpoint.best_mode",
                                   [](Config& c) -> MetricMode& { return c.checkpoint.best_mode; },
                                   kMetricModes, "min: smaller best_metric is better; max: larger"));
  s.push_back(enum_key<WeightsDtype>(
      "checkpoint.weights_dtype", [](Config& c) -> WeightsDtype& { return c.checkpoint.weights_dtype; },
      {{"fp32", WeightsDtype::kFp32}, {"bf16", WeightsDtype::kBf16}, {"fp16", WeightsDtype::kFp16}},
      "dtype of model.safetensors; bf16/fp16 halve its bytes (fp32 masters kept if exact_resume)"));
  s.push_back(bool_key("checkpoint.exact_resume",
                       [](Config& c) -> bool& { return c.checkpoint.exact_resume; },
                       "keep fp32 master weights when weights_dtype is not fp32 (bitwise resume)"));
  s.push_back(bool_key("checkpoint.async", [](Config& c) -> bool& { return c.checkpoint.async; },
                       "snapshot to host memory and write on a background thread"));
  s.push_back(string_key("checkpoint.deadline", [](Config& c) -> std::string& { return c.checkpoint.deadline; },
                         "when the job ends: \"auto\" (Slurm's end time if any), \"slurm\", \"\" (none), "
                         "\"2026-11-24T18:00:00Z\" or Unix seconds; the run checkpoints and exits 75 in time",
                         check_deadline));
  s.push_back(float_key("checkpoint.deadline_margin_s",
                        [](Config& c) -> double& { return c.checkpoint.deadline_margin_s; }, 0, 1e7,
                        "seconds kept free before checkpoint.deadline besides one step (and an evaluation when one is due) and the longest save"));
  s.push_back(string_key("checkpoint.notice_url", [](Config& c) -> std::string& { return c.checkpoint.notice_url; },
                         "preemption-notice URL polled during training (cloud metadata); \"\" = none",
                         check_notice_url));
  s.push_back(float_key("checkpoint.notice_poll_s", [](Config& c) -> double& { return c.checkpoint.notice_poll_s; },
                        0.05, 3600, "seconds between polls of checkpoint.notice_url"));
  // [early_stop]
  s.push_back(bool_key("early_stop.enabled", [](Config& c) -> bool& { return c.early_stop.enabled; },
                       "stop when early_stop.metric stops improving"));
  s.push_back(string_key("early_stop.metric",
                         [](Config& c) -> std::string& { return c.early_stop.metric; },
                         "\"val_loss\" (per evaluation), \"loss\" or \"grad_norm\" (per log step)",
                         check_metric));
  s.push_back(enum_key<MetricMode>("early_stop.mode",
                                   [](Config& c) -> MetricMode& { return c.early_stop.mode; },
                                   kMetricModes, "min: smaller is better; max: larger is better"));
  s.push_back(int_key("early_stop.patience", [](Config& c) -> int64_t& { return c.early_stop.patience; },
                      1, 1e9, "evaluations without improvement before stopping"));
  s.push_back(float_key("early_stop.min_delta",
                        [](Config& c) -> double& { return c.early_stop.min_delta; }, 0, 1e30,
                        "an improvement must beat the best by more than this"));
  s.push_back(int_key("early_stop.warmup", [](Config& c) -> int64_t& { return c.early_stop.warmup; },
                      0, 1e9, "first evaluations ignored"));
  // [guard]
  s.push_back(bool_key("guard.enabled", [](Config& c) -> bool& { return c.guard.enabled; },
                       "roll back to the last good checkpoint when the loss diverges"));
  s.push_back(float_key("guard.spike_factor", [](Config& c) -> double& { return c.guard.spike_factor; },
                        0, 1e6, "loss above this x its moving average is a spike; 0 = NaN/inf only"));
  s.push_back(int_key("guard.spike_windows", [](Config& c) -> int64_t& { return c.guard.spike_windows; },
                      1, 1e6, "consecutive spiking log windows that count as divergence"));
  s.push_back(float_key("guard.ema_decay", [](Config& c) -> double& { return c.guard.ema_decay; }, 0,
                        0.9999, "decay of the loss moving average (per log window)"));
  s.push_back(float_key("guard.lr_factor", [](Config& c) -> double& { return c.guard.lr_factor; },
                        0.001, 1, "learning-rate multiplier applied at each rollback"));
  s.push_back(int_key("guard.max_rollbacks", [](Config& c) -> int64_t& { return c.guard.max_rollbacks; },
                      0, 1000, "rollbacks before the run stops with exit code 3"));
  // [budget]
  s.push_back(float_key("budget.usd_per_hour", [](Config& c) -> double& { return c.budget.usd_per_hour; },
                        0, 1e6, "machine price in USD/hour; 0 = from the price table via budget.instance"));
  s.push_back(string_key("budget.instance", [](Config& c) -> std::string& { return c.budget.instance; },
                         "instance name in data/prices.toml (FRUGAL_PRICE_TABLE overrides the file)"));
  s.push_back(bool_key("budget.spot", [](Config& c) -> bool& { return c.budget.spot; },
                       "use the price table's spot column"));
  s.push_back(float_key("budget.limit_usd", [](Config& c) -> double& { return c.budget.limit_usd; },
                        0, 1e9, "hard spending limit: stop with exit code 3; 0 = none"));
  s.push_back(string_key("budget.alert_at", [](Config& c) -> std::string& { return c.budget.alert_at; },
                         "comma-separated fractions of limit_usd that raise an alert once",
                         [](const ConfigValue& v) -> std::string {
                           try {
                             parse_alert_fractions(std::get<std::string>(v));
                           } catch (const std::exception& e) {
                             return e.what();
                           }
                           return "";
                         }));
  s.push_back(string_key("budget.alert_command",
                         [](Config& c) -> std::string& { return c.budget.alert_command; },
                         "shell command run at each alert, with FRUGAL_COST_* environment variables"));
  s.push_back(float_key("budget.watts", [](Config& c) -> double& { return c.budget.watts; }, 0, 1e7,
                        "power draw in watts; 0 = from the price table"));
  s.push_back(float_key("budget.grid_g_per_kwh",
                        [](Config& c) -> double& { return c.budget.grid_g_per_kwh; }, 0, 2000,
                        "grid carbon intensity in g CO2/kWh"));
  // [dist]
  s.push_back(enum_key<DistBackend>(
      "dist.backend", [](Config& c) -> DistBackend& { return c.dist.backend; },
      {{"auto", DistBackend::kAuto}, {"gloo", DistBackend::kGloo}, {"nccl", DistBackend::kNccl}},
      "multi-process communication: auto = NCCL on CUDA where built, else Gloo"));
  s.push_back(float_key("dist.timeout_s", [](Config& c) -> double& { return c.dist.timeout_s; }, 1, 1e6,
                        "seconds a rank waits for a missing or silent peer before failing with an error"));
  s.push_back(int_key("dist.zero", [](Config& c) -> int64_t& { return c.dist.zero; }, 0, 1,
                      "1 = ZeRO-1: shard the optimizer state across ranks; 0 = every rank holds all of it"));
  s.push_back(float_key("dist.bucket_mb", [](Config& c) -> double& { return c.dist.bucket_mb; }, 0.001, 1e5,
                        "gradient all-reduce bucket size in MB (started during backward)"));
  // [profile]
  s.push_back(int_key("profile.capture_steps", [](Config& c) -> int64_t& { return c.profile.capture_steps; },
                      0, 1e6, "steps per profiler capture window (Chrome trace in runs/<name>/profile/); 0 = off"));
  s.push_back(int_key("profile.start_step", [](Config& c) -> int64_t& { return c.profile.start_step; },
                      0, 1e12, "the first window starts after this many steps (skips the warm-up)"));
  s.push_back(int_key("profile.every_steps", [](Config& c) -> int64_t& { return c.profile.every_steps; },
                      0, 1e12, "start another window every N steps; 0 = capture once"));
  s.push_back(bool_key("profile.torch_ops", [](Config& c) -> bool& { return c.profile.torch_ops; },
                       "record LibTorch's operator events besides frugal's phase spans"));
  s.push_back(bool_key("profile.record_shapes", [](Config& c) -> bool& { return c.profile.record_shapes; },
                       "record each operator's input shapes in the trace (bigger files)"));
  s.push_back(int_key("profile.top_ops", [](Config& c) -> int64_t& { return c.profile.top_ops; }, 1, 1000,
                      "rows of the top-operators-by-self-time table"));
  // [monitor]
  s.push_back(float_key("monitor.peak_tflops", [](Config& c) -> double& { return c.monitor.peak_tflops; },
                        0, 1e6, "peak TFLOP/s for MFU; 0 = measure a dense matmul in the run's precision at start"));
  s.push_back(bool_key("monitor.grad_noise", [](Config& c) -> bool& { return c.monitor.grad_noise; },
                       "estimate the gradient noise scale at log steps when accum > 1"));
  s.push_back(string_key("monitor.http", [](Config& c) -> std::string& { return c.monitor.http; },
                         "live dashboard address HOST:PORT (port 0 = any free port); \"\" = off",
                         [](const ConfigValue& v) -> std::string {
                           const auto& t = std::get<std::string>(v);
                           if (t.empty()) return "";
                           try {
                             parse_http_address(t);
                           } catch (const std::exception& e) {
                             return e.what();
                           }
                           return "";
                         }));
  s.push_back(bool_key("monitor.allow_remote", [](Config& c) -> bool& { return c.monitor.allow_remote; },
                       "allow a non-loopback monitor.http address (requires monitor.token)"));
  KeySpec token = string_key("monitor.token", [](Config& c) -> std::string& { return c.monitor.token; },
                             "dashboard secret: requests need it as a Bearer token or ?token=; never written to files");
  token.secret = true;
  s.push_back(token);
  // [tune]
  s.push_back(float_key("tune.max_fraction", [](Config& c) -> double& { return c.tune.max_fraction; },
                        0.001, 1, "tuning time bound, as a fraction of the run's projected time"));
  s.push_back(int_key("tune.probe_steps", [](Config& c) -> int64_t& { return c.tune.probe_steps; }, 1,
                      10000, "measured steps per candidate (after one warm-up step)"));
  s.push_back(int_key("tune.rounds", [](Config& c) -> int64_t& { return c.tune.rounds; }, 1, 100,
                      "measurement rounds, candidates in turn; each candidate's tokens/s is its median"));
  s.push_back(float_key("tune.min_speedup", [](Config& c) -> double& { return c.tune.min_speedup; }, 0, 10,
                        "a candidate must beat the configuration as given by this fraction to replace it"));
  s.push_back(float_key("tune.loss_tolerance", [](Config& c) -> double& { return c.tune.loss_tolerance; },
                        0, 10, "a candidate's loss must be within this relative distance of fp32's"));
  s.push_back(int_key("tune.loss_check_steps", [](Config& c) -> int64_t& { return c.tune.loss_check_steps; },
                      0, 1000000, "steps the chosen candidate and fp32 train to compare losses; 0 = probe losses"));
  s.push_back(float_key("tune.memory_margin", [](Config& c) -> double& { return c.tune.memory_margin; },
                        0, 0.9, "batch-size finder: keep peak memory below (1 - margin) x the budget"));
  s.push_back(int_key("tune.max_micro_batch", [](Config& c) -> int64_t& { return c.tune.max_micro_batch; },
                      1, 1 << 20, "batch-size finder: largest micro-batch probed"));
  s.push_back(bool_key("tune.cache", [](Config& c) -> bool& { return c.tune.cache; },
                       "cache finder results in ~/.cache/frugal/batch_finder.json (FRUGAL_CACHE_DIR overrides)"));
  return s;
}

}  // namespace

const std::vector<KeySpec>& config_schema() {
  static const std::vector<KeySpec> schema = build_schema();
  return schema;
}

const KeySpec* find_key(const std::string& key) {
  for (const auto& k : config_schema()) {
    if (k.key == key) return &k;
  }
  return nullptr;
}

std::string config_reference_markdown() {
  std::string out =
      "# Configuration reference\n\n"
      "Generated by `frugal config --markdown` from the schema in src/core/config_schema.cpp; a test\n"
      "fails when this file and the code disagree.\n\n"
      "Values resolve as: built-in default < environment variable < TOML file < `--set KEY=VALUE`.\n"
      "`frugal config [FILE] [--set ...]` prints the resolved configuration with each value's origin.\n";
  Config defaults;
  std::string section;
  for (const auto& k : config_schema()) {
    if (k.section() != section) {
      section = k.section();
      out += fmt::format("\n## [{}]\n\n| key | default | allowed | environment | meaning |\n"
                         "| --- | --- | --- | --- | --- |\n",
                         section);
    }
    out += fmt::format("| `{}` | `{}` | {} | `{}` | {} |\n", k.name(), format_value(k.get(defaults)),
                       k.allowed(), k.env_name(), k.help);
  }
  return out;
}

std::string KeySpec::env_name() const {
  std::string out = "FRUGAL_";
  for (char ch : key) out += ch == '.' ? '_' : static_cast<char>(std::toupper(ch));
  return out;
}

std::string KeySpec::allowed() const {
  auto num = [](double x) { return fmt::format("{:g}", x); };
  switch (type) {
    case ValueType::kBool:
      return "true or false";
    case ValueType::kInt:
      return fmt::format("an integer in [{}, {}]", num(*min), num(*max));
    case ValueType::kFloat:
      return fmt::format("a number in [{}, {}]", num(*min), num(*max));
    case ValueType::kEnum:
      return fmt::format("one of {}", fmt::join(choices, ", "));
    case ValueType::kString:
      return "a string";
  }
  return "";
}

}  // namespace frugal
