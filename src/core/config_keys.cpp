// Every configuration key, declared once, section by section: the key, its field, type, range and
// help. Docs (docs/config.md, `frugal config --list`), env variable names, parsing and range checks
// all come from these declarations (src/core/config_schema.cpp), so they cannot drift.
#include <fmt/format.h>

#include <cctype>
#include <regex>

#include "core/internal/schema_keys.h"

namespace frugal::schema {
namespace {

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

std::string check_device(const ConfigValue& v) {
  const auto& s = std::get<std::string>(v);
  if (s == "cpu" || s == "cuda" || s.rfind("cuda:", 0) == 0) return "";
  return "must be \"cpu\", \"cuda\" or \"cuda:N\"";
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

std::string check_model_source(const ConfigValue& v) {
  const auto& s = std::get<std::string>(v);
  if (s == "gpt" || (s.rfind("torchscript:", 0) == 0 && s.size() > 12)) return "";
  return "must be \"gpt\" (frugal's own decoder, of model.arch's family) or \"torchscript:FILE\" (a scripted module)";
}

std::string check_init_from(const ConfigValue& v) {
  const auto& s = std::get<std::string>(v);
  if (s.empty() || (s.rfind("hf:", 0) == 0 && s.size() > 3)) return "";
  return "must be \"\" (random initialisation) or \"hf:DIR\" (a Hugging Face GPT-2 or Llama-family directory)";
}

}  // namespace

void add_run_keys(std::vector<KeySpec>& s) {
  KeyList k{s};
  k.may(string_key(FRUGAL_FIELD(run, name), "run name; the run writes to <out_dir>/<name>/", check_run_name));
  k.may(string_key(FRUGAL_FIELD(run, out_dir), "parent folder of run directories"));
  k.fixed(int_key(FRUGAL_FIELD(run, seed), 0, 9.0e15, "seed for initialisation, data order and dropout"));
  k.may(int_key(FRUGAL_FIELD(run, threads), 0, 1024,
                "intra-op and BLAS threads; 0 = auto (what frugal doctor measured fastest here, else physical cores)"));
  k.may(string_key(FRUGAL_FIELD(run, device), "\"cpu\", \"cuda\" or \"cuda:N\"", check_device));
  k.may(bool_key(FRUGAL_FIELD(run, deterministic),
                 "deterministic GPU kernels, so a resumed GPU run reproduces the uninterrupted one "
                 "bitwise (slower; CPU runs are deterministic either way)"));
}

void add_model_keys(std::vector<KeySpec>& s) {
  KeyList k{s};
  k.fixed(enum_key<ModelConfig::Arch>(
      FRUGAL_FIELD(model, arch), {{"gpt", ModelConfig::Arch::kGpt}, {"llama", ModelConfig::Arch::kLlama}},
      "the decoder family: \"gpt\" (learned positions, LayerNorm, GELU MLP, tied head) or \"llama\" (rotary "
      "positions, RMSNorm, SwiGLU MLP, grouped-query attention: Llama 2/3, Qwen2/2.5/3, Mistral; docs/model.md); "
      "unset, model.init_from's config.json sets it"));
  k.fixed(int_key(FRUGAL_FIELD(model, layers), 1, 1024, "transformer blocks"));
  k.fixed(int_key(FRUGAL_FIELD(model, heads), 1, 1024,
                  "attention (query) heads; must divide model.embd unless model.head_dim is set"));
  k.fixed(int_key(FRUGAL_FIELD(model, kv_heads), 0, 1024,
                  "llama: key/value heads, each shared by heads / kv_heads query heads (grouped-query "
                  "attention); 0 = model.heads"));
  k.fixed(int_key(FRUGAL_FIELD(model, embd), 8, 65536, "residual width"));
  k.fixed(int_key(FRUGAL_FIELD(model, head_dim), 0, 4096, "llama: channels of one head (even); 0 = embd / heads"));
  k.fixed(int_key(FRUGAL_FIELD(model, mlp_width), 0, 1 << 20,
                  "llama: the SwiGLU MLP's hidden width (intermediate_size); 0 = 8/3 embd rounded up to a "
                  "multiple of 16"));
  k.fixed(int_key(FRUGAL_FIELD(model, block), 2, 1 << 20, "context length in tokens"));
  k.fixed(int_key(FRUGAL_FIELD(model, vocab), 2, 1 << 24,
                  "vocabulary size (256 for byte-level data); unset, a shards:DIR dataset's manifest sets it"));
  k.fixed(float_key(FRUGAL_FIELD(model, dropout), 0, 0.9, "dropout probability; 0 = off"));
  k.fixed(enum_key<ModelConfig::Activation>(
      FRUGAL_FIELD(model, activation),
      {{"gelu", ModelConfig::Activation::kGelu}, {"gelu_tanh", ModelConfig::Activation::kGeluTanh}},
      "gpt: the MLP nonlinearity, \"gelu\" (exact, erf; frugal's fused CPU kernel) or \"gelu_tanh\" (GPT-2's "
      "tanh approximation); unset, model.init_from's config.json sets it. The Llama family's MLP is SwiGLU"));
  k.fixed(float_key(FRUGAL_FIELD(model, norm_eps), 1e-12, 1e-1,
                    "LayerNorm (gpt) or RMSNorm (llama) epsilon; unset, model.init_from's config.json sets it"));
  k.fixed(float_key(FRUGAL_FIELD(model, rope_theta), 1, 1e12, "llama: the rotary embedding's base wavelength"));
  k.fixed(enum_key<ModelConfig::RopeScaling>(
      FRUGAL_FIELD(model, rope_scaling),
      {{"none", ModelConfig::RopeScaling::kNone},
       {"linear", ModelConfig::RopeScaling::kLinear},
       {"llama3", ModelConfig::RopeScaling::kLlama3},
       {"yarn", ModelConfig::RopeScaling::kYarn}},
      "llama: rotary frequency scaling for a context past the pretraining one: \"linear\" (positions / factor), "
      "\"llama3\" (Llama 3.1+'s band-wise scaling), \"yarn\" (YaRN, beta_fast 32, beta_slow 1)"));
  k.fixed(float_key(FRUGAL_FIELD(model, rope_factor), 1, 4096, "llama: rope_scaling's factor"));
  k.fixed(float_key(FRUGAL_FIELD(model, rope_low_freq_factor), 1e-6, 1e6, "llama: llama3 scaling's low_freq_factor"));
  k.fixed(float_key(FRUGAL_FIELD(model, rope_high_freq_factor), 1e-6, 1e6, "llama: llama3 scaling's high_freq_factor"));
  k.fixed(int_key(FRUGAL_FIELD(model, rope_original_block), 0, 1 << 24,
                  "llama: llama3 and yarn scaling's original_max_position_embeddings; 0 = model.block"));
  k.fixed(enum_key<ModelConfig::AttentionBias>(
      FRUGAL_FIELD(model, attention_bias),
      {{"none", ModelConfig::AttentionBias::kNone},
       {"qkv", ModelConfig::AttentionBias::kQkv},
       {"all", ModelConfig::AttentionBias::kAll}},
      "llama: biases of the attention projections: \"none\" (Llama, Mistral), \"qkv\" (q, k and v: Qwen2), "
      "\"all\" (q, k, v and output: attention_bias = true)"));
  k.fixed(bool_key(FRUGAL_FIELD(model, qk_norm),
                   "llama: RMSNorm over each head's queries and keys before the rotation (Qwen3)"));
  k.fixed(bool_key(FRUGAL_FIELD(model, tie_embeddings),
                   "the output head shares the token embedding's weight (the GPT's always does)"));
  k.fixed(int_key(FRUGAL_FIELD(model, sliding_window), 0, 1 << 24,
                  "llama: each token attends to the last N positions only, itself included (Mistral); 0 = the "
                  "whole context"));
  k.may(int_key(FRUGAL_FIELD(model, loss_chunk), 0, 1 << 24,
                "llama: rows of the output head + cross-entropy computed at a time, so no tokens x vocab fp32 "
                "logits are held; 0 = auto (a chunk's logits about the size of its hidden states, and at least "
                "2^20 of them; on a GPU 2^26, 2^28 on frugal's classifier kernel)"));
  k.fixed(int_key(FRUGAL_FIELD(model, head_multiple), 0, 4096,
                  "the output head's matmuls run at model.vocab rounded up to a multiple of this (zero rows "
                  "for the product only; parameters, checkpoints and logits unchanged): aligned widths use "
                  "the GPU's fast matmul kernels; 0 = auto (64 on a GPU, off on the CPU), 1 = off"));
  k.may(enum_key<ModelConfig::Kernels>(
      FRUGAL_FIELD(model, kernels),
      {{"auto", ModelConfig::Kernels::kAuto},
       {"aten", ModelConfig::Kernels::kAten},
       {"frugal", ModelConfig::Kernels::kFrugal}},
      "what runs the GPT's LayerNorms, MLP bias + GELU and loss, the Llama family's RMSNorms, SwiGLU and rotary "
      "embedding, and fp8's casts on a GPU: \"aten\" (ATen's operators), \"frugal\" (frugal's CUDA kernels, CUDA "
      "compute capability 8.0+, fp32 or bf16; docs/gpu.md), \"auto\" (frugal's kernels for a training run where "
      "their GPU check ran them: one process on a GPU they run on, frugal's own decoders, no fp16, no LoRA, no "
      "activation checkpointing; aten elsewhere; summary.json's levers say which and why)"));
  k.fixed(string_key(FRUGAL_FIELD(model, source),
                     "what is trained: \"gpt\" (frugal's own decoder, of model.arch's family) or "
                     "\"torchscript:FILE\" (a module scripted in "
                     "Python whose forward(x, y) returns the mean loss; docs/library.md)",
                     check_model_source));
  k.fixed(string_key(FRUGAL_FIELD(model, init_from),
                     "initial weights: \"\" = random (run.seed), \"hf:DIR\" = a Hugging Face directory of a "
                     "GPT-2 or Llama-family model (config.json + safetensors), whose config.json sets model.arch "
                     "and the model keys left unset",
                     check_init_from));
}

void add_data_keys(std::vector<KeySpec>& s) {
  KeyList k{s};
  k.fixed(
      spelled_key<DataSource>(FRUGAL_FIELD(data, source), parse_data_source,
                              "must be \"builtin:arith\", \"text:PATH\", \"shards:DIR\" or \"records:DIR\"",
                              "\"builtin:arith\", \"text:PATH\", \"shards:DIR\" or \"records:DIR\" (docs/data.md)"));
  k.fixed(int_key(FRUGAL_FIELD(data, micro_batch), 1, 1 << 20, "sequences per forward/backward pass"));
  k.fixed(float_key(FRUGAL_FIELD(data, val_fraction), 0.001, 0.5,
                    "text: fraction of the file held out (its end) for validation"));
  k.fixed(int_key(FRUGAL_FIELD(data, arith_digits), 1, 9, "arith: operands have 1..N digits"));
  k.fixed(int_key(FRUGAL_FIELD(data, arith_lines), 10, 1e8, "arith: training problems generated"));
  k.may(int_key(
      FRUGAL_FIELD(data, workers), 0, 64,
      "shards, records and a task's DatasetSource: loader threads; 0 = build batches inline on the trainer thread"));
  k.may(int_key(FRUGAL_FIELD(data, prefetch), 1, 1024, "shards, records: batches built ahead of the trainer at most"));
  k.fixed(enum_key<DataConfig::Packing>(
      FRUGAL_FIELD(data, packing), {{"pack", DataConfig::Packing::kPack}, {"pad", DataConfig::Packing::kPad}},
      "documents datasets (prepare --format chat or prompt-completion): \"pack\" = several documents a row, each "
      "attending to itself only, positions restarted per document; \"pad\" = one document a row, padded to "
      "model.block (docs/data.md)"));
}

void add_train_keys(std::vector<KeySpec>& s) {
  KeyList k{s};
  k.may(int_key(FRUGAL_FIELD(train, steps), 1, kBig,
                "training iterations (each one optimizer step over train.global_batch sequences)"));
  k.fixed(int_key(FRUGAL_FIELD(train, global_batch), 0, 1 << 24,
                  "sequences per optimizer step, a multiple of data.micro_batch; 0 = micro_batch"));
  k.fixed(int_key(FRUGAL_FIELD(train, accum), 0, 1 << 20,
                  "micro-batches per optimizer step; 0 = global_batch / micro_batch"));
  k.fixed(list_key(FRUGAL_FIELD(train, freeze),
                   "parameters left as they are: globs over the Hugging Face names `frugal export` writes, "
                   "comma-separated or a TOML list (\"model.embed_tokens.*\", \"model.layers.[0-3].*\"); frozen "
                   "tensors get no gradient and no optimizer state; \"\" = train all",
                   "globs"));
  k.fixed(enum_key<OptimizerKind>(
      FRUGAL_FIELD(train, optimizer),
      {{"fused_adamw", OptimizerKind::kFusedAdamW},
       {"torch_adamw", OptimizerKind::kTorchAdamW},
       {"muon", OptimizerKind::kMuon}},
      "fused_adamw: one flat multi-tensor update; torch_adamw: LibTorch's per-parameter AdamW; muon: Muon "
      "(momentum orthogonalised by Newton-Schulz, as torch.optim.Muon) on the hidden weight matrices and "
      "fused_adamw on embeddings, gains and biases (docs/levers.md)"));
  k.fixed(float_key(FRUGAL_FIELD(train, lr), 0, 10, "peak learning rate"));
  k.fixed(
      int_key(FRUGAL_FIELD(train, warmup_steps), 0, kBig, "linear warm-up steps before the decay (train.schedule)"));
  k.fixed(float_key(FRUGAL_FIELD(train, min_lr_ratio), 0, 1, "final learning rate as a fraction of train.lr"));
  k.fixed(float_key(FRUGAL_FIELD(train, weight_decay), 0, 10, "AdamW decoupled weight decay on weight matrices"));
  k.fixed(float_key(FRUGAL_FIELD(train, beta1), 0, 0.999999, "AdamW first-moment decay"));
  k.fixed(float_key(FRUGAL_FIELD(train, beta2), 0, 0.999999, "AdamW second-moment decay"));
  k.fixed(float_key(FRUGAL_FIELD(train, grad_clip), 0, 1e6, "global gradient-norm clip; 0 = off"));
  k.may(bool_key(FRUGAL_FIELD(train, cuda_graphs),
                 "on a GPU, each step after the first two as one CUDA graph replayed: the step's thousands of kernel "
                 "launches become one (single process, AdamW; docs/gpu.md lists what is not captured)"));
  k.fixed(enum_key<LrSchedule>(
      FRUGAL_FIELD(train, schedule), {{"cosine", LrSchedule::kCosine}, {"wsd", LrSchedule::kWsd}},
      "after the warm-up: cosine (decay to lr * min_lr_ratio over the rest of the run) or wsd (warmup-stable-decay: "
      "train.lr until the last train.decay_fraction of train.steps, then linear to the floor; a resumed run can be "
      "lengthened with --set train.steps=N while still stable)"));
  k.fixed(float_key(FRUGAL_FIELD(train, decay_fraction), 0, 1,
                    "wsd: the share of train.steps its final linear decay takes"));
  k.fixed(float_key(FRUGAL_FIELD(train, muon_momentum), 0, 0.999999,
                    "muon: the momentum of its gradient buffer (torch.optim.Muon's default)"));
  k.fixed(enum_key<MuonLrAdjust>(
      FRUGAL_FIELD(train, muon_lr_adjust),
      {{"match_rms_adamw", MuonLrAdjust::kMatchRmsAdamW}, {"original", MuonLrAdjust::kOriginal}},
      "muon: the learning rate per matrix of rows x cols: match_rms_adamw = lr * 0.2 * sqrt(max(rows, cols)) "
      "(AdamW's train.lr and weight_decay carry over), original = lr * sqrt(max(1, rows / cols)) (wants lr ~0.02)"));
  k.fixed(enum_key<MuonPrecision>(
      FRUGAL_FIELD(train, muon_precision),
      {{"auto", MuonPrecision::kAuto}, {"bf16", MuonPrecision::kBf16}, {"fp32", MuonPrecision::kFp32}},
      "muon: the dtype of its Newton-Schulz iteration; auto = bf16 on a GPU and on a CPU with AVX-512 BF16 or "
      "AMX, else fp32"));
  k.may(float_key(FRUGAL_FIELD(train, target_loss), 0, 1e6,
                  "stop when the validation loss reaches this at an evaluation (stop reason \"target reached\", "
                  "exit 0; summary.json's to_target: tokens, wall time, $ and kWh); 0 = off"));
  k.may(int_key(FRUGAL_FIELD(train, eval_every), 0, kBig,
                "evaluate every N steps (and at the end); 0 = only at the end"));
  k.may(int_key(FRUGAL_FIELD(train, eval_batches), 1, 1 << 20, "validation batches per evaluation"));
  k.may(int_key(FRUGAL_FIELD(train, log_every), 1, kBig, "write a metrics.jsonl line every N steps"));
  k.may(int_key(FRUGAL_FIELD(train, answer_samples), 0, 1 << 20,
                "arith: held-out problems completed for answer_accuracy; 0 = skip"));
  k.may(float_key(FRUGAL_FIELD(train, max_minutes), 0, 1e9,
                  "stop with a checkpoint after this many minutes (summed over resumes); 0 = no limit"));
  k.may(bool_key(FRUGAL_FIELD(train, smoke_first),
                 "`frugal train` runs `frugal smoke` (2 tiny steps, checkpoint, kill, resume) before training "
                 "(the CLI only: a program calls run_smoke, tune/smoke.h, itself)"));
  k.may(bool_key(FRUGAL_FIELD(train, auto_tune),
                 "`frugal train` runs `frugal tune` first and trains with its choice (recorded in summary.json; "
                 "the CLI only: a program calls run_tune, tune/tuner.h, itself)"));
}

void add_precision_keys(std::vector<KeySpec>& s) {
  KeyList k{s};
  k.may(enum_key<PrecisionMode>(
      FRUGAL_FIELD(precision, mode),
      {{"fp32", PrecisionMode::kFp32},
       {"bf16", PrecisionMode::kBf16},
       {"fp16", PrecisionMode::kFp16},
       {"fp8", PrecisionMode::kFp8},
       {"auto", PrecisionMode::kAuto}},
      "compute precision: bf16/fp16 autocast with fp32 master weights; fp8 = bf16 with the GPT/Llama blocks' linears "
      "in fp8 (GPUs of compute capability 8.9+); auto = bf16 where measured fast"));
  k.may(enum_key<LossScaling>(
      FRUGAL_FIELD(precision, loss_scaling),
      {{"auto", LossScaling::kAuto}, {"dynamic", LossScaling::kDynamic}, {"none", LossScaling::kNone}},
      "dynamic loss scaling: auto = on for fp16 only"));
  k.may(bool_key(FRUGAL_FIELD(precision, tf32),
                 "TF32 tensor-core math for fp32 matmuls on Ampere and newer GPUs (no effect on CPU)"));
  k.may(float_key(FRUGAL_FIELD(precision, init_scale), 1, 3e38, "fp16: initial loss scale"));
  k.may(float_key(FRUGAL_FIELD(precision, growth_factor), 1.0001, 1e3,
                  "fp16: scale multiplier after growth_interval finite steps"));
  k.may(float_key(FRUGAL_FIELD(precision, backoff_factor), 1e-6, 0.9999,
                  "fp16: scale multiplier after a step with inf/NaN gradients"));
  k.may(int_key(FRUGAL_FIELD(precision, growth_interval), 1, kBig,
                "fp16: consecutive finite steps before the scale grows"));
  k.may(float_key(FRUGAL_FIELD(precision, min_scale), 1e-30, 3e38, "fp16: floor of the loss scale"));
  k.may(int_key(FRUGAL_FIELD(precision, fallback_after), 0, kBig,
                "fp16: switch to bf16 after N consecutive skips at the floor; 0 = never"));
}

void add_memory_keys(std::vector<KeySpec>& s) {
  KeyList k{s};
  k.may(spelled_key<ActivationCheckpointing>(
      FRUGAL_FIELD(memory, activation_checkpointing), parse_activation_checkpointing,
      "must be \"none\", \"blocks\" or \"every:N\" with N >= 1",
      "\"none\", \"blocks\" or \"every:N\": recompute block activations in backward"));
  k.may(int_key(FRUGAL_FIELD(memory, limit_mb), 0, kBig,
                "CPU live tensor memory limit in MiB (out-of-memory past it); 0 = cgroup limit or none"));
  k.may(bool_key(FRUGAL_FIELD(memory, reuse_freed),
                 "keep freed tensor memory in the process for reuse (no page faults for repeat "
                 "sizes); false = glibc returns it to the OS"));
}

void add_checkpoint_keys(std::vector<KeySpec>& s) {
  KeyList k{s};
  k.may(bool_key(FRUGAL_FIELD(checkpoint, enabled),
                 "write checkpoints on the cadence and at the end; off = only on a stop signal"));
  k.may(int_key(FRUGAL_FIELD(checkpoint, every_steps), 0, kBig, "save every N steps; 0 = no step cadence"));
  k.may(float_key(FRUGAL_FIELD(checkpoint, every_minutes), 0, 1e9,
                  "save when N minutes passed since the last save; 0 = off"));
  k.may(bool_key(FRUGAL_FIELD_AS(checkpoint, auto_interval, "checkpoint.auto"),
                 "Young/Daly interval sqrt(2 x measured save stall x mtbf); overrides every_minutes"));
  k.may(float_key(FRUGAL_FIELD(checkpoint, mtbf_minutes), 0.01, 1e9,
                  "expected minutes between preemptions, for checkpoint.auto"));
  k.may(int_key(FRUGAL_FIELD(checkpoint, keep_last), 1, 1e6, "newest complete checkpoints kept"));
  k.may(int_key(FRUGAL_FIELD(checkpoint, keep_best), 0, 1e6,
                "best checkpoints by checkpoint.best_metric kept besides; 0 = none"));
  k.may(enum_key<Metric>(FRUGAL_FIELD(checkpoint, best_metric), kMetrics,
                         "metric ranking checkpoints: val_loss, loss or grad_norm"));
  k.may(enum_key<MetricMode>(FRUGAL_FIELD(checkpoint, best_mode), kMetricModes,
                             "min: smaller best_metric is better; max: larger"));
  k.may(enum_key<WeightsDtype>(
      FRUGAL_FIELD(checkpoint, weights_dtype),
      {{"fp32", WeightsDtype::kFp32}, {"bf16", WeightsDtype::kBf16}, {"fp16", WeightsDtype::kFp16}},
      "dtype of model.safetensors; bf16/fp16 halve its bytes (fp32 masters kept if exact_resume; several "
      "ZeRO ranks write fp32 shards then)"));
  k.may(bool_key(FRUGAL_FIELD(checkpoint, exact_resume),
                 "keep fp32 master weights when weights_dtype is not fp32 (bitwise resume)"));
  k.may(bool_key(FRUGAL_FIELD(checkpoint, async), "snapshot to host memory and write on a background thread"));
  k.may(string_key(FRUGAL_FIELD(checkpoint, deadline),
                   "when the job ends: \"auto\" (Slurm's end time if any), \"slurm\", \"\" (none), "
                   "\"2026-11-24T18:00:00Z\" or Unix seconds; the run checkpoints and exits 75 in time",
                   check_deadline));
  k.may(enum_key<DeadlineAction>(
      FRUGAL_FIELD(checkpoint, deadline_action),
      {{"requeue", DeadlineAction::kRequeue}, {"decay", DeadlineAction::kDecay}},
      "when checkpoint.deadline comes before train.steps: requeue = checkpoint and exit 75; decay (train.schedule = "
      "\"wsd\") = start the decay in time to end the run at the deadline, decayed (exit 0)"));
  k.may(float_key(FRUGAL_FIELD(checkpoint, deadline_margin_s), 0, 1e7,
                  "seconds kept free before checkpoint.deadline besides one step (and an evaluation when one is "
                  "due) and the longest save"));
  k.may(reaches_out(string_key(FRUGAL_FIELD(checkpoint, notice_url),
                               "preemption-notice URL polled during training (cloud metadata); \"\" = none",
                               check_notice_url)));
  k.may(
      float_key(FRUGAL_FIELD(checkpoint, notice_poll_s), 0.05, 3600, "seconds between polls of checkpoint.notice_url"));
}

void add_early_stop_keys(std::vector<KeySpec>& s) {
  KeyList k{s};
  k.may(bool_key(FRUGAL_FIELD(early_stop, enabled), "stop when early_stop.metric stops improving"));
  k.may(enum_key<Metric>(FRUGAL_FIELD(early_stop, metric), kMetrics,
                         "\"val_loss\" (per evaluation), \"loss\" or \"grad_norm\" (per log step)"));
  k.may(enum_key<MetricMode>(FRUGAL_FIELD(early_stop, mode), kMetricModes,
                             "min: smaller is better; max: larger is better"));
  k.may(int_key(FRUGAL_FIELD(early_stop, patience), 1, 1e9, "evaluations without improvement before stopping"));
  k.may(float_key(FRUGAL_FIELD(early_stop, min_delta), 0, 1e30, "an improvement must beat the best by more than this"));
  k.may(int_key(FRUGAL_FIELD(early_stop, warmup), 0, 1e9, "first evaluations ignored"));
  k.may(string_key(FRUGAL_FIELD(early_stop, task_metric),
                   "\"\" = watch early_stop.metric; else a figure the task's eval_metrics hook returns (e.g. "
                   "\"accuracy\" with early_stop.mode = \"max\"), counted per evaluation"));
}

void add_guard_keys(std::vector<KeySpec>& s) {
  KeyList k{s};
  k.may(bool_key(FRUGAL_FIELD(guard, enabled), "roll back to the last good checkpoint when the loss diverges"));
  k.may(float_key(FRUGAL_FIELD(guard, spike_factor), 0, 1e6,
                  "loss above this x its moving average is a spike; 0 = NaN/inf only"));
  k.may(
      int_key(FRUGAL_FIELD(guard, spike_windows), 1, 1e6, "consecutive spiking log windows that count as divergence"));
  k.may(float_key(FRUGAL_FIELD(guard, ema_decay), 0, 0.9999, "decay of the loss moving average (per log window)"));
  k.may(float_key(FRUGAL_FIELD(guard, lr_factor), 0.001, 1, "learning-rate multiplier applied at each rollback"));
  k.may(int_key(FRUGAL_FIELD(guard, max_rollbacks), 0, 1000, "rollbacks before the run stops with exit code 3"));
}

void add_budget_keys(std::vector<KeySpec>& s) {
  KeyList k{s};
  k.may(float_key(FRUGAL_FIELD(budget, usd_per_hour), 0, 1e6,
                  "machine price in USD/hour; 0 = from the price table via budget.instance"));
  k.may(string_key(FRUGAL_FIELD(budget, instance),
                   "instance name in data/prices.toml (FRUGAL_PRICE_TABLE overrides the file)"));
  k.may(bool_key(FRUGAL_FIELD(budget, spot), "use the price table's spot column"));
  k.may(float_key(FRUGAL_FIELD(budget, limit_usd), 0, 1e9, "hard spending limit: stop with exit code 3; 0 = none"));
  k.may(string_key(FRUGAL_FIELD(budget, alert_at), "comma-separated fractions of limit_usd that raise an alert once",
                   [](const ConfigValue& v) -> std::string {
                     try {
                       parse_alert_fractions(std::get<std::string>(v));
                     } catch (const std::exception& e) {
                       return e.what();
                     }
                     return "";
                   }));
  k.may(reaches_out(string_key(FRUGAL_FIELD(budget, alert_command),
                               "shell command run at each alert, with FRUGAL_COST_* environment variables")));
  k.may(float_key(FRUGAL_FIELD(budget, watts), 0, 1e7, "power draw in watts; 0 = from the price table"));
  k.may(float_key(FRUGAL_FIELD(budget, grid_g_per_kwh), 0, 2000, "grid carbon intensity in g CO2/kWh"));
}

void add_dist_keys(std::vector<KeySpec>& s) {
  KeyList k{s};
  k.may(
      enum_key<DistBackend>(FRUGAL_FIELD(dist, backend),
                            {{"auto", DistBackend::kAuto}, {"gloo", DistBackend::kGloo}, {"nccl", DistBackend::kNccl}},
                            "multi-process communication: auto = NCCL on CUDA where built, else Gloo"));
  k.may(float_key(FRUGAL_FIELD(dist, timeout_s), 1, 1e6,
                  "seconds a rank waits for a missing or silent peer before failing with an error"));
  k.may(int_enum_key<ZeroStage>(FRUGAL_FIELD(dist, zero), 0, 3,
                                "1 = ZeRO-1: shard the optimizer state across ranks; 2 = ZeRO-2: and the gradients; "
                                "3 = ZeRO-3: and the blocks' parameters, gathered per block; 0 = every rank holds all "
                                "of it"));
  k.may(bool_key(FRUGAL_FIELD(dist, reshard_after_forward),
                 "dist.zero = 3: true frees each block after its forward and gathers it again for its backward; "
                 "false keeps it whole in between (half the gathers; every block whole at the forward's end)"));
  k.may(enum_key<Offload>(FRUGAL_FIELD(dist, offload), {{"none", Offload::kNone}, {"optimizer", Offload::kOptimizer}},
                          "\"optimizer\": AdamW's moments in host memory and its update on the CPU (12 bytes a "
                          "parameter less on the GPU, a slower step; docs/distributed.md); \"none\": on the device"));
  k.may(float_key(FRUGAL_FIELD(dist, bucket_mb), 0.001, 1e5,
                  "gradient all-reduce bucket size in MB (started during backward)"));
}

void add_profile_keys(std::vector<KeySpec>& s) {
  KeyList k{s};
  k.may(int_key(FRUGAL_FIELD(profile, capture_steps), 0, 1e6,
                "steps per profiler capture window (Chrome trace in runs/<name>/profile/); 0 = off"));
  k.may(int_key(FRUGAL_FIELD(profile, start_step), 0, 1e12,
                "the first window starts after this many steps (skips the warm-up)"));
  k.may(int_key(FRUGAL_FIELD(profile, every_steps), 0, 1e12, "start another window every N steps; 0 = capture once"));
  k.may(bool_key(FRUGAL_FIELD(profile, torch_ops), "record LibTorch's operator events besides frugal's phase spans"));
  k.may(bool_key(FRUGAL_FIELD(profile, record_shapes),
                 "record each operator's input shapes in the trace (bigger files)"));
  k.may(int_key(FRUGAL_FIELD(profile, top_ops), 1, 1000, "rows of the top-operators-by-self-time table"));
}

void add_monitor_keys(std::vector<KeySpec>& s) {
  KeyList k{s};
  k.may(float_key(FRUGAL_FIELD(monitor, peak_tflops), 0, 1e6,
                  "peak TFLOP/s for MFU; 0 = measure a dense matmul in the run's precision at start"));
  k.may(bool_key(FRUGAL_FIELD(monitor, grad_noise), "estimate the gradient noise scale at log steps when accum > 1"));
  k.may(reaches_out(string_key(FRUGAL_FIELD(monitor, http),
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
                               })));
  k.may(bool_key(FRUGAL_FIELD(monitor, allow_remote),
                 "allow a non-loopback monitor.http address (requires monitor.token)"));
  KeySpec token = string_key(FRUGAL_FIELD(monitor, token),
                             "dashboard secret: requests need it as a Bearer token or ?token=; never written to files");
  token.secret = true;
  k.may(token);
}

void add_track_keys(std::vector<KeySpec>& s) {
  KeyList k{s};
  k.may(bool_key(FRUGAL_FIELD(track, tensorboard),
                 "write TensorBoard event files in runs/<name>/tb/ (every metric, the config, the levers)"));
  k.may(reaches_out(string_key(FRUGAL_FIELD(track, mlflow_uri),
                               "MLflow tracking server http://HOST:PORT; \"\" = off (credentials: MLFLOW_TRACKING_* "
                               "environment variables)",
                               [](const ConfigValue& v) -> std::string {
                                 const auto& t = std::get<std::string>(v);
                                 if (t.empty()) return "";
                                 try {
                                   parse_http_url(t, "track.mlflow_uri");
                                 } catch (const std::exception& e) {
                                   return e.what();
                                 }
                                 return "";
                               })));
  k.may(string_key(
      FRUGAL_FIELD(track, mlflow_experiment),
      "MLflow experiment of the run (created when the server has none by that name)",
      [](const ConfigValue& v) -> std::string { return std::get<std::string>(v).empty() ? "must not be empty" : ""; }));
  k.may(bool_key(FRUGAL_FIELD(track, mlflow_weights), "also send final/model.safetensors to MLflow as an artifact"));
  k.may(float_key(FRUGAL_FIELD(track, mlflow_timeout_s), 0.1, 3600,
                  "seconds one MLflow request may take in all; the run's end (status, queue, artifacts) waits at most "
                  "this long"));
  k.may(int_key(FRUGAL_FIELD(track, mlflow_queue), 100, 1e8,
                "metric points held while the MLflow server is slow or down; more are dropped and counted"));
}

}  // namespace frugal::schema
