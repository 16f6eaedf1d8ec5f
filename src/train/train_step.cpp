// The training step; see train_step.h.
#include "frugal/train/train_step.h"

#include <torch/torch.h>

#include <fmt/format.h>

#include <chrono>

#include "frugal/model/activation_checkpoint.h"
#include "frugal/monitor/console.h"
#include "frugal/monitor/grad_noise.h"
#include "frugal/monitor/phase_trace.h"
#include "frugal/train/grad_clip.h"

namespace frugal {

void install_activation_checkpointing(Gpt& model, const std::string& spec) {
  std::vector<bool> plan = checkpoint_plan(spec, model->config().layers);
  if (std::none_of(plan.begin(), plan.end(), [](bool b) { return b; })) {
    model->set_block_runner(nullptr);
    return;
  }
  model->set_block_runner([plan](Block& block, const at::Tensor& x, size_t i) {
    if (!plan[i]) return block->forward(x);
    Block b = block;
    return checkpointed([b](const at::Tensor& t) mutable { return b->forward(t); }, x, b->parameters());
  });
}

TrainStep::TrainStep(const Config& config, std::shared_ptr<torch::nn::Module> model, LossFn loss,
                     BatchSource& data, c10::Device device, int64_t tokens_per_sample, GradSync* sync)
    : config_(config),
      model_(std::move(model)),
      loss_(std::move(loss)),
      tokens_per_sample_(tokens_per_sample),
      data_(data),
      device_(device),
      accum_(accumulation_steps(config)),
      precision_(config.precision.mode, device),
      scaler_(precision_.loss_scaling(config.precision.loss_scaling), config.precision),
      sync_(sync) {
  if (sync_) optimizer_ = sync_->make_optimizer(model_->parameters(), config.train);
  if (!optimizer_) optimizer_ = make_optimizer(config.train.optimizer, model_->parameters(), config.train);
  if (sync_) sync_->attach(model_->parameters());
}

TrainStep::TrainStep(const Config& config, Gpt model, BatchSource& data, c10::Device device, GradSync* sync)
    : TrainStep(config, model.ptr(),
                [m = model.get()](torch::nn::Module&, const Batch& b) { return m->loss(b.x, b.y); },
                data, device, config.model.block, sync) {
  install_activation_checkpointing(model, config.memory.activation_checkpointing);
}

namespace {
using Clock = std::chrono::steady_clock;
// Seconds since `t`, recorded as the phase span `phase` when the profiler is capturing.
double lap(Clock::time_point& t, const char* phase) {
  auto now = Clock::now();
  if (PhaseTrace::active()) PhaseTrace::record(phase, t, now);
  double s = std::chrono::duration<double>(now - t).count();
  t = now;
  return s;
}
}  // namespace

StepResult TrainStep::run(int64_t iteration, double lr) {
  StepResult r;
  auto t = Clock::now();
  optimizer_->zero_grad();
  at::Tensor loss_sum = torch::zeros({}, torch::TensorOptions().dtype(torch::kFloat).device(device_));
  MicroBatchGradProbe probe(probe_grad_noise_ && accum_ > 1);  // gradient noise, log steps only
  for (int64_t k = 0; k < accum_; ++k) {
    r.optimizer_s += lap(t, "optimizer");
    Batch b = data_.train_batch(iteration * accum_ + k);
    r.data_s += lap(t, "data");
    at::Tensor loss;
    {
      auto autocast = precision_.enter();
      loss = loss_(*model_, to_device(b, device_)) / static_cast<double>(accum_);
    }
    r.forward_s += lap(t, "forward");
    if (sync_) sync_->before_backward(k == accum_ - 1);
    scaler_.scale_loss(loss).backward();
    r.backward_s += lap(t, "backward");
    if (probe.on()) {  // not training work: left out of the phase times
      probe.after_backward(optimizer_->grads(), static_cast<double>(accum_) / scaler_.scale(), k + 1 == accum_);
      t = Clock::now();
    }
    loss_sum += loss.detach();
    r.tokens += b.x.size(0) * tokens_per_sample_;
  }
  r.loss = loss_sum;
  r.micro_grad_sq_sum = probe.sum_sq();
  if (sync_) sync_->finish(r.loss);  // gradients and loss: the mean over all ranks

  std::vector<at::Tensor> grads = optimizer_->grads();
  scaler_.unscale(grads);
  r.grad_norm = global_grad_norm(grads);
  if (scaler_.enabled()) {
    bool found_inf = !std::isfinite(r.grad_norm.item<double>());
    if (sync_) found_inf = sync_->any(found_inf);
    r.skipped = scaler_.update(found_inf);
    const auto& s = scaler_.state();
    if (config_.precision.fallback_after > 0 && s.skipped_at_floor >= config_.precision.fallback_after &&
        precision_.fall_back_to_bf16(fmt::format("{} consecutive skipped steps at the minimum loss scale {}",
                                                 s.skipped_at_floor, s.scale))) {
      scaler_ = LossScaler(false, config_.precision);
      Console::get().line("precision: " + precision_.reason() + "; continuing in bf16");
    }
    if (r.skipped) {  // no step: weights, optimizer state and the LR schedule stay put
      r.optimizer_s += lap(t, "optimizer");
      return r;
    }
  }
  clip_to_norm(grads, r.grad_norm, config_.train.grad_clip);
  optimizer_->set_lr(lr);
  optimizer_->step();
  r.optimizer_s += lap(t, "optimizer");
  return r;
}

}  // namespace frugal
