// Optimizer adapters; see optimizer.h.
#include "frugal/train/optimizer.h"

#include <torch/torch.h>

#include <cmath>
#include <map>
#include <stdexcept>
#include <string>

#include <fmt/format.h>

#include "frugal/core/compat.h"
#include "frugal/core/errors.h"
#include "frugal/train/fused_adamw.h"
#include "frugal/train/muon.h"

namespace frugal {
namespace {

class FusedOptimizer : public Optimizer {
 public:
  using Optimizer::step;
  FusedOptimizer(std::vector<FusedAdamW::Group> groups, AdamWHyper h, bool offload)
      : opt_(std::move(groups), h, offload) {}
  void set_lr(double lr) override { opt_.set_lr(lr); }
  void zero_grad() override { opt_.zero_grad(); }
  void step() override { opt_.step(); }
  void step(const at::Tensor& grad_scale) override { opt_.step(grad_scale); }
  std::vector<at::Tensor> grads() override { return opt_.flat_grads(); }
  std::vector<std::pair<std::string, at::Tensor>> state_tensors() override { return opt_.state_tensors(); }
  void load_state(const std::vector<std::pair<std::string, at::Tensor>>& t, int64_t steps) override {
    opt_.load_state(t, steps);
  }
  int64_t step_count() const override { return opt_.step_count(); }
  int64_t state_bytes() const override { return opt_.state_bytes(); }
  int64_t host_state_bytes() const override { return opt_.host_state_bytes(); }
  bool steps_on_device() const override { return opt_.device_scalars().on(); }
  void step_on_device(const at::Tensor& grad_scale, const at::Tensor& found_inf) override {
    opt_.step_on_device(grad_scale, found_inf);
  }
  void count_replayed_step() override { opt_.count_replayed_step(); }
  int64_t keep_working_copies(c10::ScalarType dtype, bool add_into_grads) override {
    return opt_.keep_working_copies(dtype, add_into_grads);
  }

 private:
  FusedAdamW opt_;
};

class TorchOptimizer : public Optimizer {
 public:
  TorchOptimizer(const std::vector<ParamGroup>& param_groups, const TrainConfig& t) {
    // Every option set per group: a group with its own options does not inherit the defaults.
    auto opts = [&](double wd) {
      return std::make_unique<torch::optim::AdamWOptions>(
          torch::optim::AdamWOptions(t.lr).betas({t.beta1, t.beta2}).eps(1e-8).weight_decay(wd));
    };
    std::vector<torch::optim::OptimizerParamGroup> groups;
    for (const auto& g : param_groups) {
      groups.emplace_back(g.params, opts(g.weight_decay));
      params_.insert(params_.end(), g.params.begin(), g.params.end());
    }
    opt_ = std::make_unique<torch::optim::AdamW>(groups, *opts(t.weight_decay));
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
      if (m == by_name.end() || v == by_name.end() || k == by_name.end() || m->second.numel() != params_[i].numel() ||
          v->second.numel() != params_[i].numel())
        throw CheckpointError("optimizer state of parameter " + p +
                              " is incomplete or has the wrong size; the "
                              "model differs from the checkpoint's, or it was written by another optimizer");
      auto s = std::make_unique<torch::optim::AdamWParamState>();
      s->step(k->second.item<int64_t>());
      s->exp_avg(m->second.reshape(params_[i].sizes()).to(params_[i].options()).clone());
      s->exp_avg_sq(v->second.reshape(params_[i].sizes()).to(params_[i].options()).clone());
      state[compat::optimizer_state_key(params_[i])] = std::move(s);
      restored += 3;
    }
    if (restored != tensors.size())
      throw CheckpointError("the checkpoint's optimizer state (" + std::to_string(tensors.size()) + " tensors, e.g. '" +
                            (tensors.empty() ? std::string() : tensors.front().first) +
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

void Optimizer::step_on_device(const at::Tensor&, const at::Tensor&) {
  throw std::logic_error("this optimizer has no step on the device (Optimizer::steps_on_device is false)");
}

void Optimizer::step(const at::Tensor& grad_scale) {
  if (grad_scale.defined()) {
    c10::NoGradGuard no_grad;
    for (auto& g : grads()) g.mul_(grad_scale.to(g.scalar_type()));
  }
  step();
}

std::vector<ParamGroup> default_param_groups(const std::vector<at::Tensor>& params, double weight_decay) {
  std::vector<ParamGroup> g(2);
  g[0].weight_decay = weight_decay;
  for (const auto& p : params)
    if (p.requires_grad()) g[p.dim() >= 2 ? 0 : 1].params.push_back(p);  // a frozen one (train.freeze): none
  return g;
}

void check_param_groups(const std::vector<ParamGroup>& groups, const std::vector<at::Tensor>& params,
                        const std::string& origin) {
  std::map<const c10::TensorImpl*, size_t> index;  // trainable parameter -> its position
  for (size_t i = 0; i < params.size(); ++i)
    if (params[i].requires_grad()) index.emplace(params[i].unsafeGetTensorImpl(), i);
  std::vector<int> seen(params.size(), 0);
  for (size_t g = 0; g < groups.size(); ++g) {
    if (!(groups[g].weight_decay >= 0) || !std::isfinite(groups[g].weight_decay))
      throw ConfigError(fmt::format("{}: group {} has weight_decay {}; it must be finite and >= 0", origin, g,
                                    groups[g].weight_decay));
    for (const auto& p : groups[g].params) {
      auto it = index.find(p.unsafeGetTensorImpl());
      if (it == index.end())
        throw ConfigError(
            fmt::format("{}: group {} holds a tensor of shape {} that is not a trainable parameter "
                        "of the module",
                        origin, g, c10::str(p.sizes())));
      if (++seen[it->second] > 1)
        throw ConfigError(fmt::format("{}: parameter {} (shape {}) is in more than one group", origin, it->second,
                                      c10::str(p.sizes())));
    }
  }
  for (const auto& [impl, i] : index)
    if (seen[i] == 0)
      throw ConfigError(
          fmt::format("{}: parameter {} (shape {}) is in no group; every trainable parameter must "
                      "be in exactly one",
                      origin, i, c10::str(params[i].sizes())));
}

std::unique_ptr<Optimizer> build_optimizer(const std::vector<ParamGroup>& groups, const TrainConfig& t, bool muon_bf16,
                                           const OptimizerSharding& sharding, bool offload) {
  const OptimizerKind kind = t.optimizer;
  if (offload && kind != OptimizerKind::kFusedAdamW)
    throw ConfigError(fmt::format(
        "dist.offload = \"optimizer\" moves fused_adamw's state and update to the host; train.optimizer = \"{}\" "
        "has its own. Set train.optimizer = \"fused_adamw\" or dist.offload = \"none\"",
        kind == OptimizerKind::kMuon ? "muon" : "torch_adamw"));
  if (kind != OptimizerKind::kMuon)
    for (const auto& g : groups)
      if (g.muon)
        throw ConfigError(
            "a parameter group is marked for Muon (ParamGroup::muon) but train.optimizer is not \"muon\"");
  if (kind == OptimizerKind::kTorchAdamW) {
    if (sharding.sharded())
      throw ConfigError(
          "dist.zero = 1 shards fused_adamw's and muon's state; train.optimizer = \"torch_adamw\" is not sharded. "
          "Set dist.zero = 0 (every rank keeps the whole state) or train.optimizer = \"fused_adamw\"");
    return std::make_unique<TorchOptimizer>(groups, t);
  }
  // The groups AdamW steps: all of them, or beside Muon the ones it does not take.
  std::vector<ParamGroup> adamw;
  for (const auto& g : groups)
    if (!(kind == OptimizerKind::kMuon && g.muon) && (!g.params.empty() || !sharding.sharded())) adamw.push_back(g);
  if (kind == OptimizerKind::kFusedAdamW) {
    if (sharding.sharded()) return sharding.adamw(adamw, t);
    std::vector<FusedAdamW::Group> fused;
    for (const auto& g : adamw) fused.push_back({g.params, g.weight_decay});
    return std::make_unique<FusedOptimizer>(std::move(fused), AdamWHyper{t.lr, t.beta1, t.beta2, 1e-8}, offload);
  }
  MuonShards shards;
  if (sharding.sharded()) {
    // Each rank steps and keeps its own matrices, then broadcasts them (train/muon.h).
    shards.rank = sharding.rank;
    shards.world = sharding.world;
    shards.broadcast = sharding.broadcast;
    if (!adamw.empty()) shards.adamw = sharding.adamw(adamw, t);
  }
  return make_muon(groups, t, muon_bf16, std::move(shards));
}

std::unique_ptr<Optimizer> make_optimizer(OptimizerKind kind, const std::vector<ParamGroup>& groups,
                                          const TrainConfig& t) {
  TrainConfig with_kind = t;
  with_kind.optimizer = kind;
  c10::Device device(c10::kCPU);
  for (const auto& g : groups)
    if (!g.params.empty()) device = g.params.front().device();
  return build_optimizer(groups, with_kind, muon_uses_bf16(t.muon_precision, device));
}

void Optimizer::load_state_shards(const std::string& dir, const nlohmann::json& index, int64_t steps) {
  load_state(assemble_state_shards(dir, index), steps);
}

void Optimizer::load_weights(const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                             const std::vector<at::Tensor>& values) {
  c10::NoGradGuard no_grad;
  for (size_t i = 0; i < tensors.size(); ++i) tensors[i].second.copy_(values[i]);
}

StateShard Optimizer::weights_shard(const std::vector<std::pair<std::string, at::Tensor>>& tensors) const {
  StateShard out;  // one process: every tensor whole
  for (const auto& [name, t] : tensors) {
    StateShard::Entry& e = out.entry(name, t.numel());
    e.shape = t.sizes().vec();
    e.pieces.emplace_back(0, t.numel());
    e.values.push_back(t.detach().reshape({-1}));
  }
  return out;
}

std::vector<std::pair<std::string, at::Tensor>> host_copies(
    Optimizer& opt, const std::vector<std::pair<std::string, at::Tensor>>& tensors, bool keep) {
  c10::NoGradGuard no_grad;
  std::vector<at::Tensor> copies(tensors.size());
  auto copy_present = [&] {  // every tensor whose memory is there now (a unit's, or one kept whole)
    for (size_t i = 0; keep && i < tensors.size(); ++i) {
      const at::Tensor& t = tensors[i].second;
      if (!copies[i].defined() && (t.numel() == 0 || t.storage().nbytes() > 0))
        copies[i] = t.to(c10::kCPU, /*non_blocking=*/false, /*copy=*/true);
    }
  };
  copy_present();
  for (int64_t u = 0; u < opt.units(); ++u) {
    opt.gather_unit(u);
    copy_present();
    opt.release_unit(u);
  }
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (size_t i = 0; keep && i < tensors.size(); ++i) {
    FRUGAL_CHECK(copies[i].defined(), Error,
                 "host_copies: '" + tensors[i].first + "' had no memory after every unit was gathered");
    out.emplace_back(tensors[i].first, copies[i]);
  }
  return out;
}

std::unique_ptr<Optimizer> make_optimizer(OptimizerKind kind, const std::vector<at::Tensor>& params,
                                          const TrainConfig& t) {
  return make_optimizer(kind, default_param_groups(params, t.weight_decay), t);
}

}  // namespace frugal
