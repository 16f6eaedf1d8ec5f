// Optimizer adapters; see optimizer.h.
#include "frugal/train/optimizer.h"

#include <torch/torch.h>

#include "frugal/core/errors.h"
#include "frugal/train/fused_adamw.h"

namespace frugal {
namespace {

class FusedOptimizer : public Optimizer {
 public:
  FusedOptimizer(std::vector<FusedAdamW::Group> groups, AdamWHyper h) : opt_(std::move(groups), h) {}
  void set_lr(double lr) override { opt_.set_lr(lr); }
  void zero_grad() override { opt_.zero_grad(); }
  void step() override { opt_.step(); }
  std::vector<at::Tensor> grads() override { return opt_.flat_grads(); }
  std::vector<std::pair<std::string, at::Tensor>> state_tensors() override { return opt_.state_tensors(); }
  void load_state(const std::vector<std::pair<std::string, at::Tensor>>& t, int64_t steps) override {
    opt_.load_state(t, steps);
  }
  int64_t step_count() const override { return opt_.step_count(); }
  int64_t state_bytes() const override { return opt_.state_bytes(); }

 private:
  FusedAdamW opt_;
};

class TorchOptimizer : public Optimizer {
 public:
  TorchOptimizer(const std::vector<at::Tensor>& decay, const std::vector<at::Tensor>& no_decay,
                 const TrainConfig& t) {
    // Every option set per group: a group with its own options does not inherit the defaults.
    auto opts = [&](double wd) {
      return std::make_unique<torch::optim::AdamWOptions>(
          torch::optim::AdamWOptions(t.lr).betas({t.beta1, t.beta2}).eps(1e-8).weight_decay(wd));
    };
    std::vector<torch::optim::OptimizerParamGroup> groups;
    groups.emplace_back(decay, opts(t.weight_decay));
    groups.emplace_back(no_decay, opts(0.0));
    opt_ = std::make_unique<torch::optim::AdamW>(groups, *opts(t.weight_decay));
    params_ = decay;
    params_.insert(params_.end(), no_decay.begin(), no_decay.end());
  }
  void set_lr(double lr) override {
    for (auto& g : opt_->param_groups()) static_cast<torch::optim::AdamWOptions&>(g.options()).lr(lr);
  }
  void zero_grad() override { opt_->zero_grad(); }
  void step() override {
    opt_->step();
    ++steps_;
  }
  std::vector<at::Tensor> grads() override {
    std::vector<at::Tensor> g;
    for (auto& p : params_)
      if (p.grad().defined()) g.push_back(p.grad());
    return g;
  }
  std::vector<std::pair<std::string, at::Tensor>> state_tensors() override {
    std::vector<std::pair<std::string, at::Tensor>> out;
    auto& state = opt_->state();
    for (size_t i = 0; i < params_.size(); ++i) {
      auto it = state.find(c10::guts::to_string(params_[i].unsafeGetTensorImpl()));
      if (it == state.end()) continue;
      auto& s = static_cast<torch::optim::AdamWParamState&>(*it->second);
      out.emplace_back("p" + std::to_string(i) + ".exp_avg", s.exp_avg());
      out.emplace_back("p" + std::to_string(i) + ".exp_avg_sq", s.exp_avg_sq());
    }
    return out;
  }
  void load_state(const std::vector<std::pair<std::string, at::Tensor>>&, int64_t) override {
    throw CheckpointError("resuming optimizer state needs train.optimizer = \"fused_adamw\"");
  }
  int64_t step_count() const override { return steps_; }
  int64_t state_bytes() const override {
    int64_t n = 0;
    for (const auto& p : params_) n += 2 * p.numel() * static_cast<int64_t>(p.element_size());
    return n;
  }

 private:
  std::unique_ptr<torch::optim::AdamW> opt_;
  std::vector<at::Tensor> params_;
  int64_t steps_ = 0;
};

}  // namespace

std::unique_ptr<Optimizer> make_optimizer(OptimizerKind kind, const std::vector<at::Tensor>& params,
                                          const TrainConfig& t) {
  std::vector<at::Tensor> decay, no_decay;
  for (const auto& p : params) (p.dim() >= 2 ? decay : no_decay).push_back(p);
  if (kind == OptimizerKind::kTorchAdamW) return std::make_unique<TorchOptimizer>(decay, no_decay, t);
  return std::make_unique<FusedOptimizer>(
      std::vector<FusedAdamW::Group>{{decay, t.weight_decay}, {no_decay, 0.0}},
      AdamWHyper{t.lr, t.beta1, t.beta2, 1e-8});
}

}  // namespace frugal
