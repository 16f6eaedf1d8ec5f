// The reference GPT decoder (model.arch = "gpt"): token + position embeddings, pre-LayerNorm
// blocks of causal self-attention and a GELU MLP, a final LayerNorm and an output head tied to the
// token embedding. Sized by ModelConfig. One of the decoder families of causal_lm.h: its training
// FLOPs per token (docs/model.md gives the formula), decoding with a KV cache for `frugal sample`.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>
#include <torch/nn/pimpl.h>

#include <memory>
#include <string>
#include <vector>

#include "frugal/core/config.h"
#include "frugal/model/causal_lm.h"

namespace frugal {

class CausalSelfAttentionImpl : public torch::nn::Module {
 public:
  explicit CausalSelfAttentionImpl(const ModelConfig& c);
  // x: (B, T, C). With `cache`, x holds only the new positions; keys/values are appended. With
  // `residual` (B, T, C), returns residual + the attention's output (the sum fused into the
  // output projection where it can be). With `positions` (B, T) (packed rows, causal_lm.h), each
  // query attends to its own document's keys only.
  at::Tensor forward(const at::Tensor& x, LayerKv* cache = nullptr, const at::Tensor& residual = {},
                     const at::Tensor& positions = {});
  // Its projections (qkv, proj) under `prefix` ("h0.attn.").
  void adaptable(const std::string& prefix, std::vector<AdaptableProduct>& out);

 private:
  at::Tensor project(const at::Tensor& y, const at::Tensor& residual);

  int64_t heads_;
  double dropout_;
  torch::nn::Linear qkv_{nullptr}, proj_{nullptr};
  std::shared_ptr<LoraSiteImpl> qkv_lora_, proj_lora_;  // model/lora.h; empty without adapters
  torch::nn::Dropout resid_drop_{nullptr};
};
TORCH_MODULE(CausalSelfAttention);

class BlockImpl : public torch::nn::Module {
 public:
  explicit BlockImpl(const ModelConfig& c);
  at::Tensor forward(const at::Tensor& x, LayerKv* cache = nullptr, const at::Tensor& positions = {});
  void adaptable(const std::string& prefix, std::vector<AdaptableProduct>& out);

 private:
  torch::nn::LayerNorm ln1_{nullptr}, ln2_{nullptr};
  CausalSelfAttention attn_{nullptr};
  torch::nn::Linear fc_{nullptr}, fc_proj_{nullptr};
  std::shared_ptr<LoraSiteImpl> fc_lora_, fc_proj_lora_;
  torch::nn::Dropout mlp_drop_{nullptr};
  ModelConfig::Activation activation_;
  ModelConfig::Kernels kernels_;
};
TORCH_MODULE(Block);

class GptImpl : public CausalLmImpl {
 public:
  explicit GptImpl(const ModelConfig& c);

  // idx: (B, T) int64 token ids, T <= block. Returns logits (B, T, vocab). Where the head is
  // padded (model.head_multiple; by default on a GPU) they are a view whose row stride exceeds
  // vocab: call .contiguous() before .view() or raw data access.
  at::Tensor forward(const at::Tensor& idx) override;
  // Mean cross-entropy of next-token prediction; logits are computed in fp32 for the loss.
  // Targets equal to kIgnoreIndex (-100, data/packing.h: padding, masked positions) count
  // neither in the sum nor in the mean. With model.kernels = "frugal" on a GPU, frugal's fused
  // classifier reads the padded bf16 logits directly (no fp32 copy) and is 0 where every target is
  // ignored (ATen's mean is then NaN).
  using CausalLmImpl::loss;
  at::Tensor loss(const at::Tensor& idx, const at::Tensor& targets, const at::Tensor& positions) override;
  // Packed rows (causal_lm.h): the position embedding of each token's place in its document.
  at::Tensor logits(const at::Tensor& idx, const at::Tensor& positions) override;
  // Training FLOPs per token: 6 * (matmul parameters, head included) + 12 * layers * block * embd.
  double flops_per_token() const override;
  std::string describe() const override;
  std::vector<AdaptableProduct> adaptable_products() override;

 protected:
  at::Tensor decode(const at::Tensor& idx, int64_t pos, std::vector<LayerKv>& cache) override;

 private:
  // Embeddings, blocks and the final LayerNorm: (B, T) ids -> (B, T, embd).
  at::Tensor hidden(const at::Tensor& idx, const at::Tensor& positions);
  // The tied output head, (..., embd) -> (..., vocab), padded per model.head_multiple unless
  // `pad` is false (gpt.cpp).
  at::Tensor head(const at::Tensor& x, bool pad = true) const;
  // The head's product at its padded width, (..., embd) -> (..., Vp), Vp = vocab rounded up to
  // `multiple`; columns vocab..Vp-1 are zero.
  at::Tensor head_product(const at::Tensor& x, int64_t multiple) const;

  torch::nn::Embedding wte_{nullptr}, wpe_{nullptr};
  torch::nn::Dropout drop_{nullptr};
  std::vector<Block> blocks_;
  torch::nn::LayerNorm ln_f_{nullptr};
};
TORCH_MODULE(Gpt);

namespace test_hooks {
// Runs the GPT's model.kernels = "frugal" path on CPU tensors too, where kernel_ops.h's Functions
// take their ATen bodies: for tests of the path's wiring on a machine without a GPU.
void run_kernel_path_on_cpu(bool on);
}  // namespace test_hooks

}  // namespace frugal
