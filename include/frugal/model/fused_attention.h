// Causal self-attention as one autograd op with frugal's own CPU loops, reading q, k and v in
// place from the qkv projection's output and writing y already laid out for the output
// projection: no reshape copies, no work on the masked half, no per-head BLAS calls (see
// src/model/attention_kernel.cpp). The (B, H, T, T) softmax is kept for the backward only
// while it is no larger than q, k, v (T <= 3 * head size); longer contexts keep two floats per
// query row and the backward recomputes the probabilities. Float or bfloat16 (computed in
// float). Same values as softmax(q k^T / sqrt(D) + causal mask) v to within 1e-5 in float,
// gradients likewise (tested, both ways).
#pragma once

#include <ATen/core/Tensor.h>

namespace frugal {

// Whether fused_causal_attention runs on this tensor: a contiguous-able (B, T, 3C) CPU tensor of
// float or bfloat16 with C divisible by `heads`. Elsewhere (CUDA, other dtypes) the caller keeps
// ATen's path.
bool fused_attention_supported(const at::Tensor& qkv, int64_t heads);

// qkv: (B, T, 3C), the projection's output viewed as (B, T, 3, heads, D). Returns y: (B, T, C),
// y[b, t, h*D + d] = sum_{s <= t} softmax_s(q_t . k_s / sqrt(D)) v_s[d] per head h. No dropout
// on the attention weights. Throws std::invalid_argument where not supported.
//
// positions (B, T) int64, or undefined for one document a row: rows packed with several documents
// (data.packing = pack), each token's position inside its document (0 at each document's first
// token, then one more per token); query t then attends to its own document's keys only,
// t - positions[t] .. t, so no attention weight crosses a document boundary. Checked: a position is
// 0 or one past the previous token's (std::invalid_argument naming the row and token otherwise).
at::Tensor fused_causal_attention(const at::Tensor& qkv, int64_t heads, const at::Tensor& positions = {});

// Grouped-query attention with rotary positions, the Llama family's (llama.h), over its packed
// projection qkv (B, T, (heads + 2 kv_heads) D): query head h attends with key/value head
// h / (heads / kv_heads); q and k are rotated by rope_cos / rope_sin (rope.h's tables for at least
// T positions, fp32, (positions, D/2); undefined = no rotation) as the kernel reads them; with
// window > 0 each query sees the last `window` positions only; with positions (as above) its own
// document's keys only, each token rotated for its position inside its document. Returns y (B, T, heads D) in qkv's
// dtype. Same values and gradients as the ATen reference (llama.cpp's attention: apply_rope,
// repeated key/value heads, masked softmax) to within 1e-5 in float (tested).
bool fused_gqa_attention_supported(const at::Tensor& qkv, int64_t heads, int64_t kv_heads);
at::Tensor fused_gqa_attention(const at::Tensor& qkv, int64_t heads, int64_t kv_heads, const at::Tensor& rope_cos,
                               const at::Tensor& rope_sin, int64_t window, const at::Tensor& positions = {});

// The x86-64 level the CPU loops run at here: 4 (AVX-512), 3 (AVX2 and FMA) or 1 (baseline, and
// every other architecture). `frugal doctor` reports it.
int fused_attention_cpu_level();

}  // namespace frugal
