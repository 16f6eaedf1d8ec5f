// The register tiles and row reductions of frugal's CPU attention loops, shared by the causal
// attention of the GPT (attention_kernel.cpp) and the grouped-query attention of the Llama family
// (gqa_attention_kernel.cpp). Included only by those two files, which are built without LibTorch
// headers and cloned per x86 level (internal/simd_math.h); attention_kernel.cpp's header comment
// explains the tiles.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>

#include "model/internal/simd_math.h"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace frugal::internal::tiles {
constexpr int kLanes = 16;  // tile width, and the padding of every scratch row
constexpr int kRows = 8;    // tile height: independent accumulators in flight
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// 16, 8 or 4 floats as one value (GCC/Clang vector extension: a zmm, ymm or xmm register),
// moved from and to float arrays with memcpy (unaligned loads and stores; an alignment
// attribute on the type would be dropped where it is a template argument).
typedef float Vec16 __attribute__((vector_size(16 * sizeof(float))));
typedef float Vec8 __attribute__((vector_size(8 * sizeof(float))));
typedef float Vec4 __attribute__((vector_size(4 * sizeof(float))));

template <class V>
FRUGAL_INLINE void load_vec(V* v, const float* p) {
  std::memcpy(v, p, sizeof *v);
}
template <class V>
FRUGAL_INLINE void store_vec(float* p, const V& v) {
  std::memcpy(p, &v, sizeof v);
}

FRUGAL_INLINE float load(float x) { return x; }
FRUGAL_INLINE float load(uint16_t x) { return bf16_to_float(x); }
FRUGAL_INLINE void store(float* p, float v) { *p = v; }
FRUGAL_INLINE void store(uint16_t* p, float v) { *p = float_to_bf16(v); }

constexpr int64_t padded(int64_t n) { return (n + kLanes - 1) / kLanes * kLanes; }

// One past the last column of row i's diagonal block: the tiles that take P or dS as their
// left operand read row i up to here (the `p v` and `dS k` products, K = the block's end) and
// read columns i0..i0 + kRows of the rows below transposed (the `P^T dy` and `dS^T q` ones).
// So the entries from i + 1 to here must be 0; those past it are never read.
constexpr int64_t block_end(int64_t i) { return i / kRows * kRows + kRows; }

// c[r][0..16) = sum_{k < K} a[r * ar + k * ak] * b[k * ldb + 0..16) for the kRows rows r (row
// stride ldc). (ar, ak) = (lda, 1) reads A, (1, lda) reads A transposed. V is the register
// type: 16 / |V| registers per row, kRows * |V| / 16 rows per pass, 8 accumulators in all.
template <class V, bool kAccumulate = false>
FRUGAL_INLINE void tile(const float* a, int64_t ar, int64_t ak, const float* b, int64_t ldb, int64_t K, float* c,
                        int64_t ldc) {
  constexpr int kWidth = sizeof(V) / sizeof(float), kCols = kLanes / kWidth, kPass = kRows / kCols;
  for (int r0 = 0; r0 < kRows; r0 += kPass) {
    V acc[kPass][kCols] = {};
    if (kAccumulate)
      for (int r = 0; r < kPass; ++r)
        for (int j = 0; j < kCols; ++j) load_vec(&acc[r][j], c + (r0 + r) * ldc + j * kWidth);
    const float* ar0 = a + r0 * ar;
    for (int64_t k = 0; k < K; ++k) {
      V bk[kCols];
      for (int j = 0; j < kCols; ++j) load_vec(&bk[j], b + k * ldb + j * kWidth);
      for (int r = 0; r < kPass; ++r) {
        const float x = ar0[r * ar + k * ak];
        for (int j = 0; j < kCols; ++j) acc[r][j] += x * bk[j];
      }
    }
    for (int r = 0; r < kPass; ++r)
      for (int j = 0; j < kCols; ++j) store_vec(c + (r0 + r) * ldc + j * kWidth, acc[r][j]);
  }
}

// Row reductions in a fixed order: 16 lane-wise partials, then the tail, then the lanes in turn.
// A NaN never wins a comparison, so the max ignores it; the NaN still reaches every softmax
// value of its row through exp(NaN - max).
FRUGAL_INLINE float row_max(const float* x, int64_t n) {
  float lane[kLanes];
  for (int l = 0; l < kLanes; ++l) lane[l] = kNegInf;
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int l = 0; l < kLanes; ++l) lane[l] = x[j + l] > lane[l] ? x[j + l] : lane[l];
  float m = kNegInf;
  for (; j < n; ++j) m = x[j] > m ? x[j] : m;
  for (int l = 0; l < kLanes; ++l) m = lane[l] > m ? lane[l] : m;
  return m;
}

FRUGAL_INLINE float row_dot(const float* a, const float* b, int64_t n) {
  float lane[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int l = 0; l < kLanes; ++l) lane[l] += a[j + l] * b[j + l];
  float s = 0.0f;
  for (; j < n; ++j) s += a[j] * b[j];
  for (int l = 0; l < kLanes; ++l) s += lane[l];
  return s;
}

// Packed rows (data.packing = pack): with positions pos (a row's position of each token inside
// its own document), query i's document starts at key i - pos[i]; null = one document a row.
FRUGAL_INLINE int64_t document_start(const int64_t* pos, int64_t i) { return pos ? i - pos[i] : 0; }

// Scores of keys before `first` to -inf: probability 0, no gradient.
FRUGAL_INLINE void mask_before(float* si, int64_t first) {
  for (int64_t j = 0; j < first; ++j) si[j] = kNegInf;
}

// Row i of S (n = i + 1 scores) becomes the softmax, in place; stats gets {max, 1 / sum}.
FRUGAL_INLINE void softmax_row(float* s, int64_t n, float* stats) {
  const float m = row_max(s, n);
  float lane[kLanes] = {};
  float sum = 0.0f;
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int l = 0; l < kLanes; ++l) {
      s[j + l] = exp_nonpositive(s[j + l] - m);
      lane[l] += s[j + l];
    }
  for (; j < n; ++j) {
    s[j] = exp_nonpositive(s[j] - m);
    sum += s[j];
  }
  for (int l = 0; l < kLanes; ++l) sum += lane[l];
  const float inv = 1.0f / sum;
  for (j = 0; j < n; ++j) s[j] *= inv;
  stats[0] = m;
  stats[1] = inv;
}

// The same probabilities again from the same scores and the forward's stats.
FRUGAL_INLINE void softmax_row_again(float* s, int64_t n, const float* stats) {
  const float m = stats[0], inv = stats[1];
  for (int64_t j = 0; j < n; ++j) s[j] = exp_nonpositive(s[j] - m) * inv;
}

// S (or dP) for rows < T, tiles on or below the diagonal only: x (T x D, row stride xs) times
// the transposed block yt (D x T, row stride Tp).
template <class V>
FRUGAL_INLINE void causal_product(const float* x, int64_t xs, const float* yt, int64_t T, int64_t D, int64_t Tp,
                                  float* out) {
  for (int64_t i0 = 0; i0 < T; i0 += kRows)
    for (int64_t j0 = 0; j0 < std::min(i0 + kRows, T); j0 += kLanes)
      tile<V>(x + i0 * xs, xs, 1, yt + j0, Tp, D, out + i0 * Tp + j0, Tp);
}

inline int thread_index() {
#ifdef _OPENMP
  return omp_get_thread_num();
#else
  return 0;
#endif
}

}  // namespace frugal::internal::tiles
