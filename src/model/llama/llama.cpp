// The Llama family; see llama.h.
#include "frugal/model/llama.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include <cmath>
#include <limits>
#include <tuple>

#include "frugal/core/compat.h"
#include "frugal/data/packing.h"
#include "frugal/model/fp8.h"
#include "frugal/model/fused_attention.h"
#include "frugal/model/fused_llama.h"
#include "frugal/model/linear_cross_entropy.h"
#include "frugal/model/lora.h"
#include "frugal/model/working_weights.h"

namespace frugal {
namespace F = torch::nn::functional;

namespace {

// The dtype a norm's output goes on in: autocast's where autocast is on (the next matmul's; no
// cast pass between them), else the input's.
c10::ScalarType norm_out_dtype(const at::Tensor& x) {
  const c10::DeviceType dev = x.device().type();
  return compat::autocast_enabled(dev) ? compat::autocast_dtype(dev) : x.scalar_type();
}

// model.kernels = "frugal": the norms and SwiGLU on frugal's CUDA kernels where the tensors are on
// a GPU they run on (model/fused_llama.h); the Trainer refuses the setting where they cannot run.
bool gpu_kernels(const ModelConfig& c) { return c.kernels == ModelConfig::Kernels::kFrugal; }

// residual + y W^T (+ b). On the CPU in float, one addmm onto the residual (the sum fused into the
// product's output: no separate pass over the activations); elsewhere the plain sum (under
// autocast the product is bf16 and the sum promotes to the residual's fp32).
at::Tensor residual_linear(const at::Tensor& residual, const at::Tensor& y, const at::Tensor& w, const at::Tensor& b) {
  const bool cpu_float = y.device().is_cpu() && y.scalar_type() == at::kFloat && residual.scalar_type() == at::kFloat &&
                         w.scalar_type() == at::kFloat && !compat::autocast_enabled(c10::DeviceType::CPU) &&
                         !fp8::enabled();
  if (!cpu_float) return residual + fp8::linear_or_aten(y, w, b);
  const at::Tensor r2 = residual.reshape({-1, residual.size(-1)});
  at::Tensor out = at::addmm(b.defined() ? r2 + b : r2, y.reshape({-1, y.size(-1)}), w.t());
  return out.view(residual.sizes());
}

// The (T, S) additive mask for queries at positions past..past+T-1 against keys 0..S-1: 0 where a
// query may attend (j <= i, and within the window where there is one), -inf elsewhere.
at::Tensor attention_mask(int64_t T, int64_t S, int64_t past, int64_t window, const at::TensorOptions& opts) {
  const at::Tensor i = at::arange(past, past + T, opts.dtype(at::kLong)).unsqueeze(1);
  const at::Tensor j = at::arange(S, opts.dtype(at::kLong)).unsqueeze(0);
  at::Tensor blocked = j > i;
  if (window > 0) blocked = blocked.logical_or(j <= i - window);
  return at::zeros({T, S}, opts).masked_fill(blocked, -std::numeric_limits<double>::infinity());
}

}  // namespace

int64_t llama_mlp_width(const ModelConfig& m) {
  if (m.mlp_width > 0) return m.mlp_width;
  const int64_t w = (8 * m.embd + 2) / 3;
  return (w + 15) / 16 * 16;
}

int64_t kv_heads_of(const ModelConfig& m) { return m.kv_heads > 0 ? m.kv_heads : m.heads; }

LlamaBlockImpl::LlamaBlockImpl(const ModelConfig& c) : c_(c), head_dim_(head_dim_of(c)) {
  const int64_t H = c.heads, K = kv_heads_of(c), D = head_dim_, C = c.embd, Fw = llama_mlp_width(c);
  const bool qkv_bias = c.attention_bias != ModelConfig::AttentionBias::kNone;
  const bool o_bias = c.attention_bias == ModelConfig::AttentionBias::kAll;
  auto attn_norm = register_module("attn_norm", std::make_shared<torch::nn::Module>("RMSNorm"));
  attn_norm_ = attn_norm->register_parameter("weight", torch::ones({C}));
  auto attn = register_module("attn", std::make_shared<torch::nn::Module>("Attention"));
  auto qkv =
      attn->register_module("qkv", torch::nn::Linear(torch::nn::LinearOptions(C, (H + 2 * K) * D).bias(qkv_bias)));
  auto proj = attn->register_module("proj", torch::nn::Linear(torch::nn::LinearOptions(H * D, C).bias(o_bias)));
  qkv_ = qkv->weight;
  qkv_bias_ = qkv->bias;  // undefined without a bias
  proj_ = proj->weight;
  proj_bias_ = proj->bias;
  if (c.qk_norm) {
    q_norm_ = attn->register_module("q_norm", std::make_shared<torch::nn::Module>("RMSNorm"))
                  ->register_parameter("weight", torch::ones({D}));
    k_norm_ = attn->register_module("k_norm", std::make_shared<torch::nn::Module>("RMSNorm"))
                  ->register_parameter("weight", torch::ones({D}));
  }
  auto mlp_norm = register_module("mlp_norm", std::make_shared<torch::nn::Module>("RMSNorm"));
  mlp_norm_ = mlp_norm->register_parameter("weight", torch::ones({C}));
  auto mlp = register_module("mlp", std::make_shared<torch::nn::Module>("SwiGLU"));
  gate_up_ =
      mlp->register_module("gate_up", torch::nn::Linear(torch::nn::LinearOptions(C, 2 * Fw).bias(false)))->weight;
  down_ = mlp->register_module("down", torch::nn::Linear(torch::nn::LinearOptions(Fw, C).bias(false)))->weight;
}

// Qwen3's RMSNorm over each head's queries and keys (weights of head_dim), before the rotation.
at::Tensor LlamaBlockImpl::qk_normed(const at::Tensor& qkv) const {
  const int64_t B = qkv.size(0), T = qkv.size(1), H = c_.heads, K = kv_heads_of(c_), D = head_dim_;
  const c10::ScalarType dt = qkv.scalar_type();
  const at::Tensor q =
      fused_rms_norm(qkv.narrow(2, 0, H * D).reshape({B, T, H, D}), q_norm_, c_.norm_eps, dt, gpu_kernels(c_));
  const at::Tensor k =
      fused_rms_norm(qkv.narrow(2, H * D, K * D).reshape({B, T, K, D}), k_norm_, c_.norm_eps, dt, gpu_kernels(c_));
  return at::cat({q.view({B, T, H * D}), k.view({B, T, K * D}), qkv.narrow(2, (H + K) * D, K * D)}, 2);
}

at::Tensor LlamaBlockImpl::attention(const at::Tensor& normed, const RopeTables& rope, int64_t pos, LayerKv* cache,
                                     const at::Tensor& positions) {
  const int64_t B = normed.size(0), T = normed.size(1), H = c_.heads, K = kv_heads_of(c_), D = head_dim_;
  const double dropout = is_training() ? c_.dropout : 0.0;
  at::Tensor qkv = lora_linear(normed, qkv_, qkv_bias_, qkv_lora_);  // (B, T, (H + 2K) D)
  if (c_.qk_norm) qkv = qk_normed(qkv);
  // frugal's kernel wherever it applies: a whole window on the CPU, no dropout on the weights.
  if (!cache && T > 1 && dropout == 0 && pos == 0 && fused_gqa_attention_supported(qkv, H, K))
    return fused_gqa_attention(qkv, H, K, rope.cos, rope.sin, c_.sliding_window, positions);
  // On a GPU with frugal's kernels, a whole window from position 0: the rotation and the heads'
  // layout in one pass (rope_split), then ATen's fused attention.
  if (FRUGAL_TORCH_AT_LEAST(2, 5) && !cache && pos == 0 && !positions.defined() && c_.sliding_window == 0 &&
      gpu_kernels(c_) && rope_split_runs(qkv, rope.cos, rope.sin, H, K)) {  // 2.5: grouped heads in SDPA
    const std::vector<at::Tensor> qkv_heads = rope_split(qkv, rope.cos, rope.sin, H, K);
    const at::Tensor y = compat::gqa_causal_attention(qkv_heads[0], qkv_heads[1], qkv_heads[2], dropout);
    if (y.defined()) return y.transpose(1, 2).reshape({B, T, H * D});
  }
  const auto rotated = [&](const at::Tensor& x) {
    return positions.defined() ? apply_rope(x, rope, positions) : apply_rope(x, rope, pos);
  };
  at::Tensor q = rotated(qkv.narrow(2, 0, H * D).view({B, T, H, D})).transpose(1, 2);
  at::Tensor k = rotated(qkv.narrow(2, H * D, K * D).view({B, T, K, D})).transpose(1, 2);
  at::Tensor v = qkv.narrow(2, (H + K) * D, K * D).view({B, T, K, D}).transpose(1, 2);
  if (positions.defined()) {  // packed rows, off the CPU kernel: ATen's attention with their mask
    TORCH_CHECK(!cache && pos == 0, "packed rows (positions) cannot be decoded with a KV cache");
    if (K < H) {
      k = k.repeat_interleave(H / K, 1);
      v = v.repeat_interleave(H / K, 1);
    }
    const at::Tensor y = masked_attention(q, k, v, document_attention_mask(positions, c_.sliding_window), dropout);
    return y.transpose(1, 2).reshape({B, T, H * D});
  }
  int64_t past = 0;
  if (cache) {
    if (cache->k.defined()) {
      past = cache->k.size(2);
      k = at::cat({cache->k, k}, 2);
      v = at::cat({cache->v, v}, 2);
    }
    cache->k = k;
    cache->v = v;
  }
  const int64_t S = k.size(2);
  // On a GPU, a whole window without a sliding one: ATen's fused attention with grouped heads.
  if (!cache && normed.is_cuda() && c_.sliding_window == 0) {
    const at::Tensor y = compat::gqa_causal_attention(q, k, v, dropout);
    if (y.defined()) return y.transpose(1, 2).reshape({B, T, H * D});
  }
  if (K < H) {  // query head h reads kv head h / (H / K), as transformers' repeat_kv
    k = k.repeat_interleave(H / K, 1);
    v = v.repeat_interleave(H / K, 1);
  }
  const at::Tensor mask = attention_mask(T, S, past, c_.sliding_window, q.options());
  at::Tensor att = at::baddbmm(mask, q.reshape({B * H, T, D}), k.reshape({B * H, S, D}).transpose(1, 2),
                               /*beta=*/1.0, /*alpha=*/1.0 / std::sqrt(static_cast<double>(D)))
                       .view({B, H, T, S});
  att = at::softmax(att, -1);
  if (dropout > 0) att = F::dropout(att, F::DropoutFuncOptions().p(dropout).training(true));
  return at::matmul(att, v).transpose(1, 2).reshape({B, T, H * D});
}

at::Tensor LlamaBlockImpl::mlp(const at::Tensor& normed) {
  return fused_swiglu(lora_linear(normed, gate_up_, at::Tensor(), gate_up_lora_), gpu_kernels(c_));
}

at::Tensor LlamaBlockImpl::forward(const at::Tensor& x, const RopeTables& rope, int64_t pos, LayerKv* cache,
                                   const at::Tensor& positions) {
  const double eps = c_.norm_eps;
  const at::Tensor a =
      attention(fused_rms_norm(x, attn_norm_, eps, norm_out_dtype(x), gpu_kernels(c_)), rope, pos, cache, positions);
  at::Tensor h, normed;
  if (!proj_lora_ && gpu_kernels(c_) && x.is_cuda()) {  // the residual add and the norm in one kernel
    std::tie(h, normed) =
        residual_rms_norm(x, fp8::linear_or_aten(a, proj_, proj_bias_), mlp_norm_, eps, norm_out_dtype(x), true);
  } else {
    h = proj_lora_ ? x + proj_lora_->forward(a, proj_, proj_bias_) : residual_linear(x, a, proj_, proj_bias_);
    normed = fused_rms_norm(h, mlp_norm_, eps, norm_out_dtype(h), gpu_kernels(c_));
  }
  const at::Tensor m = mlp(normed);
  return down_lora_ ? h + down_lora_->forward(m, down_, at::Tensor()) : residual_linear(h, m, down_, at::Tensor());
}

void LlamaBlockImpl::adaptable(const std::string& prefix, std::vector<AdaptableProduct>& out) {
  const auto modules = named_modules("", /*include_self=*/false);
  auto add = [&](const char* name, std::shared_ptr<LoraSiteImpl>* slot) {
    out.push_back({prefix + name + ".weight", modules[name].get(), slot});
  };
  add("attn.qkv", &qkv_lora_);
  add("attn.proj", &proj_lora_);
  add("mlp.gate_up", &gate_up_lora_);
  add("mlp.down", &down_lora_);
}

LlamaImpl::LlamaImpl(const ModelConfig& c) : CausalLmImpl(c) {
  embed_ = register_module("embed", torch::nn::Embedding(c.vocab, c.embd));
  for (int64_t i = 0; i < c.layers; ++i) blocks_.push_back(register_module("h" + std::to_string(i), LlamaBlock(c)));
  norm_ = register_module("norm", std::make_shared<torch::nn::Module>("RMSNorm"))
              ->register_parameter("weight", torch::ones({c.embd}));
  if (!c.tie_embeddings)
    lm_head_ =
        register_module("lm_head", torch::nn::Linear(torch::nn::LinearOptions(c.embd, c.vocab).bias(false)))->weight;
  // Matrices N(0, 0.02), the residual stream's output projections (attn.proj, mlp.down) scaled by
  // 1 / sqrt(2 * layers) as in GPT-2; norms one, biases zero.
  torch::NoGradGuard no_grad;
  const double proj_std = 0.02 / std::sqrt(2.0 * static_cast<double>(c.layers));
  for (auto& p : named_parameters()) {
    const std::string& name = p.key();
    at::Tensor& t = p.value();
    if (name.find("norm") != std::string::npos) continue;
    if (t.dim() < 2)
      t.zero_();
    else
      t.normal_(0.0,
                name.find(".proj.") != std::string::npos || name.find(".down.") != std::string::npos ? proj_std : 0.02);
  }
  rope_ = rope_tables(c, c.block, c10::Device(c10::kCPU));
}

const at::Tensor& LlamaImpl::head_weight() const { return config_.tie_embeddings ? embed_->weight : lm_head_; }

const RopeTables& LlamaImpl::rope_on(c10::Device device) {
  if (rope_.cos.device() != device) rope_ = rope_tables(config_, config_.block, device);
  return rope_;
}

at::Tensor LlamaImpl::hidden(const at::Tensor& idx, const at::Tensor& positions) {
  const int64_t T = idx.size(1);
  TORCH_CHECK(T <= config_.block, "sequence length ", T, " exceeds model.block = ", config_.block);
  TORCH_CHECK(!positions.defined() || positions.sizes() == idx.sizes(), "positions of sizes ", positions.sizes(),
              " for tokens of sizes ", idx.sizes());
  at::Tensor x = embed_->forward(idx);
  const RopeTables& rope = rope_on(x.device());
  for (size_t i = 0; i < blocks_.size(); ++i) {
    LlamaBlock b = blocks_[i];
    x = run_block(
        i, [b, &rope, positions](const at::Tensor& t) mutable { return b->forward(t, rope, 0, nullptr, positions); }, x,
        *b);
  }
  return fused_rms_norm(x, norm_, config_.norm_eps, norm_out_dtype(x), gpu_kernels(config_));
}

at::Tensor LlamaImpl::forward(const at::Tensor& idx) { return logits(idx, at::Tensor()); }

at::Tensor LlamaImpl::logits(const at::Tensor& idx, const at::Tensor& positions) {
  return at::linear(hidden(idx, positions), working_weight(head_weight(), config_.tie_embeddings));
}

at::Tensor LlamaImpl::loss(const at::Tensor& idx, const at::Tensor& targets, const at::Tensor& positions) {
  const at::Tensor x = hidden(idx, positions);
  return linear_cross_entropy(x, working_weight(head_weight(), config_.tie_embeddings), targets, config_.loss_chunk,
                              kIgnoreIndex, head_multiple_for(x), gpu_kernels(config_));
}

at::Tensor LlamaImpl::decode(const at::Tensor& idx, int64_t pos, std::vector<LayerKv>& cache) {
  const int64_t T = idx.size(1);
  at::Tensor x = embed_->forward(idx);
  const RopeTables& rope = rope_on(x.device());
  for (size_t i = 0; i < blocks_.size(); ++i) x = blocks_[i]->forward(x, rope, pos, &cache[i]);
  x = fused_rms_norm(x.narrow(1, T - 1, 1), norm_, config_.norm_eps, x.scalar_type(), gpu_kernels(config_));
  return at::linear(x, working_weight(head_weight(), config_.tie_embeddings)).reshape({-1});
}

double LlamaImpl::flops_per_token() const {
  // Per block the q, k, v and output projections ((heads + 2 kv_heads) D C + heads D C weights)
  // and the MLP (3 F C), plus the head (V C, tied or not); 2 FLOPs a weight forward, 4 backward.
  // Attention's scores and weighted sum add 2 * 2 * T * heads * D per layer forward (PaLM,
  // appendix B), T the context a query sees (the sliding window where it is shorter).
  const ModelConfig& m = config_;
  const double C = static_cast<double>(m.embd), L = static_cast<double>(m.layers), V = static_cast<double>(m.vocab);
  const double H = static_cast<double>(m.heads), K = static_cast<double>(kv_heads_of(m));
  const double D = static_cast<double>(head_dim_of(m)), Fw = static_cast<double>(llama_mlp_width(m));
  const double T = static_cast<double>(m.sliding_window > 0 ? std::min(m.sliding_window, m.block) : m.block);
  const double matmul_params = L * ((H + 2 * K) * D * C + H * D * C + 3 * Fw * C) + V * C;
  return 6.0 * matmul_params + 12.0 * L * T * H * D;
}

std::vector<AdaptableProduct> LlamaImpl::adaptable_products() {
  std::vector<AdaptableProduct> out;
  for (size_t i = 0; i < blocks_.size(); ++i) blocks_[i]->adaptable("h" + std::to_string(i) + ".", out);
  return out;
}

std::string LlamaImpl::describe() const {
  const ModelConfig& m = config_;
  std::string s = fmt::format("Llama {} layers, {} heads", m.layers, m.heads);
  if (kv_heads_of(m) != m.heads) s += fmt::format(" ({} kv)", kv_heads_of(m));
  s += fmt::format(", embd {}", m.embd);
  if (m.head_dim > 0 && m.head_dim != m.embd / m.heads) s += fmt::format(", head_dim {}", m.head_dim);
  s += fmt::format(", mlp {}, block {}", llama_mlp_width(m), m.block);
  if (!m.tie_embeddings) s += ", untied head";
  return s;
}

}  // namespace frugal
