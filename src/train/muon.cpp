// Muon + AdamW; see muon.h.
#include "frugal/train/muon.h"

#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <stdexcept>
#include <string>

#include <fmt/format.h>

#include "frugal/core/errors.h"
#include "frugal/core/machine_cache.h"

namespace frugal {
namespace {

constexpr double kNsA = 3.4445, kNsB = -4.7750, kNsC = 2.0315;  // torch.optim.Muon's
constexpr int kNsSteps = 5;
constexpr double kNsEps = 1e-7;
constexpr const char* kMomentumPrefix = "muon.";

// The elementwise parts of a step in one pass each where the tensors are contiguous fp32 on the
// CPU (ATen's ops elsewhere): plain loops over restrict pointers, not inlined, so they vectorise.
[[gnu::noinline]] void momentum_span(float* __restrict m, const float* __restrict g, float* __restrict u, int64_t n,
                                     float mu) {
  for (int64_t i = 0; i < n; ++i) {
    const float mi = m[i] + (1 - mu) * (g[i] - m[i]);  // m.lerp_(g, 1 - mu)
    m[i] = mi;
    u[i] = g[i] + mu * (mi - g[i]);  // Nesterov: g.lerp(m, mu)
  }
}

template <typename T>
[[gnu::noinline]] void update_span(float* __restrict p, const T* __restrict o, int64_t n, float decay, float neg_rate) {
  for (int64_t i = 0; i < n; ++i) p[i] = p[i] * decay + neg_rate * static_cast<float>(o[i]);
}

bool plain_fp32_cpu(const at::Tensor& t) {
  return t.device().is_cpu() && t.scalar_type() == at::kFloat && t.is_contiguous();
}

// The Nesterov update of `grads` with `momentum` (which it advances), as torch.optim.Muon's.
at::Tensor nesterov(const at::Tensor& momentum, const at::Tensor& grads, double mu) {
  if (!plain_fp32_cpu(momentum) || !plain_fp32_cpu(grads)) {
    momentum.lerp_(grads, 1 - mu);
    return grads.lerp(momentum, mu);
  }
  at::Tensor u = at::empty_like(grads);
  float* m = momentum.data_ptr<float>();
  const float* g = grads.data_ptr<float>();
  float* out = u.data_ptr<float>();
  at::parallel_for(0, grads.numel(), 1 << 15, [&](int64_t begin, int64_t end) {
    momentum_span(m + begin, g + begin, out + begin, end - begin, static_cast<float>(mu));
  });
  return u;
}

// p = p * decay - rate * o, o in bf16 or in p's dtype.
void apply_update(at::Tensor& p, const at::Tensor& o, double decay, double rate) {
  if (!plain_fp32_cpu(p) || !o.is_contiguous() || (o.scalar_type() != at::kFloat && o.scalar_type() != at::kBFloat16)) {
    p.mul_(decay);
    p.add_(o, -rate);
    return;
  }
  float* w = p.data_ptr<float>();
  const auto d = static_cast<float>(decay), r = static_cast<float>(-rate);
  at::parallel_for(0, p.numel(), 1 << 15, [&](int64_t begin, int64_t end) {
    if (o.scalar_type() == at::kFloat)
      update_span(w + begin, o.data_ptr<float>() + begin, end - begin, d, r);
    else
      update_span(w + begin, o.data_ptr<at::BFloat16>() + begin, end - begin, d, r);
  });
}

class MuonOptimizer : public Optimizer {
 public:
  using Optimizer::step;
  MuonOptimizer(const std::vector<ParamGroup>& groups, const TrainConfig& t, bool bf16, MuonShards shards)
      : bf16_(bf16), momentum_(t.muon_momentum), adjust_(t.muon_lr_adjust), shards_(std::move(shards)) {
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
        if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
      }
    }
    if (params_.empty())
      throw ConfigError(
          "train.optimizer = \"muon\": no parameter group is marked for Muon (ParamGroup::muon); use "
          "muon_param_groups or mark the hidden matrices");
    assign_owners();
    // Matrices of one shape, dtype, device and owner share a stack: one momentum buffer
    // [k, rows, cols] (each matrix's buffer a view of it, so checkpoints keep one tensor per
    // matrix) and one batched Newton-Schulz iteration, in the order the matrices first appear.
    // Sharded, every rank builds every stack (owner_ is alike on every rank), so the gradients'
    // layout, which the all-reduce buckets view (dist/data_parallel.cpp), is alike on every rank
    // and the ranks issue the same collectives; a rank keeps the momentum of, and steps, the
    // stacks it owns only.
    bufs_.resize(params_.size());
    for (size_t i = 0; i < params_.size(); ++i) {
      const at::Tensor& p = params_[i];
      auto same = [&](const Stack& s) {
        const at::Tensor& q = params_[s.members.front()];
        return s.owner == owner_[i] && q.sizes().equals(p.sizes()) && q.scalar_type() == p.scalar_type() &&
               q.device() == p.device();
      };
      auto it = std::find_if(stacks_.begin(), stacks_.end(), same);
      if (it == stacks_.end()) {
        it = stacks_.insert(stacks_.end(), Stack{});
        it->owner = owner_[i];
      }
      it->members.push_back(i);
    }
    // The stack's gradients are one tensor too, as fused_adamw's: each matrix's .grad a view of
    // it, which autograd accumulates into in place (and the all-reduce buckets view).
    for (auto& s : stacks_) {
      const at::Tensor& p = params_[s.members.front()];
      const std::vector<int64_t> shape = {static_cast<int64_t>(s.members.size()), p.size(0), p.size(1)};
      const bool mine = s.owner == shards_.rank;
      if (mine) s.momentum = torch::zeros(shape, p.options());
      s.grads = torch::zeros(shape, p.options());
      for (size_t j = 0; j < s.members.size(); ++j) {
        at::Tensor& q = params_[s.members[j]];
        if (mine) bufs_[s.members[j]] = s.momentum[static_cast<int64_t>(j)];
        at::Tensor g = s.grads[static_cast<int64_t>(j)];
        g.copy_(q.grad());
        q.mutable_grad() = g;
      }
    }
    if (shards_.adamw)
      adamw_ = std::move(shards_.adamw);
    else if (!rest.empty())
      adamw_ = make_optimizer(OptimizerKind::kFusedAdamW, rest, t);
  }

  void set_lr(double lr) override {
    lr_ = lr;
    if (adamw_) adamw_->set_lr(lr);
  }
  void zero_grad() override {
    if (adamw_) adamw_->zero_grad();
    for (auto& s : stacks_) s.grads.zero_();  // every matrix's gradient, owned or not
  }
  void step() override {
    c10::NoGradGuard no_grad;
    if (adamw_) adamw_->step();
    for (const Stack& s : stacks_) {
      if (s.owner != shards_.rank) continue;  // stepped by its owner, broadcast below
      // In bf16 or fp32; added to the weights in their own dtype (an exact widening).
      const at::Tensor o = newton_schulz(nesterov(s.momentum, s.grads, momentum_), kNsSteps, kNsEps, bf16_);
      const at::Tensor& first = params_[s.members.front()];
      const double rate = muon_lr(lr_, adjust_, first.size(0), first.size(1));
      for (size_t j = 0; j < s.members.size(); ++j)
        apply_update(params_[s.members[j]], o[static_cast<int64_t>(j)], 1 - lr_ * decay_[s.members[j]], rate);
    }
    if (shards_.world > 1)  // every matrix from its owner, in one order on every rank
      for (size_t i = 0; i < params_.size(); ++i) shards_.broadcast(params_[i], owner_[i]);
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
    for (size_t i = 0; i < bufs_.size(); ++i) {
      at::Tensor m = bufs_[i];
      if (shards_.world > 1) {  // the whole state, each buffer from its owner (a collective)
        if (owner_[i] != shards_.rank) m = torch::empty_like(params_[i], at::MemoryFormat::Contiguous);
        shards_.broadcast(m, owner_[i]);
      }
      out.emplace_back(fmt::format("{}{}.momentum", kMomentumPrefix, i), m);
    }
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
      if (!parsed || i >= bufs_.size() || !tensor.sizes().equals(params_[i].sizes()))
        throw CheckpointError(
            fmt::format("the checkpoint's Muon momentum '{}' does not fit this model's {} hidden "
                        "matrices; resume with the model the checkpoint was written with",
                        name, bufs_.size()));
      c10::NoGradGuard no_grad;
      if (bufs_[i].defined()) bufs_[i].copy_(tensor);  // sharded: this rank's matrices only
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
    for (const auto& b : bufs_)
      if (b.defined()) n += b.numel() * static_cast<int64_t>(b.element_size());
    return n;
  }

 private:
  // Sharded: each matrix to the rank with the fewest elements so far, the largest first (ties to
  // the lower rank, then to the earlier matrix), alike on every rank. Unsharded: all to rank 0.
  void assign_owners() {
    owner_.assign(params_.size(), 0);
    if (shards_.world <= 1) return;
    std::vector<size_t> order(params_.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return params_[a].numel() > params_[b].numel(); });
    std::vector<int64_t> load(static_cast<size_t>(shards_.world), 0);
    for (size_t i : order) {
      const auto least = std::min_element(load.begin(), load.end()) - load.begin();
      owner_[i] = least;
      load[static_cast<size_t>(least)] += params_[i].numel();
    }
  }

  struct Stack {
    std::vector<size_t> members;  // indices into params_
    int64_t owner = 0;            // the rank that owns (and steps) every member
    at::Tensor momentum, grads;   // [members, rows, cols]; the members' .grad are views of grads;
                                  // momentum on the owner only
  };
  std::unique_ptr<Optimizer> adamw_;       // the embeddings, gains and biases
  std::vector<at::Tensor> params_, bufs_;  // bufs_[i]: params_[i]'s momentum, a view into its stack's
  std::vector<Stack> stacks_;
  std::vector<int64_t> owner_;  // the rank that steps each matrix (all 0 unsharded)
  std::vector<double> decay_;
  bool bf16_ = false;
  double momentum_;
  MuonLrAdjust adjust_;
  MuonShards shards_;
  double lr_ = 0;
  int64_t steps_ = 0;
};

// The Gram form of the iteration ("Gram Newton-Schulz", Dao AI Lab, 2026). Each step
// multiplies x (wide: r x c, r <= c; a tall one on its short side, see ShortSide) by P = a + Z,
// Z = b*R + c*R^2, R = x x^T. P is a polynomial in R,
// so every step's P commutes with R and the next Gram matrix is P R P = P (P R): the step can run
// on r x r matrices alone, carrying R and the product Q of the steps' P, and x is multiplied by Q
// once at the end. In exact arithmetic the result is the plain iteration's; in bf16 R drifts
// from the Gram matrix of Q x (its small eigenvalues are rounded away), so every kGramRestart
// steps Q is folded into x and R recomputed from it. With 5 steps that is once, before the fourth
// (measured on gradient-like bf16 stacks: as near the exact result as the plain iteration, where a
// restart before the third step is twice as far). Costs, in r^2 c and r^3 multiply-adds, for 5
// steps: 4 r^2 c + 14 r^3 against the plain 10 r^2 c + 5 r^3, fewer when c > 1.5 r (gram_pays).
constexpr int kGramRestart = 3;

bool gram_pays(int64_t r, int64_t c) { return 2 * c > 3 * r; }

// x [k, rows, cols] with its products on the short side: x x^T and m x for a wide x, x^T x and
// x m for a tall one (m symmetric, so x m = (m x^T)^T), so a tall x is never transposed in memory.
struct ShortSide {
  bool tall;
  at::Tensor gram(const at::Tensor& x) const {
    return tall ? at::bmm(x.transpose(-2, -1), x) : at::bmm(x, x.transpose(-2, -1));
  }
  at::Tensor times(const at::Tensor& m, const at::Tensor& x) const { return tall ? at::bmm(x, m) : at::bmm(m, x); }
  at::Tensor plus_times(const at::Tensor& x, double a, const at::Tensor& m) const {  // a x + m x
    return tall ? at::baddbmm(x, x, m, a, 1.0) : at::baddbmm(x, m, x, a, 1.0);
  }
};

at::Tensor plain_newton_schulz(at::Tensor x, int steps, ShortSide side) {
  for (int i = 0; i < steps; ++i) {
    const at::Tensor gram = side.gram(x);
    x = side.plus_times(x, kNsA, at::baddbmm(gram, gram, gram, kNsB, kNsC));
  }
  return x;
}

at::Tensor gram_newton_schulz(at::Tensor x, int steps, ShortSide side) {
  at::Tensor gram = side.gram(x), q;  // q undefined: the identity
  for (int i = 0; i < steps; ++i) {
    if (i > 0 && i % kGramRestart == 0) {
      x = side.times(q, x);
      gram = side.gram(x);
      q = at::Tensor();
    }
    at::Tensor z = at::baddbmm(gram, gram, gram, kNsB, kNsC);
    if (i + 1 < steps && (i + 1) % kGramRestart != 0) {             // the next step needs R
      const at::Tensor pr = at::baddbmm(gram, gram, z, kNsA, 1.0);  // P R
      gram = at::baddbmm(pr, z, pr, kNsA, 1.0);                     // P (P R)
    }
    if (q.defined()) {
      q = at::baddbmm(q, q, z, kNsA, 1.0);  // P Q = a Q + Q Z (Q and Z commute)
    } else {
      z.diagonal(0, -2, -1).add_(kNsA);  // P itself
      q = z;
    }
  }
  return side.times(q, x);
}

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
  TORCH_CHECK(update.dim() == 2 || update.dim() == 3,
              "newton_schulz: a matrix or a stack of matrices is required, got ", update.sizes());
  const bool stacked = update.dim() == 3;
  const ShortSide side{update.size(-2) > update.size(-1)};
  const at::Tensor u = stacked ? update : update.unsqueeze(0);
  // Scaled to Frobenius norm 1 (so the spectral norm is at most 1) before the cast.
  const at::Tensor x = (u / at::linalg_vector_norm(u, 2, {-2, -1}, /*keepdim=*/true).clamp_min(eps))
                           .to(bf16 ? at::kBFloat16 : at::kFloat);
  const int64_t r = std::min(x.size(-2), x.size(-1)), c = std::max(x.size(-2), x.size(-1));
  const at::Tensor o = gram_pays(r, c) ? gram_newton_schulz(x, steps, side) : plain_newton_schulz(x, steps, side);
  return stacked ? o : o.squeeze(0);
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

std::unique_ptr<Optimizer> make_muon(const std::vector<ParamGroup>& groups, const TrainConfig& t, bool bf16,
                                     MuonShards shards) {
  if (shards.world > 1 && !shards.broadcast)
    throw std::invalid_argument("make_muon: sharded over several ranks without a broadcast");
  return std::make_unique<MuonOptimizer>(groups, t, bf16, std::move(shards));
}

bool muon_uses_bf16(MuonPrecision precision, c10::Device device) {
  return precision == MuonPrecision::kBf16 ||
         (precision == MuonPrecision::kAuto && (device.is_cuda() || cpu_has_native_bf16()));
}

}  // namespace frugal
