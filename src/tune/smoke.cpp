// The smoke test; see smoke.h.
#include "frugal/tune/smoke.h"

#include <torch/torch.h>

#include <filesystem>
#include <functional>
#include <random>
#include <string_view>

#include <unistd.h>

#include <c10/util/Exception.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "frugal/ckpt/checkpoint.h"
#include "frugal/ckpt/run_dir.h"
#include "frugal/core/atomic_file.h"
#include "frugal/core/console.h"
#include "frugal/core/dir_lock.h"
#include "frugal/core/errors.h"
#include "frugal/core/memory.h"
#include "frugal/data/batch_source.h"
#include "frugal/model/causal_lm.h"
#include "frugal/model/scripted_module.h"
#include "frugal/train/lm_task.h"
#include "frugal/train/run_config.h"
#include "frugal/train/task.h"
#include "frugal/train/trainer.h"

namespace frugal {
namespace fs = std::filesystem;

namespace {

std::string shape(const at::Tensor& t) { return fmt::format("[{}]", fmt::join(t.sizes(), ", ")); }

// The smoke test's folders ("frugal-smoke-<pid>-<n>" in the temp directory) that a smoke test
// killed before its cleanup left behind: those whose process is gone.
void remove_dead_smoke_dirs(const fs::path& tmp) {
  std::error_code ec;
  for (fs::directory_iterator it(tmp, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    constexpr std::string_view kPrefix = "frugal-smoke-";
    if (name.rfind(kPrefix, 0) != 0) continue;
    const std::string rest = name.substr(kPrefix.size());
    const size_t dash = rest.find('-');
    if (dash == 0 || dash == std::string::npos || rest.find_first_not_of("0123456789") != dash) continue;
    std::error_code gone;
    if (!process_alive(std::stoll(rest.substr(0, dash)))) remove_tree(it->path().string(), gone);
  }
}

// Records each step's logged loss (log_every = 1 in the smoke config).
class LossRecorder : public Callback {
 public:
  void on_step_end(const StepMetrics& m, Control&) override {
    if (m.logged) losses[m.step] = m.loss;
    step_s_sum += m.step_s;
    ++steps;
  }
  std::map<int64_t, double> losses;
  double step_s_sum = 0;
  int64_t steps = 0;
};

// The configuration the smoke test trains with: the user's model and data, a tiny batch.
ResolvedConfig smoke_config(const ResolvedConfig& rc, const std::string& dir, const std::string& name) {
  ResolvedConfig s = rc;
  apply_overrides(s, probe_overrides(dir, name, 2));
  Config& c = s.config;
  c.run.device = "cpu";
  c.data.micro_batch = std::min<int64_t>(2, c.data.micro_batch);
  c.train.global_batch = 0;
  c.train.accum = 0;
  c.train.eval_every = 1;
  c.train.eval_batches = 1;
  c.train.answer_samples = 0;
  c.checkpoint.enabled = true;
  c.checkpoint.every_steps = 1;
  c.checkpoint.auto_interval = false;
  c.checkpoint.keep_last = 3;
  c.checkpoint.async = false;
  if (c.precision.mode == PrecisionMode::kFp16) c.precision.mode = PrecisionMode::kFp32;  // CPU
  FRUGAL_CHECK(torchscript_path(c.model.source).empty(), ConfigError,
               fmt::format("the smoke test checks the reference GPT's shapes, memory and resume; model.source = "
                           "\"{}\" is not covered (train it for 2 steps instead: --set train.steps=2)",
                           c.model.source));
  complete_config(s);  // model.init_from's shape and the dataset's vocabulary, as the Trainer takes them
  return s;
}

// The model as `frugal train` builds it (train/lm_task.h): from run.seed, model.init_from's weights,
// train.freeze, and [lora]'s adapters over a frozen base held in lora.base_dtype; a [lora] key the
// model cannot take is refused here (ConfigError), as the run refuses it.
CausalLm build_model(const Config& c) {
  torch::manual_seed(static_cast<uint64_t>(c.run.seed));
  const Task t = make_lm_task(c);
  auto lm = std::dynamic_pointer_cast<CausalLmImpl>(t.module);
  FRUGAL_INTERNAL_ASSERT(lm != nullptr, "make_lm_task built no CausalLm");
  return CausalLm(lm);
}

// The parameters as the run counts them (summary.json's params and trainable_params), and the
// bytes their values take as held (a frozen base in bf16 or NF4, the rest in fp32).
void count_parameters(const CausalLm& model, SmokeReport& r) {
  r.params = parameter_count(*model);
  r.trainable_params = trainable_parameter_count(*model);
  r.weight_bytes = 0;
  for (const auto& p : model->parameters()) r.weight_bytes += static_cast<double>(p.nbytes());
}

// Activation bytes of forward + backward at batch b (parameters and the gradients of the
// `trainable` ones, fp32, excluded).
int64_t step_bytes(CausalLm& model, const Batch& b, int64_t n, int64_t trainable) {
  model->zero_grad(/*set_to_none=*/true);
  reset_tensor_bytes_peak();
  const int64_t base = tensor_bytes_now();
  {
    at::Tensor loss =
        model->loss(b.x.narrow(0, 0, n), b.y.narrow(0, 0, n), b.pos.defined() ? b.pos.narrow(0, 0, n) : at::Tensor());
    loss.backward();
  }
  const int64_t grads = 4 * trainable;
  return tensor_bytes_peak() - base - grads;
}

// Runs one stage unless an earlier one failed; a failure names the stage and its cause.
void run_stage(SmokeReport& r, const std::string& inject, const std::string& name, const std::function<void()>& body) {
  if (!r.stage.empty()) return;
  try {
    if (inject == name) throw Error(fmt::format("failure injected at stage '{}'", name));
    body();
    r.passed.push_back(name);
  } catch (const c10::Error& e) {
    r.stage = name;
    r.error = e.what_without_backtrace();
    r.failure = std::current_exception();
  } catch (const std::exception& e) {
    r.stage = name;
    r.error = e.what();
    r.failure = std::current_exception();
  }
}

// The model's forward pass on one batch, the logits' shape checked.
void check_forward(const Config& c, CausalLm& model, const Batch& batch, SmokeReport& r) {
  at::Tensor logits = model->forward(batch.x);
  r.logits_shape = shape(logits);
  const std::vector<int64_t> want = {batch.x.size(0), batch.x.size(1), c.model.vocab};
  if (logits.sizes().vec() != want)
    throw Error(fmt::format("logits have shape {} but [batch, block, vocab] = [{}] was expected", shape(logits),
                            fmt::join(want, ", ")));
}

// Bytes of a step at 1 and 2 samples, through the counting allocator: what a sample costs, and
// the estimate at data.micro_batch: the weights as held, and a gradient and AdamW's two moments
// (fp32) for each parameter that trains (16 bytes a parameter for a full fine-tune; a LoRA run's
// frozen base has none).
void measure_memory(const Config& c, const Batch& batch, SmokeReport& r) {
  install_counting_allocator();
  CausalLm model = build_model(c);  // allocated after the allocator: every byte counted
  const int64_t one = step_bytes(model, batch, 1, r.trainable_params);
  const int64_t two = step_bytes(model, batch, std::min<int64_t>(2, batch.x.size(0)), r.trainable_params);
  r.bytes_per_sample = static_cast<double>(std::max<int64_t>(two - one, 0));
  r.static_bytes = r.weight_bytes + 12.0 * static_cast<double>(r.trainable_params);
  r.estimated_bytes =
      r.static_bytes + static_cast<double>(one) + r.bytes_per_sample * static_cast<double>(r.micro_batch - 1);
}

// The resumed run's step-2 loss must equal the uninterrupted run's, bit for bit.
void compare_step_2(LossRecorder& first, LossRecorder& resumed, SmokeReport& r) {
  if (!first.losses.count(2) || !resumed.losses.count(2)) throw Error("step 2 logged no loss in one of the runs");
  r.loss_uninterrupted = first.losses[2];
  r.loss_resumed = resumed.losses[2];
  if (r.loss_uninterrupted != r.loss_resumed)
    throw CheckpointError(
        fmt::format("the resumed step 2 loss {:.9g} differs from the uninterrupted "
                    "{:.9g}: some state is not saved or not restored",
                    r.loss_resumed, r.loss_uninterrupted));
}

}  // namespace

SmokeReport run_smoke(const ResolvedConfig& rc_in, const std::string& inject) {
  SmokeReport r;
  r.micro_batch = rc_in.config.data.micro_batch;
  const bool was_quiet = Console::get().quiet();
  std::random_device rd;
  remove_dead_smoke_dirs(fs::temp_directory_path());
  const fs::path dir = fs::temp_directory_path() / fmt::format("frugal-smoke-{}-{}", ::getpid(), rd());
  auto stage = [&](const std::string& name, const std::function<void()>& body) { run_stage(r, inject, name, body); };

  ResolvedConfig rc;
  std::unique_ptr<BatchSource> data;
  Batch batch;
  CausalLm model{nullptr};
  LossRecorder first, resumed;
  std::string ck1;
  stage("config", [&] {
    rc = smoke_config(rc_in, dir.string(), "smoke");
    validate_config(rc.config);
    model = build_model(rc.config);  // model.init_from, [lora]: checked before any data is read
    count_parameters(model, r);
  });
  stage("data", [&] {
    data = make_batch_source(rc.config);
    batch = data->train_batch(0);
    Batch v = data->val_batch(0);
    r.batch_shape = shape(batch.x);
    if (!batch.x.sizes().equals(batch.y.sizes()) || !batch.x.sizes().equals(v.x.sizes()))
      throw DataError(
          fmt::format("training inputs {} vs targets {} vs validation inputs {}: the shapes "
                      "must agree",
                      shape(batch.x), shape(batch.y), shape(v.x)));
  });
  stage("forward", [&] { check_forward(rc.config, model, batch, r); });
  model = CausalLm{nullptr};  // the stages below build their own
  stage("memory", [&] { measure_memory(rc.config, batch, r); });
  stage("train", [&] {
    TrainerOptions o;
    o.quiet = true;
    o.probe = true;
    o.callbacks = {std::shared_ptr<Callback>(&first, [](Callback*) {})};
    Trainer t(rc, o);
    nlohmann::json s = t.fit();
    if (s["steps"] != 2) throw Error(fmt::format("trained {} steps instead of 2", s["steps"].dump()));
    r.step_s = first.step_s_sum / static_cast<double>(std::max<int64_t>(first.steps, 1));
  });
  stage("checkpoint", [&] {
    ck1 = (fs::path(RunDir((dir / "smoke").string()).checkpoints()) / checkpoint_dir_name(1)).string();
    std::string problem = verify_checkpoint(ck1);
    if (!problem.empty()) throw CheckpointError(problem);
    load_checkpoint(ck1);
  });
  stage("resume", [&] {
    // The kill: the run is gone after step 1's checkpoint; a fresh process state resumes from it.
    ResolvedConfig again = smoke_config(rc_in, dir.string(), "smoke-resumed");
    TrainerOptions o;
    o.quiet = true;
    o.probe = true;
    o.resume = ck1;
    o.callbacks = {std::shared_ptr<Callback>(&resumed, [](Callback*) {})};
    Trainer t(again, o);
    t.fit();
  });
  stage("compare", [&] { compare_step_2(first, resumed, r); });
  std::error_code ec;
  remove_tree(dir, ec);
  Console::get().set_quiet(was_quiet);
  r.ok = r.stage.empty();
  return r;
}

ExitCode SmokeReport::exit_code() const {
  if (ok) return ExitCode::kDone;
  try {
    if (failure) std::rethrow_exception(failure);
  } catch (const std::exception& e) {
    return exit_code_for(e);
  } catch (...) {
  }
  return ExitCode::kFailure;
}

std::string SmokeReport::describe() const {
  std::string out = "smoke test:\n";
  for (const auto& s : passed) out += fmt::format("  {:<11} ok\n", s);
  if (!ok) out += fmt::format("  {:<11} FAILED: {}\n", stage, error);
  auto mb = [](double b) { return b / 1e6; };
  if (!batch_shape.empty()) out += fmt::format("  batch {} -> logits {}\n", batch_shape, logits_shape);
  if (params > 0 && trainable_params < params)
    out += fmt::format("  parameters {} ({} train, {:.2f}%)\n", params, trainable_params,
                       100.0 * static_cast<double>(trainable_params) / static_cast<double>(params));
  else if (params > 0)
    out += fmt::format("  parameters {}\n", params);
  if (step_s > 0) out += fmt::format("  time per step {:.3f} s (smoke batch, CPU)\n", step_s);
  if (bytes_per_sample > 0)
    out += fmt::format(
        "  memory: {:.2f} MB per sample + {:.2f} MB weights/grads/AdamW -> about {:.1f} MB "
        "at micro_batch {} (fp32 estimate{})\n",
        mb(bytes_per_sample), mb(static_bytes), mb(estimated_bytes), micro_batch,
        trainable_params < params ? "; gradients and moments for the parameters that train only" : "");
  if (ok)
    out += fmt::format("  resumed step 2 loss {:.9g} == uninterrupted {:.9g}\n", loss_resumed, loss_uninterrupted);
  return out;
}

}  // namespace frugal
