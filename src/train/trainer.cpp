// The training loop; see trainer.h.
#include "frugal/train/trainer.h"

#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <filesystem>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "frugal/ckpt/safetensors.h"
#include "frugal/core/atomic_file.h"
#include "frugal/core/errors.h"
#include "frugal/core/threads.h"
#include "frugal/data/batch_source.h"
#include "frugal/model/gpt.h"
#include "frugal/monitor/console.h"
#include "frugal/monitor/metrics_writer.h"
#include "frugal/monitor/progress.h"
#include "frugal/train/answer_accuracy.h"
#include "frugal/train/grad_clip.h"
#include "frugal/train/lr_schedule.h"

namespace frugal {
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// AdamW with decoupled weight decay on matrices only (biases, LayerNorm and position/token
// embeddings of rank 1 are not decayed). Every option is set per group: a group with its own
// options does not inherit the constructor defaults in LibTorch.
std::unique_ptr<torch::optim::AdamW> make_optimizer(Gpt& model, const TrainConfig& t) {
  std::vector<at::Tensor> decay, no_decay;
  for (auto& p : model->parameters()) (p.dim() >= 2 ? decay : no_decay).push_back(p);
  auto opts = [&](double wd) {
    return std::make_unique<torch::optim::AdamWOptions>(torch::optim::AdamWOptions(t.lr)
                                                            .betas({t.beta1, t.beta2})
                                                            .eps(1e-8)
                                                            .weight_decay(wd));
  };
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(decay, opts(t.weight_decay));
  groups.emplace_back(no_decay, opts(0.0));
  return std::make_unique<torch::optim::AdamW>(groups, *opts(t.weight_decay));
}

void set_lr(torch::optim::Optimizer& opt, double lr) {
  for (auto& g : opt.param_groups()) static_cast<torch::optim::AdamWOptions&>(g.options()).lr(lr);
}

// Prepares runs/<name>/: refuses to clobber an earlier run unless asked to.
std::string prepare_run_dir(const Config& c, bool overwrite) {
  fs::path dir = fs::path(c.run.out_dir) / c.run.name;
  bool used = fs::exists(dir / "metrics.jsonl") || fs::exists(dir / "summary.json") ||
              fs::exists(dir / "final");
  if (used && !overwrite)
    throw ConfigError(fmt::format(
        "run directory {} already holds a run; pass --overwrite to replace it, or choose another "
        "name with --set run.name=NAME",
        dir.string()));
  std::error_code ec;
  if (used) {
    for (const char* f : {"metrics.jsonl", "summary.json", "final", "config.toml"})
      fs::remove_all(dir / f, ec);
  }
  fs::create_directories(dir, ec);
  if (ec) throw IoError(fmt::format("cannot create run directory {}: {}", dir.string(), ec.message()));
  return dir.string();
}

}  // namespace

struct Trainer::State {
  ResolvedConfig rc;
  TrainerOptions opts;
  std::string run_dir;
  torch::Device device{torch::kCPU};
  ThreadPlan threads;
  Gpt model{nullptr};
  std::unique_ptr<BatchSource> data;
  std::unique_ptr<torch::optim::AdamW> optimizer;
  std::vector<std::shared_ptr<Callback>> callbacks;
  RunInfo info;

  double evaluate();
};

double Trainer::State::evaluate() {
  torch::NoGradGuard no_grad;
  model->eval();
  at::Tensor sum = torch::zeros({}, torch::TensorOptions().dtype(torch::kFloat).device(device));
  const int64_t n = rc.config.train.eval_batches;
  for (int64_t i = 0; i < n; ++i) {
    Batch b = data->val_batch(i);
    sum += model->loss(b.x.to(device), b.y.to(device));
  }
  model->train();
  return sum.item<double>() / static_cast<double>(n);
}

Trainer::Trainer(ResolvedConfig config, TrainerOptions options) : s_(std::make_unique<State>()) {
  s_->rc = std::move(config);
  s_->opts = std::move(options);
  const Config& c = s_->rc.config;
  auto& con = Console::get();
  con.set_quiet(s_->opts.quiet);

  s_->device = torch::Device(c.run.device);
  if (s_->device.is_cuda() && !torch::cuda::is_available())
    throw ConfigError(fmt::format("run.device = \"{}\" but this LibTorch build sees no CUDA device; "
                                  "use run.device = \"cpu\"",
                                  c.run.device));
  s_->threads = apply_thread_plan(static_cast<int>(c.run.threads));
  torch::manual_seed(static_cast<uint64_t>(c.run.seed));

  s_->data = make_batch_source(c);  // before the run dir: bad data must not leave a husk
  s_->model = Gpt(c.model);
  s_->model->to(s_->device);
  s_->optimizer = make_optimizer(s_->model, c.train);
  s_->run_dir = prepare_run_dir(c, s_->opts.overwrite);
  write_file_atomic(s_->run_dir + "/config.toml", s_->rc.to_toml());

  if (!s_->opts.quiet) s_->callbacks.push_back(std::make_shared<ProgressDisplay>());
  s_->callbacks.push_back(std::make_shared<MetricsWriter>(s_->run_dir + "/metrics.jsonl"));
  for (auto& cb : s_->opts.callbacks) s_->callbacks.push_back(cb);

  s_->info.config = &s_->rc.config;
  s_->info.run_dir = s_->run_dir;
  s_->info.params = s_->model->parameter_count();
  s_->info.flops_per_token = s_->model->flops_per_token();
  s_->info.tokens_per_step = c.data.micro_batch * c.model.block;
  s_->info.threads = s_->threads.intra_op;
}

Trainer::~Trainer() = default;

const std::string& Trainer::run_dir() const { return s_->run_dir; }

nlohmann::json Trainer::fit() {
  State& s = *s_;
  const Config& c = s.rc.config;
  auto& con = Console::get();
  con.line(fmt::format("frugal {} | LibTorch {} | device {} | threads {} ({}), BLAS threads {}",
                       FRUGAL_VERSION, TORCH_VERSION, s.device.str(), s.threads.intra_op,
                       s.threads.reason, s.threads.blas));
  con.line("config (non-defaults marked):\n" + s.rc.summary());
  con.line(fmt::format("model: GPT {} layers, {} heads, embd {}, block {} | {:.3f}M parameters | "
                       "{:.1f} MFLOP/token (training)",
                       c.model.layers, c.model.heads, c.model.embd, c.model.block,
                       static_cast<double>(s.info.params) / 1e6, s.info.flops_per_token / 1e6));
  con.line(fmt::format("data: {} | {} training tokens, {} validation tokens | run dir {}",
                       s.data->describe(), s.data->train_tokens(), s.data->val_tokens(), s.run_dir));
  for (auto& cb : s.callbacks) cb->on_train_begin(s.info);

  std::vector<at::Tensor> params = s.model->parameters();
  Control control;
  StepMetrics m;
  m.total_steps = c.train.steps;
  at::Tensor loss_sum = torch::zeros({}, torch::TensorOptions().dtype(torch::kFloat).device(s.device));
  int64_t window_steps = 0, window_tokens = 0;
  double window_s = 0;
  double final_val = std::nan(""), best_val = std::numeric_limits<double>::infinity();
  double final_train = std::nan("");
  int64_t last_eval_step = -1;
  double data_wait_total_s = 0, step_total_s = 0;  // data_wait_fraction in summary.json
  const auto t_start = Clock::now();

  auto run_eval = [&](int64_t step) {
    auto t0 = Clock::now();
    final_val = s.evaluate();
    best_val = std::min(best_val, final_val);
    last_eval_step = step;
    EvalMetrics e{step, final_val, best_val, seconds_since(t0)};
    for (auto& cb : s.callbacks) cb->on_eval_end(e, control);
  };

  s.model->train();
  int64_t step = 0;
  while (step < c.train.steps && !control.should_stop) {
    const auto t0 = Clock::now();
    const double lr = lr_at(step, c.train.steps, c.train.warmup_steps, c.train.lr, c.train.min_lr_ratio);
    set_lr(*s.optimizer, lr);
    s.optimizer->zero_grad();
    const auto t_data = Clock::now();
    Batch b = s.data->train_batch(step);
    m.data_wait_s = seconds_since(t_data);
    data_wait_total_s += m.data_wait_s;
    at::Tensor loss = s.model->loss(b.x.to(s.device), b.y.to(s.device));
    loss.backward();
    at::Tensor grad_norm = clip_grad_norm(params, c.train.grad_clip);
    s.optimizer->step();
    loss_sum += loss.detach();
    ++step;

    const double step_s = seconds_since(t0);
    window_steps += 1;
    window_tokens += b.x.numel();
    window_s += step_s;
    m.step = step;
    m.lr = lr;
    m.step_s = step_s;
    step_total_s += step_s;
    m.tokens += b.x.numel();
    m.elapsed_s = seconds_since(t_start);
    m.logged = step % c.train.log_every == 0 || step == c.train.steps;
    if (m.logged) {  // the only host syncs of the step
      m.loss = loss_sum.item<double>() / static_cast<double>(window_steps);
      m.grad_norm = grad_norm.item<double>();
      m.tokens_per_s = static_cast<double>(window_tokens) / window_s;
      final_train = m.loss;
      if (!std::isfinite(m.loss))
        control.request_stop(fmt::format("loss became {} at step {}", m.loss, step));
      loss_sum.zero_();
      window_steps = window_tokens = 0;
      window_s = 0;
    }
    for (auto& cb : s.callbacks) cb->on_step_end(m, control);
    if (c.train.eval_every > 0 && step % c.train.eval_every == 0) run_eval(step);
  }
  if (last_eval_step != step) run_eval(step);
  const double wall_s = seconds_since(t_start);

  nlohmann::ordered_json summary;
  summary["run_name"] = c.run.name;
  summary["steps"] = step;
  summary["tokens"] = m.tokens;
  summary["wall_s"] = wall_s;
  summary["tokens_per_s"] = static_cast<double>(m.tokens) / wall_s;
  summary["data_wait_fraction"] = step_total_s > 0 ? data_wait_total_s / step_total_s : 0.0;
  summary["final_train_loss"] = final_train;
  summary["final_val_loss"] = final_val;
  summary["best_val_loss"] = best_val;
  summary["unigram_baseline_loss"] = s.data->unigram_baseline();
  summary["params"] = s.info.params;
  summary["flops_per_token"] = s.info.flops_per_token;
  summary["stop_reason"] = control.should_stop ? control.reason : "completed";
  if (c.data.source == "builtin:arith" && c.train.answer_samples > 0) {
    auto acc = arith_answer_accuracy(s.model, c, c.train.answer_samples);
    summary["answer_accuracy"] = acc.fraction();
    summary["answer_samples"] = acc.total;
  }
  summary["device"] = s.device.str();
  summary["threads"] = s.threads.intra_op;
  summary["data"] = s.data->describe();
  summary["frugal_version"] = FRUGAL_VERSION;
  summary["torch_version"] = TORCH_VERSION;

  save_safetensors(s.run_dir + "/final/model.safetensors", s.model->named_parameter_list(),
                   {{"format", "pt"}, {"frugal_step", std::to_string(step)}});
  write_file_atomic(s.run_dir + "/summary.json", summary.dump(2) + "\n");
  for (auto& cb : s.callbacks) cb->on_train_end(summary);
  return summary;
}

}  // namespace frugal
