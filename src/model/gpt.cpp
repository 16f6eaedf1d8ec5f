// GPT decoder; see gpt.h.
#include "frugal/model/gpt.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include <atomic>
#include <cmath>

#include "frugal/core/compat.h"
#include "frugal/data/packing.h"
#include "frugal/model/fused_attention.h"
#include "frugal/model/fp8.h"
#include "frugal/model/fused_gelu.h"
#include "frugal/model/kernel_ops.h"
#include "frugal/model/lora.h"
#include "frugal/model/working_weights.h"

namespace frugal {
namespace F = torch::nn::functional;

namespace {
// ATen's linear: one addmm with the bias fused in for a contiguous 3-D input. (The C++
// frontend's Linear::forward runs matmul and then a separate `+= bias` pass, and its backward
// a separate reduction: one more pass over the activations each way.)
// With `adapters` (model/lora.h), the adapted product.
at::Tensor block_linear(const torch::nn::Linear& m, const at::Tensor& x,
                        const std::shared_ptr<LoraSiteImpl>& adapters = {}) {
  return lora_linear(x, m->weight, m->bias, adapters);
}

// residual + (y W^T + b). On the CPU in float, the bias is added to the residual (one pass, where
// the separate sum stood) and the product accumulates onto that in place (beta = 1), so ATen's
// copy of the bias into the product's output, a pass over the activations, is gone. Elsewhere
// (autocast, other dtypes, GPUs, whose linear adds the bias in the product's epilogue), the
// plain sum.
at::Tensor residual_linear(const at::Tensor& residual, const at::Tensor& y, const torch::nn::Linear& m,
                           const std::shared_ptr<LoraSiteImpl>& adapters) {
  if (adapters) return residual + block_linear(m, y, adapters);
  const at::Tensor& w = m->weight;
  const at::Tensor& b = m->bias;
  const bool cpu_float = b.defined() && y.device().is_cpu() && y.scalar_type() == at::kFloat &&
                         residual.scalar_type() == at::kFloat && w.scalar_type() == at::kFloat &&
                         b.scalar_type() == at::kFloat && !compat::autocast_enabled(c10::DeviceType::CPU) &&
                         !fp8::enabled();
  if (!cpu_float) return residual + block_linear(m, y);
  at::Tensor out = at::add(residual.reshape({-1, residual.size(-1)}), b);
  out.addmm_(y.reshape({-1, y.size(-1)}), w.t());
  return out.view(residual.sizes());
}
// model.kernels = "frugal" and a tensor on a GPU: frugal's LayerNorm and classifier kernels run.
// (The Trainer has refused the setting where the kernels cannot run; elsewhere, as when a run
// trained on a GPU is sampled on the CPU, ATen's operators do.)
std::atomic<bool> kernel_path_on_cpu{false};

bool on_frugal_kernels(ModelConfig::Kernels k, const at::Tensor& x) {
  return k == ModelConfig::Kernels::kFrugal && (x.is_cuda() || kernel_path_on_cpu.load());
}

// The dtype a LayerNorm's output goes on in: the autocast dtype where autocast is on (the next
// matmul's; so no cast pass between them), else the input's.
at::ScalarType norm_out_dtype(const at::Tensor& x) {
  const c10::DeviceType dev = x.device().type();
  return compat::autocast_enabled(dev) ? compat::autocast_dtype(dev) : x.scalar_type();
}

at::Tensor layer_norm_of(torch::nn::LayerNorm ln, const at::Tensor& x, bool kernels) {
  if (!kernels) return ln->forward(x);
  return fused_layer_norm(x, ln->weight, ln->bias, ln->options.eps(), norm_out_dtype(x));
}
}  // namespace

CausalSelfAttentionImpl::CausalSelfAttentionImpl(const ModelConfig& c) : heads_(c.heads), dropout_(c.dropout) {
  qkv_ = register_module("qkv", torch::nn::Linear(c.embd, 3 * c.embd));
  proj_ = register_module("proj", torch::nn::Linear(c.embd, c.embd));
  resid_drop_ = register_module("resid_drop", torch::nn::Dropout(c.dropout));
}

at::Tensor CausalSelfAttentionImpl::project(const at::Tensor& y, const at::Tensor& residual) {
  if (!residual.defined()) return resid_drop_->forward(block_linear(proj_, y, proj_lora_));
  if (is_training() && dropout_ > 0) return residual + resid_drop_->forward(block_linear(proj_, y, proj_lora_));
  return residual_linear(residual, y, proj_, proj_lora_);
}

at::Tensor CausalSelfAttentionImpl::forward(const at::Tensor& x, LayerKv* cache, const at::Tensor& residual,
                                            const at::Tensor& positions) {
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2), D = C / heads_;
  const at::Tensor projected = block_linear(qkv_, x, qkv_lora_);  // (B, T, 3C)
  // frugal's own kernel wherever it applies: training and scoring a whole window on CPU (no
  // cache, no dropout on the attention weights).
  if (!cache && T > 1 && !(is_training() && dropout_ > 0) && fused_attention_supported(projected, heads_))
    return project(fused_causal_attention(projected, heads_, positions), residual);
  // q, k, v as (B, H, T, D) views of the three C-wide column blocks. Split rather than one
  // permuted view indexed three times: the backward of split is one concatenation, where each
  // index's backward would fill a zero tensor of the whole projection and the three be summed.
  const auto blocks = projected.split(C, 2);
  const auto by_head = [&](const at::Tensor& t) { return t.view({B, T, heads_, D}).transpose(1, 2); };
  at::Tensor q = by_head(blocks[0]), k = by_head(blocks[1]), v = by_head(blocks[2]);
  if (positions.defined()) {  // packed rows, off the CPU kernel: ATen's attention with their mask
    TORCH_CHECK(!cache, "packed rows (positions) cannot be decoded with a KV cache");
    const at::Tensor y = masked_attention(q, k, v, document_attention_mask(positions), is_training() ? dropout_ : 0.0);
    return project(y.transpose(1, 2).reshape({B, T, C}), residual);
  }
  // On a GPU, a whole window: ATen's fused attention (flash or memory-efficient kernels, the
  // causal mask implicit, never a T x T matrix in memory).
  if (!cache && T > 1 && x.is_cuda()) {
    at::Tensor y = compat::causal_attention(q, k, v, is_training() ? dropout_ : 0.0);
    if (y.defined()) return project(y.transpose(1, 2).reshape({B, T, C}), residual);
  }
  int64_t past = 0;
  if (cache) {
    if (cache->k.defined()) {
      past = cache->k.size(2);
      k = torch::cat({cache->k, k}, 2);
      v = torch::cat({cache->v, v}, 2);
    }
    cache->k = k;
    cache->v = v;
  }
  const int64_t S = k.size(2);
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  at::Tensor att;
  if (T > 1) {
    // Query i (absolute position past+i) may attend to keys 0..past+i. One baddbmm computes
    // scale * q k^T + mask with the -inf causal mask fused in (instead of matmul, mul and
    // masked_fill: three passes over the B*H*T*S scores).
    auto mask = torch::full({T, S}, -std::numeric_limits<float>::infinity(),
                            torch::TensorOptions().dtype(q.scalar_type()).device(x.device()))
                    .triu(past + 1);
    att = torch::baddbmm(mask, q.reshape({B * heads_, T, D}), k.reshape({B * heads_, S, D}).transpose(1, 2),
                         /*beta=*/1.0, /*alpha=*/scale)
              .view({B, heads_, T, S});
  } else {
    att = torch::matmul(q, k.transpose(-2, -1)) * scale;
  }
  att = torch::softmax(att, -1);
  if (is_training() && dropout_ > 0) att = F::dropout(att, F::DropoutFuncOptions().p(dropout_).training(true));
  auto y = torch::matmul(att, v).transpose(1, 2).reshape({B, T, C});
  return project(y, residual);
}

BlockImpl::BlockImpl(const ModelConfig& c) : activation_(c.activation), kernels_(c.kernels) {
  ln1_ = register_module("ln1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.embd}).eps(c.norm_eps)));
  attn_ = register_module("attn", CausalSelfAttention(c));
  ln2_ = register_module("ln2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.embd}).eps(c.norm_eps)));
  fc_ = register_module("fc", torch::nn::Linear(c.embd, 4 * c.embd));
  fc_proj_ = register_module("fc_proj", torch::nn::Linear(4 * c.embd, c.embd));
  mlp_drop_ = register_module("mlp_drop", torch::nn::Dropout(c.dropout));
}

at::Tensor BlockImpl::forward(const at::Tensor& x, LayerKv* cache, const at::Tensor& positions) {
  at::Tensor h, in;
  const bool kernels = on_frugal_kernels(kernels_, x);
  if (kernels) {
    // The attention's output projection, then h = x + it and ln2(h) in one kernel.
    const at::Tensor a = attn_->forward(layer_norm_of(ln1_, x, true), cache, at::Tensor(), positions);
    std::tie(h, in) = fused_residual_layer_norm(x, a, ln2_->weight, ln2_->bias, ln2_->options.eps(), norm_out_dtype(x));
  } else {
    h = attn_->forward(ln1_->forward(x), cache, x, positions);
    in = ln2_->forward(h);
  }
  // On frugal's kernels the product without its bias, then the bias, GELU and (backward) the bias
  // gradient in one kernel each way. Elsewhere GPT-2's tanh approximation runs on ATen's kernel and
  // the exact form on frugal's fused CPU one.
  const bool tanh_form = activation_ == ModelConfig::Activation::kGeluTanh;
  const at::Tensor act = kernels && !fc_lora_ ? bias_gelu(fp8::linear_or_aten(in, fc_->weight, at::Tensor()), fc_->bias,
                                                          tanh_form, in.is_cuda())
                         : tanh_form          ? at::gelu(block_linear(fc_, in, fc_lora_), "tanh")
                         : fc_lora_           ? fused_gelu(block_linear(fc_, in, fc_lora_))
                                              : linear_gelu(in, fc_->weight, fc_->bias);
  if (is_training() && mlp_drop_->options.p() > 0)
    return h + mlp_drop_->forward(block_linear(fc_proj_, act, fc_proj_lora_));
  return residual_linear(h, act, fc_proj_, fc_proj_lora_);
}

GptImpl::GptImpl(const ModelConfig& c) : CausalLmImpl(c) {
  wte_ = register_module("wte", torch::nn::Embedding(c.vocab, c.embd));
  wpe_ = register_module("wpe", torch::nn::Embedding(c.block, c.embd));
  drop_ = register_module("drop", torch::nn::Dropout(c.dropout));
  for (int64_t i = 0; i < c.layers; ++i) blocks_.push_back(register_module("h" + std::to_string(i), Block(c)));
  ln_f_ = register_module("ln_f", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.embd}).eps(c.norm_eps)));

  // GPT-2 initialisation: N(0, 0.02), residual projections scaled by 1/sqrt(2 * layers).
  torch::NoGradGuard no_grad;
  const double proj_std = 0.02 / std::sqrt(2.0 * static_cast<double>(c.layers));
  for (auto& p : named_parameters()) {
    const std::string& name = p.key();
    auto& t = p.value();
    if (name.find("ln") != std::string::npos) continue;  // LayerNorm keeps ones/zeros
    if (name.size() >= 4 && name.compare(name.size() - 4, 4, "bias") == 0) {
      t.zero_();
    } else if (name.find("proj.weight") != std::string::npos) {
      t.normal_(0.0, proj_std);
    } else {
      t.normal_(0.0, 0.02);
    }
  }
}

void test_hooks::run_kernel_path_on_cpu(bool on) { kernel_path_on_cpu = on; }

at::Tensor GptImpl::hidden(const at::Tensor& idx, const at::Tensor& positions) {
  const int64_t T = idx.size(1);
  TORCH_CHECK(T <= config_.block, "sequence length ", T, " exceeds model.block = ", config_.block);
  TORCH_CHECK(!positions.defined() || positions.sizes() == idx.sizes(), "positions of sizes ", positions.sizes(),
              " for tokens of sizes ", idx.sizes());
  // Learned positions: 0..T-1 for every row, or each packed token's place in its document.
  const at::Tensor pos = positions.defined()
                             ? positions
                             : torch::arange(T, torch::TensorOptions().dtype(torch::kLong).device(idx.device()));
  auto x = drop_->forward(wte_->forward(idx) + wpe_->forward(pos));
  for (size_t i = 0; i < blocks_.size(); ++i) {
    Block b = blocks_[i];
    x = run_block(
        i, [b, positions](const at::Tensor& t) mutable { return b->forward(t, nullptr, positions); }, x, *b);
  }
  return layer_norm_of(ln_f_, x, on_frugal_kernels(config_.kernels, x));
}

at::Tensor GptImpl::forward(const at::Tensor& idx) { return head(hidden(idx, at::Tensor())); }

at::Tensor GptImpl::logits(const at::Tensor& idx, const at::Tensor& positions) { return head(hidden(idx, positions)); }

// The tied head. Where model.head_multiple rounds the vocabulary V up to Vp, the product runs
// against the weight with Vp - V zero rows appended, and the logits are the first V columns of
// its (..., Vp) result: a view (row stride Vp), so the loss's cast to float is still the one copy
// of the logits. The backward fills a zero (..., Vp) gradient and copies the V columns in; the
// weight gets the gradient of its V rows only. Under autocast the weight is cast first and the
// cast copy padded (half the bytes of padding the float weight). A GPU's matmul kernels for a
// width like GPT-2's 50257 are unaligned ones, several times slower than those for 50304.
// `pad` = false for one-token decoding, where the product is one row and padding only copies.
at::Tensor GptImpl::head(const at::Tensor& x, bool pad) const {
  const at::Tensor product = head_product(x, pad ? head_multiple_for(x) : 1);
  return product.size(-1) == config_.vocab ? product : product.narrow(-1, 0, config_.vocab);
}

at::Tensor GptImpl::head_product(const at::Tensor& x, int64_t m) const {
  const int64_t V = config_.vocab;
  const int64_t Vp = (V + m - 1) / m * m;
  at::Tensor w = working_weight(wte_->weight, /*shared=*/true);  // tied: the embedding's lookup reads it too
  if (Vp == V) return torch::linear(x, w);
  const c10::DeviceType dev = x.device().type();
  if (compat::autocast_enabled(dev) && w.scalar_type() == at::kFloat) w = w.to(compat::autocast_dtype(dev));
  return torch::linear(x, at::constant_pad_nd(w, {0, 0, 0, Vp - V}));
}

at::Tensor GptImpl::loss(const at::Tensor& idx, const at::Tensor& targets, const at::Tensor& positions) {
  if (on_frugal_kernels(config_.kernels, idx)) {
    // The fused classifier over the padded product: the padding columns take no part, and the
    // backward writes the logits' gradient over them (the logits are this function's own).
    const at::Tensor x = hidden(idx, positions);
    const at::Tensor product = head_product(x, head_multiple_for(x));
    return fused_cross_entropy(product.reshape({-1, product.size(-1)}), targets.reshape({-1}), config_.vocab,
                               kIgnoreIndex, /*logits_are_scratch=*/true);
  }
  const at::Tensor out = head(hidden(idx, positions));
  return torch::cross_entropy_loss(out.reshape({-1, out.size(-1)}).to(torch::kFloat), targets.reshape({-1}),
                                   /*weight=*/{}, at::Reduction::Mean, kIgnoreIndex);
}

at::Tensor GptImpl::decode(const at::Tensor& idx, int64_t pos, std::vector<LayerKv>& cache) {
  const int64_t T = idx.size(1);
  auto p = torch::arange(pos, pos + T, torch::TensorOptions().dtype(torch::kLong).device(idx.device()));
  auto x = wte_->forward(idx) + wpe_->forward(p);
  for (size_t i = 0; i < blocks_.size(); ++i) x = blocks_[i]->forward(x, &cache[i]);
  return head(ln_f_->forward(x.narrow(1, T - 1, 1)), /*pad=*/false).reshape({-1});  // the last position's logits
}

double GptImpl::flops_per_token() const {
  // Weights that take part in a matmul per token: per block qkv (3C^2), proj (C^2), fc and
  // fc_proj (8C^2), plus the tied head (V*C). Each costs 2 FLOPs forward and 4 backward.
  // Attention scores and their weighted sum add 2*2*T*C per layer forward (PaLM, appendix B).
  const double C = static_cast<double>(config_.embd), L = static_cast<double>(config_.layers);
  const double V = static_cast<double>(config_.vocab), T = static_cast<double>(config_.block);
  const double matmul_params = L * 12.0 * C * C + V * C;
  return 6.0 * matmul_params + 12.0 * L * T * C;
}

void CausalSelfAttentionImpl::adaptable(const std::string& prefix, std::vector<AdaptableProduct>& out) {
  out.push_back({prefix + "qkv.weight", qkv_.get(), &qkv_lora_});
  out.push_back({prefix + "proj.weight", proj_.get(), &proj_lora_});
}

void BlockImpl::adaptable(const std::string& prefix, std::vector<AdaptableProduct>& out) {
  attn_->adaptable(prefix + "attn.", out);
  out.push_back({prefix + "fc.weight", fc_.get(), &fc_lora_});
  out.push_back({prefix + "fc_proj.weight", fc_proj_.get(), &fc_proj_lora_});
}

std::vector<AdaptableProduct> GptImpl::adaptable_products() {
  std::vector<AdaptableProduct> out;
  for (size_t i = 0; i < blocks_.size(); ++i) blocks_[i]->adaptable("h" + std::to_string(i) + ".", out);
  return out;
}

std::string GptImpl::describe() const {
  const ModelConfig& m = config_;
  return fmt::format("GPT {} layers, {} heads, embd {}, block {}", m.layers, m.heads, m.embd, m.block);
}

}  // namespace frugal
