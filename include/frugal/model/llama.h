// The Llama family of decoders (Llama 2/3, Qwen2/2.5/3, Mistral; model.arch = "llama"): token
// embedding, pre-RMSNorm blocks of grouped-query self-attention with rotary positions and a SwiGLU
// MLP, a final RMSNorm and an output head, tied to the embedding or not. The variants are keys of
// [model]: kv_heads (GQA), head_dim, mlp_width, rope_theta and rope_scaling (linear, llama3, yarn),
// attention_bias (Qwen2's q/k/v biases, Llama's attention_bias), qk_norm (Qwen3), tie_embeddings,
// sliding_window (Mistral). docs/model.md gives the maths, the parameter names and the FLOP count.
//
// Parameters are held fused where one product serves several of Hugging Face's tensors: a block's
// q, k and v projections are one (heads + 2 kv_heads) * head_dim x embd matrix ("attn.qkv", rows
// q | k | v), its gate and up projections one 2 * mlp_width x embd matrix ("mlp.gate_up", rows
// gate | up). model_family.h maps them to and from the Hugging Face names.
#pragma once

#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/embedding.h>

#include <memory>
#include <string>
#include <vector>

#include "frugal/model/causal_lm.h"
#include "frugal/model/rope.h"

namespace frugal {

// One block: x + attn(rms(x)) -> h, h + mlp(rms(h)).
class LlamaBlockImpl : public torch::nn::Module {
 public:
  explicit LlamaBlockImpl(const ModelConfig& c);
  // x: (B, T, embd) at positions [pos, pos + T). With `cache`, x holds only the new positions and
  // their keys and values are appended to it. With `positions` (B, T) (packed rows, causal_lm.h;
  // pos 0, no cache), each token is rotated for its place in its document and attends to that
  // document only.
  at::Tensor forward(const at::Tensor& x, const RopeTables& rope, int64_t pos, LayerKv* cache,
                     const at::Tensor& positions = {});
  // Its projections (attn.qkv, attn.proj, mlp.gate_up, mlp.down) under `prefix` ("h0.").
  void adaptable(const std::string& prefix, std::vector<AdaptableProduct>& out);

 private:
  at::Tensor attention(const at::Tensor& normed, const RopeTables& rope, int64_t pos, LayerKv* cache,
                       const at::Tensor& positions);
  at::Tensor qk_normed(const at::Tensor& qkv) const;
  at::Tensor mlp(const at::Tensor& normed);

  ModelConfig c_;
  int64_t head_dim_;
  at::Tensor attn_norm_, qkv_, qkv_bias_, proj_, proj_bias_, q_norm_, k_norm_;
  at::Tensor mlp_norm_, gate_up_, down_;
  std::shared_ptr<LoraSiteImpl> qkv_lora_, proj_lora_, gate_up_lora_, down_lora_;  // model/lora.h
};
TORCH_MODULE(LlamaBlock);

class LlamaImpl : public CausalLmImpl {
 public:
  explicit LlamaImpl(const ModelConfig& c);

  at::Tensor forward(const at::Tensor& idx) override;
  // The output head and the cross-entropy run together over chunks of rows
  // (model/linear_cross_entropy.h): no (tokens x vocab) fp32 logits are kept.
  using CausalLmImpl::loss;
  at::Tensor loss(const at::Tensor& idx, const at::Tensor& targets, const at::Tensor& positions) override;
  at::Tensor logits(const at::Tensor& idx, const at::Tensor& positions) override;
  // 6 x (matmul weights, head included) + 12 x layers x block x heads x head_dim (docs/model.md).
  double flops_per_token() const override;
  std::string describe() const override;
  std::vector<AdaptableProduct> adaptable_products() override;

  // The output head's weight: the embedding where tied.
  const at::Tensor& head_weight() const;

 protected:
  at::Tensor decode(const at::Tensor& idx, int64_t pos, std::vector<LayerKv>& cache) override;

 private:
  // Embedding, blocks and the final RMSNorm: (B, T) ids -> (B, T, embd).
  at::Tensor hidden(const at::Tensor& idx, const at::Tensor& positions);
  const RopeTables& rope_on(c10::Device device);

  torch::nn::Embedding embed_{nullptr};
  std::vector<LlamaBlock> blocks_;
  at::Tensor norm_, lm_head_;
  RopeTables rope_;  // model.block positions, on the device of the last forward
};
TORCH_MODULE(Llama);

// The SwiGLU MLP's width when model.mlp_width is 0: 8/3 embd rounded up to a multiple of 16.
int64_t llama_mlp_width(const ModelConfig& m);
// model.kv_heads, or heads where it is 0.
int64_t kv_heads_of(const ModelConfig& m);

}  // namespace frugal
