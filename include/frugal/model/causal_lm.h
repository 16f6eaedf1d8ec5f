// What every decoder family frugal trains natively gives the rest of frugal: the trainer (the
// loss of a micro-batch), activation checkpointing (which blocks recompute), the sampler (decoding
// with a KV cache), the exporter and checkpoints (parameters by stable names), MFU (training FLOPs
// per token) and the banner (a description). The GPT (gpt.h) and the Llama family (llama.h) are
// the two families; model_family.h builds the one model.arch names and knows each family's
// Hugging Face layout. Nothing outside model/ needs to know which family it holds.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "frugal/core/config.h"
#include "frugal/model/block_gathering.h"

namespace frugal {

// Keys and values of one attention layer for the positions decoded so far, as the layer's
// attention reads them: (B, kv heads, T_cached, head_dim).
struct LayerKv {
  at::Tensor k;
  at::Tensor v;
};

class LoraSiteImpl;  // model/lora.h

// A product of a block that low-rank adapters may adapt (model/lora.h): its weight's parameter name
// ("h0.attn.qkv.weight"), the module holding the weight (the adapters register under it as
// "lora") and the slot the block's forward reads its adapters from (empty: the plain product).
struct AdaptableProduct {
  std::string weight;
  torch::nn::Module* module = nullptr;
  std::shared_ptr<LoraSiteImpl>* adapters = nullptr;
};

class CausalLmImpl : public torch::nn::Module {
 public:
  explicit CausalLmImpl(const ModelConfig& c) : config_(c) {}
  ~CausalLmImpl() override = default;

  // idx: (B, T) int64 token ids, T <= model.block. Returns the logits (B, T, vocab); they may be a
  // view with a row stride above vocab (a padded head): call .contiguous() before raw access.
  virtual at::Tensor forward(const at::Tensor& idx) = 0;
  // The same over rows that may hold several documents (data.packing = pack): positions (B, T)
  // int64, each token's position inside its own document (0 at a document's first token, one more
  // per token after it; Batch::pos). Each token then attends to its own document's tokens only and
  // takes the position embedding (learned or rotary) of its place in that document, so a document
  // computes what it computes alone. Undefined positions: forward(idx).
  virtual at::Tensor logits(const at::Tensor& idx, const at::Tensor& positions) = 0;
  // Mean next-token cross-entropy over the targets that are not kIgnoreIndex (-100,
  // data/packing.h), computed in fp32; with positions, over packed rows as logits() computes them.
  at::Tensor loss(const at::Tensor& idx, const at::Tensor& targets) { return loss(idx, targets, at::Tensor()); }
  virtual at::Tensor loss(const at::Tensor& idx, const at::Tensor& targets, const at::Tensor& positions) = 0;
  // Training FLOPs (forward + backward) per token at the full context (docs/model.md).
  virtual double flops_per_token() const = 0;
  // One line for the banner, e.g. "GPT 4 layers, 4 heads, embd 128, block 64".
  virtual std::string describe() const = 0;
  // Every block's projections, in the model's order.
  virtual std::vector<AdaptableProduct> adaptable_products() = 0;

  // Greedy (temperature 0) or sampled continuation of `prompt` with a KV cache; stops after
  // max_new tokens or when `stop` returns true for a generated token. The context is at most one
  // block: when it would grow past it (a long prompt, a long generation), the cache restarts from
  // the newest block/2 tokens, so each token is predicted from the tokens since that restart.
  std::vector<int64_t> generate(const std::vector<int64_t>& prompt, int64_t max_new, double temperature, uint64_t seed,
                                const std::function<bool(int64_t)>& stop = nullptr);
  // How many tokens, from the end, of a prompt of `prompt_tokens` generate() reads: all of them
  // when they fit one block, else the newest block/2 (the restart above).
  int64_t prompt_tokens_used(int64_t prompt_tokens) const;

  // Activation checkpointing: block i drops its activations in the forward and recomputes them
  // in the backward where plan[i] is true (model/activation_checkpointing.h's checkpoint_plan).
  // An empty plan (the default) keeps every block's activations.
  void set_recompute(std::vector<bool> plan) { recompute_ = std::move(plan); }
  int64_t layers() const { return config_.layers; }
  // dist.zero = 3: every block's forward and backward runs between gathering->need(i) and
  // gathering->done(i); decoding (generate) needs every block for its whole length. Null: none.
  void set_block_gathering(std::shared_ptr<BlockGathering> gathering) { gathering_ = std::move(gathering); }
  // Each block's parameters (those named "h<i>."), in block order, and the weights of the
  // blocks' products (adaptable_products()).
  BlockParameters block_parameters();

  // Parameters with their state-dict names, in a stable order (the checkpoint's safetensors keys).
  std::vector<std::pair<std::string, at::Tensor>> named_parameter_list() const;
  int64_t parameter_count() const;
  const ModelConfig& config() const { return config_; }

 protected:
  // The logits (vocab,) of the last position of `idx` (1, T), whose first token sits at position
  // `pos`; `cache` holds one LayerKv per block and grows by T positions.
  virtual at::Tensor decode(const at::Tensor& idx, int64_t pos, std::vector<LayerKv>& cache) = 0;
  // fn(x) for block i, with its activations recomputed in the backward where the plan says so;
  // `block` is the module whose parameters fn uses.
  at::Tensor run_block(size_t i, const std::function<at::Tensor(const at::Tensor&)>& fn, const at::Tensor& x,
                       const torch::nn::Module& block) const;
  // The multiple the output head's products round the vocabulary up to for `x`'s device
  // (model.head_multiple; 0 = 64 on a GPU, where aligned widths take the fast matmul kernels, 1
  // elsewhere).
  int64_t head_multiple_for(const at::Tensor& x) const;

  ModelConfig config_;

 private:
  std::vector<bool> recompute_;
  std::shared_ptr<BlockGathering> gathering_;
};
TORCH_MODULE(CausalLm);

// Packed rows' attention mask: (B, 1, T, T) bool on positions' device, true where query i may
// attend to key j: j <= i, j >= i - positions[b, i] (its own document) and, with window > 0,
// j > i - window. What the CPU kernels compute without building it; the other paths' mask.
at::Tensor document_attention_mask(const at::Tensor& positions, int64_t window = 0);

// softmax(q k^T / sqrt(D), masked) v, q (B, H, T, D), k and v (B, H, S, D) (heads already
// repeated), mask broadcastable to (B, H, T, S), bool, true = attend; dropout on the weights.
at::Tensor masked_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& mask,
                            double dropout);

// A family's module holder (Gpt, Llama) as the shared interface: the same module, not a copy.
template <class Impl>
CausalLm as_causal_lm(const torch::nn::ModuleHolder<Impl>& model) {
  return CausalLm(std::shared_ptr<CausalLmImpl>(model.ptr()));
}

}  // namespace frugal
