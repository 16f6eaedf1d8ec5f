// Optimizer adapters; see optimizer.h.
#include "frugal/train/optimizer.h"

#include <torch/torch.h>

#include <map>
#include <string>

#include "frugal/core/compat.h"
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
      auto it = state.find(compat::optimizer_state_key(params_[i]));
      if (it == state.end()) continue;
      auto& s = static_cast<torch::optim::AdamWParamState&>(*it->second);
      const std::string p = "p" + std::to_string(i);
      out.emplace_back(p + ".exp_avg", s.exp_avg());
      out.emplace_back(p + ".exp_avg_sq", s.exp_avg_sq());
      // The parameter's own step count (its bias correction): it only counts steps in which
      // the parameter had a gradient.
      out.emplace_back(p + ".step", at::full({1}, s.step(), at::kLong));
    }
    return out;
  }
  // Restores each parameter's moments and step count ("p<i>.exp_avg", "p<i>.exp_avg_sq",
  // "p<i>.step"); a parameter without saved state (it never had a gradient) starts fresh, as it
  // would have in the uninterrupted run.
  void load_state(const std::vector<std::pair<std::string, at::Tensor>>& tensors, int64_t steps) override {
    std::map<std::string, at::Tensor> by_name(tensors.begin(), tensors.end());
    auto& state = opt_->state();
    state.clear();
    size_t restored = 0;
    for (size_t i = 0; i < params_.size(); ++i) {
      const std::string p = "p" + std::to_string(i);
      auto m = by_name.find(p + ".exp_avg"), v = by_name.find(p + ".exp_avg_sq"), k = by_name.find(p + ".step");
      if (m == by_name.end() && v == by_name.end() && k == by_name.end()) continue;
      if (m == by_name.end() || v == by_name.end() || k == by_name.end() ||
          m->second.numel() != params_[i].numel() || v->second.numel() != params_[i].numel())
        throw CheckpointError("optimizer state of parameter " + p + " is incomplete or has the wrong size; the "
                              "model differs from the checkpoint's, or it was written by another optimizer");
      auto s = std::make_unique<torch::optim::AdamWParamState>();
      s->step(k->second.item<int64_t>());
      s->exp_avg(m->second.reshape(params_[i].sizes()).to(params_[i].options()).clone());
      s->exp_avg_sq(v->second.reshape(params_[i].sizes()).to(params_[i].options()).clone());
      state[compat::optimizer_state_key(params_[i])] = std::move(s);
      restored += 3;
    }
    if (restored != tensors.size())
      throw CheckpointError("the checkpoint's optimizer state (" + std::to_string(tensors.size()) +
                            " tensors, e.g. '" + (tensors.empty() ? std::string() : tensors.front().first) +
                            "') is not torch_adamw's for this model; resume with the train.optimizer "
                            "the checkpoint was written with");
    steps_ = steps;
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
