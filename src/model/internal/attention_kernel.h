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
#include <vector>

namespace frugal::internal {

//
// pos (B, T) or null: each token's position inside its document, where rows hold several documents
// (packing): query i attends to keys i - pos[i] .. i only, so no attention weight crosses a
// document boundary (REQUIRES 0 <= pos[i] <= i, and pos[i] = 0 or pos[i - 1] + 1).
struct AttentionShape {
  int64_t batch, seq, heads, head_dim;
  const int64_t* pos;
};

// y = softmax(scale * q k^T, causal) v, keeping the softmax's row statistics (and the softmax
// itself where probs is not null) for the backward.
void attention_forward_f32(const float* qkv, float* y, float* stats, float* probs, const AttentionShape& shape,
                           float scale, int threads);
void attention_backward_f32(const float* qkv, const float* stats, const float* probs, const float* dy, float* dqkv,
                            const AttentionShape& shape, float scale, int threads);
// The same on bfloat16 bit patterns: computed in float, rounded once on the way out.
void attention_forward_bf16(const uint16_t* qkv, uint16_t* y, float* stats, float* probs, const AttentionShape& shape,
                            float scale, int threads);
void attention_backward_bf16(const uint16_t* qkv, const float* stats, const float* probs, const uint16_t* dy,
                             uint16_t* dqkv, const AttentionShape& shape, float scale, int threads);

// Grouped-query attention with rotary positions (the Llama family; gqa_attention_kernel.cpp).
// qkv rows hold `heads` query heads, then `kv_heads` key heads, then `kv_heads` value heads,
// head_dim each: (B, T, (heads + 2 kv_heads) D); query head h reads key/value head
// h / (heads / kv_heads). Where cos and sin are not null (seq x D/2 floats each, rope.h's
// tables), q and k are rotated as they are read and their gradients rotated back. With
// window > 0, query i attends to keys i - window + 1 .. i only. With pos (as above), keys of other
// documents are masked too and the rotation reads table row pos[i]. y and dy: (B, T, heads D);
// stats (B, heads, T, 2) and probs (B, heads, T, T) or null, as above.
struct GqaShape {
  int64_t batch, seq, heads, kv_heads, head_dim, window;
  const float* cos;
  const float* sin;
  const int64_t* pos;
};
void gqa_forward_f32(const float* qkv, float* y, float* stats, float* probs, const GqaShape& shape, float scale,
                     int threads);
void gqa_backward_f32(const float* qkv, const float* stats, const float* probs, const float* dy, float* dqkv,
                      const GqaShape& shape, float scale, int threads);
void gqa_forward_bf16(const uint16_t* qkv, uint16_t* y, float* stats, float* probs, const GqaShape& shape, float scale,
                      int threads);
void gqa_backward_bf16(const uint16_t* qkv, const float* stats, const float* probs, const uint16_t* dy, uint16_t* dqkv,
                       const GqaShape& shape, float scale, int threads);

// The loops exist per x86-64 level: 1 (any x86-64 CPU, and every other architecture), 3 (AVX2
// and FMA), 4 (AVX-512). The best level the CPU supports is used; attention_levels() lists the
// ones it can run, and set_attention_level() picks one of them for the whole process (tests run
// each in turn; std::invalid_argument for a level the CPU lacks).
std::vector<int> attention_levels();
int attention_level();
void set_attention_level(int level);

}  // namespace frugal::internal
