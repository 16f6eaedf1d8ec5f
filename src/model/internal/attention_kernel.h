// Raw CPU loops of frugal's causal self-attention (frugal/model/fused_attention.h wraps them as
// an autograd op). Built in their own translation unit, without LibTorch headers, cloned per x86
// instruction-set level and spread over OpenMP threads one (batch, head) pair at a time.
//
// Layouts, all contiguous:
//   qkv    (B, T, 3, H, D): the qkv projection's output as it stands, q, k and v read in place;
//   y, dy  (B, T, H, D) = (B, T, C): heads already interleaved for the output projection;
//   dqkv   like qkv, every element written;
//   stats  (B, H, T, 2) float: per query row, the softmax's max and 1 / sum;
//   probs  (B, H, T, T) float or null: the softmax (0 above the diagonal). Where the forward was
//          given one, the backward reads it; where not, it recomputes the probabilities from q,
//          k and stats.
#pragma once

#include <cstdint>

namespace frugal::internal {

struct AttentionShape {
  int64_t batch, seq, heads, head_dim;
};

// y = softmax(scale * q k^T, causal) v, keeping the softmax's row statistics (and the softmax
// itself where probs is not null) for the backward.
void attention_forward_f32(const float* qkv, float* y, float* stats, float* probs, const AttentionShape& shape,
                           float scale, int threads);
void attention_backward_f32(const float* qkv, const float* stats, const float* probs, const float* dy, float* dqkv,
                            const AttentionShape& shape, float scale, int threads);
// The same on bfloat16 bit patterns: computed in float, rounded once on the way out.
void attention_forward_bf16(const uint16_t* qkv, uint16_t* y, float* stats, float* probs,
                            const AttentionShape& shape, float scale, int threads);
void attention_backward_bf16(const uint16_t* qkv, const float* stats, const float* probs, const uint16_t* dy,
                             uint16_t* dqkv, const AttentionShape& shape, float scale, int threads);

}  // namespace frugal::internal
