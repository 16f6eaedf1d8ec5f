// Muon + AdamW; see muon.h.
#include "frugal/train/muon.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <string>

#include <fmt/format.h>

#include "frugal/core/errors.h"

namespace frugal {
namespace {

constexpr double kNsA = 3.4445, kNsB = -4.7750, kNsC = 2.0315;  // torch.optim.Muon's
constexpr int kNsSteps = 5;
constexpr double kNsEps = 1e-7;
constexpr const char* kMomentumPrefix = "muon.";

class MuonOptimizer : public Optimizer {
 public:
  using Optimizer::step;
  MuonOptimizer(const std::vector<ParamGroup>& groups, const TrainConfig& t, bool cuda)
      : momentum_(t.muon_momentum), adjust_(t.muon_lr_adjust) {
    bf16_ = t.muon_precision == MuonPrecision::kBf16 || (t.muon_precision == MuonPrecision::kAuto && cuda);
    std::vector<ParamGroup> rest;
    for (const auto& g : groups) {
      if (!g.muon) {
        if (!g.params.empty()) rest.push_back(g);
        continue;
      }
      for (const auto& p : g.params) {
        if (p.dim() != 2)
          throw ConfigError(
              fmt::format("train.optimizer = \"muon\": a Muon group holds a tensor of shape {}; Muon "
                          "takes 2-D matrices only (put the others in an AdamW group)",
                          c10::str(p.sizes())));
        params_.push_back(p);
        decay_.push_back(g.weight_decay);
        bufs_.push_back(torch::zeros_like(p, at::MemoryFormat::Contiguous));
        if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
      }
    }
    if (params_.empty())
      throw ConfigError(
          "train.optimizer = \"muon\": no parameter group is marked for Muon (ParamGroup::muon); use "
          "muon_param_groups or mark the hidden matrices");
    if (!rest.empty()) adamw_ = make_optimizer(OptimizerKind::kFusedAdamW, rest, t);
  }

  void set_lr(double lr) override {
    lr_ = lr;
    if (adamw_) adamw_->set_lr(lr);
  }
  void zero_grad() override {
    if (adamw_) adamw_->zero_grad();
    for (auto& p : params_) p.mutable_grad().zero_();
  }
  void step() override {
    c10::NoGradGuard no_grad;
    if (adamw_) adamw_->step();
    for (size_t i = 0; i < params_.size(); ++i) {
      at::Tensor& p = params_[i];
      const at::Tensor g = p.grad();
      bufs_[i].lerp_(g, 1 - momentum_);
      const at::Tensor update = g.lerp(bufs_[i], momentum_);  // Nesterov, as torch.optim.Muon by default
      const at::Tensor o = newton_schulz(update, kNsSteps, kNsEps, bf16_);
      p.mul_(1 - lr_ * decay_[i]);
      p.add_(o.to(p.scalar_type()), -muon_lr(lr_, adjust_, p.size(0), p.size(1)));
    }
    ++steps_;
  }
  std::vector<at::Tensor> grads() override {
    std::vector<at::Tensor> out = adamw_ ? adamw_->grads() : std::vector<at::Tensor>{};
    for (const auto& p : params_) out.push_back(p.grad());
    return out;
  }
  std::vector<std::pair<std::string, at::Tensor>> state_tensors() override {
    std::vector<std::pair<std::string, at::Tensor>> out =
        adamw_ ? adamw_->state_tensors() : std::vector<std::pair<std::string, at::Tensor>>{};
    for (size_t i = 0; i < bufs_.size(); ++i)
      out.emplace_back(fmt::format("{}{}.momentum", kMomentumPrefix, i), bufs_[i]);
    return out;
  }
  void load_state(const std::vector<std::pair<std::string, at::Tensor>>& t, int64_t steps) override {
    std::vector<std::pair<std::string, at::Tensor>> rest;
    std::set<size_t> restored;
    for (const auto& [name, tensor] : t) {
      if (name.rfind(kMomentumPrefix, 0) != 0) {
        rest.emplace_back(name, tensor);
        continue;
      }
      size_t i = 0;
      const bool parsed = std::sscanf(name.c_str() + std::string(kMomentumPrefix).size(), "%zu", &i) == 1;
      if (!parsed || i >= bufs_.size() || !tensor.sizes().equals(bufs_[i].sizes()))
        throw CheckpointError(
            fmt::format("the checkpoint's Muon momentum '{}' does not fit this model's {} hidden "
                        "matrices; resume with the model the checkpoint was written with",
                        name, bufs_.size()));
      c10::NoGradGuard no_grad;
      bufs_[i].copy_(tensor);
      restored.insert(i);
    }
    if (restored.size() != bufs_.size())
      throw CheckpointError(
          fmt::format("the checkpoint holds Muon momentum for {} of this model's {} hidden matrices; "
                      "was it written by another train.optimizer?",
                      restored.size(), bufs_.size()));
    if (adamw_) adamw_->load_state(rest, steps);
    steps_ = steps;
  }
  int64_t step_count() const override { return steps_; }
  int64_t state_bytes() const override {
    int64_t n = adamw_ ? adamw_->state_bytes() : 0;
    for (const auto& b : bufs_) n += b.numel() * static_cast<int64_t>(b.element_size());
    return n;
  }

 private:
  std::unique_ptr<Optimizer> adamw_;  // the embeddings, gains and biases
  std::vector<at::Tensor> params_, bufs_;
  std::vector<double> decay_;
  double momentum_;
  MuonLrAdjust adjust_;
  bool bf16_ = false;
  double lr_ = 0;
  int64_t steps_ = 0;
};

bool embedding_like(const std::string& name) {
  static const char* kNames[] = {"wte", "wpe", "embed", "lm_head", "head"};
  for (const char* n : kNames) {
    size_t at = name.find(n);
    while (at != std::string::npos) {
      const bool starts = at == 0 || name[at - 1] == '.' || name[at - 1] == '_';
      const size_t end = at + std::string(n).size();
      const bool ends = end == name.size() || name[end] == '.' || name[end] == '_';
      if (starts && ends) return true;
      at = name.find(n, at + 1);
    }
  }
  return false;
}

}  // namespace

at::Tensor newton_schulz(const at::Tensor& update, int steps, double eps, bool bf16) {
  TORCH_CHECK(update.dim() == 2, "newton_schulz: a 2-D matrix is required, got ", update.sizes());
  const bool tall = update.size(0) > update.size(1);
  at::Tensor x = update.to(bf16 ? at::kBFloat16 : at::kFloat);
  if (tall) x = x.t();
  x = x / x.norm().clamp_min(eps);
  for (int i = 0; i < steps; ++i) {
    const at::Tensor gram = at::matmul(x, x.t());
    const at::Tensor poly = at::addmm(gram, gram, gram, kNsB, kNsC);
    x = at::addmm(x, poly, x, kNsA, 1.0);
  }
  return tall ? x.t() : x;
}

double muon_lr(double lr, MuonLrAdjust adjust, int64_t rows, int64_t cols) {
  const double a = static_cast<double>(rows), b = static_cast<double>(cols);
  if (adjust == MuonLrAdjust::kMatchRmsAdamW) return lr * 0.2 * std::sqrt(std::max(a, b));
  return lr * std::sqrt(std::max(1.0, a / b));
}

bool muon_takes(const std::string& name, int64_t dim) { return dim == 2 && !embedding_like(name); }

std::vector<ParamGroup> muon_param_groups(torch::nn::Module& model, double weight_decay) {
  std::set<const c10::TensorImpl*> embeddings;
  for (const auto& m : model.modules(/*include_self=*/true))
    if (m->as<torch::nn::Embedding>())
      for (const auto& p : m->parameters(/*recurse=*/false)) embeddings.insert(p.unsafeGetTensorImpl());
  std::vector<ParamGroup> g(3);
  g[0].muon = true;
  g[0].weight_decay = weight_decay;
  g[1].weight_decay = weight_decay;
  for (const auto& item : model.named_parameters()) {
    const at::Tensor& p = item.value();
    if (!p.requires_grad()) continue;
    const bool embedding = embeddings.count(p.unsafeGetTensorImpl()) > 0;
    g[p.dim() < 2 ? 2 : (!embedding && muon_takes(item.key(), p.dim()) ? 0 : 1)].params.push_back(p);
  }
  if (g[0].params.empty())
    throw ConfigError(
        "train.optimizer = \"muon\": the model has no hidden 2-D weight matrix for Muon (every matrix is an "
        "embedding or a head, or the module has none); use fused_adamw");
  return g;
}

std::unique_ptr<Optimizer> make_muon(const std::vector<ParamGroup>& groups, const TrainConfig& t, bool cuda) {
  return std::make_unique<MuonOptimizer>(groups, t, cuda);
}

}  // namespace frugal
