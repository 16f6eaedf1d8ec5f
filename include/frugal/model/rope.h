// Rotary position embeddings (RoFormer) as the Llama family uses them, in Hugging Face's
// rotate-half layout: a head's channels d and d + D/2 form the pair rotated by the angle
// position * inv_freq[d]:
//   out[d]       = x[d] cos - x[d + D/2] sin
//   out[d + D/2] = x[d + D/2] cos + x[d] sin            (d < D/2)
// The inverse frequencies follow model.rope_theta and model.rope_scaling exactly as transformers
// computes them (modeling_rope_utils.py: default, linear, llama3, yarn), in fp32, so frugal's
// logits match a Hugging Face checkpoint's.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include "frugal/core/config.h"

namespace frugal {

// The width of one attention head: model.head_dim, or embd / heads where it is 0.
int64_t head_dim_of(const ModelConfig& m);

// (head_dim / 2,) fp32 inverse frequencies of model.rope_theta under model.rope_scaling.
at::Tensor rope_inv_freq(const ModelConfig& m);
// The factor yarn puts on cos and sin (its attention temperature); 1 for the other scalings.
double rope_attention_factor(const ModelConfig& m);

// cos and sin of position * inv_freq (times rope_attention_factor) for positions
// [0, positions): two (positions, head_dim / 2) fp32 tensors on `device`.
struct RopeTables {
  at::Tensor cos;
  at::Tensor sin;
};
RopeTables rope_tables(const ModelConfig& m, int64_t positions, c10::Device device);

// x (B, T, heads, D) rotated for positions [pos, pos + T) of `tables` (ATen operations; in x's
// dtype, the tables cast to it). The reference the fused attention kernel is tested against.
at::Tensor apply_rope(const at::Tensor& x, const RopeTables& tables, int64_t pos);
// The same with each token's own position: positions (B, T) int64 (packed rows, causal_lm.h).
at::Tensor apply_rope(const at::Tensor& x, const RopeTables& tables, const at::Tensor& positions);

}  // namespace frugal
