// The Llama family's attention loops; see internal/attention_kernel.h (gqa_*).
//
// The same register tiles as the GPT's causal attention (attention_tiles.h, attention_kernel.cpp
// explains them), extended by what the Llama family needs:
//   - grouped heads: the projection holds `heads` query heads, then `kv_heads` key heads, then
//     `kv_heads` value heads; query head h reads key/value head h / (heads / kv_heads). The forward
//     is one task per (batch, query head); the backward one task per (batch, kv head), which runs
//     its group's query heads in turn and sums their key and value gradients in scratch, so no two
//     threads ever write one element and the sums run in a fixed order;
//   - rotary positions: q and k are rotated as they are read into scratch (rope.h's rotate-half
//     pairs; the tables are the model's), and their gradients rotated back as they are written,
//     so no rotated copy of q and k exists outside the task's scratch;
//   - a sliding window (Mistral): scores of keys more than window - 1 positions back are set to
//     -inf before the softmax, so they get probability 0 and no gradient;
//   - packed rows (GqaShape::pos): keys of earlier documents masked the same way, and each token
//     rotated for its position inside its own document.
// Every product is computed in scratch (no in-place reads of the projection: q and k are always
// rotated first), one task's arithmetic the same whatever the thread count.
#include <algorithm>
#include <vector>

#include "model/internal/attention_kernel.h"
#include "model/internal/attention_tiles.h"
#include "model/internal/simd_math.h"

namespace frugal::internal {
namespace {
using namespace tiles;  // NOLINT(build/namespaces): the shared tiles, written for these loops

// One task's view: the batch element's rows of qkv (row stride `row`), y / dy (row stride
// `yrow`), the head's stats and probs, and the tables.
template <class Elem>
struct Task {
  const Elem* qkv;
  Elem* out;  // y (forward, rows of yrow) or dqkv (backward, rows of row)
  const Elem* dy;
  float* stats;  // forward: the query head's T x 2; backward: the group's first query head's
  float* probs;  // likewise (T x T per head) or null
  int64_t T, D, H, K, row, yrow;
  int64_t head;  // forward: the query head; backward: the kv head
  const float* cos;
  const float* sin;
  const int64_t* pos;  // the row's positions inside their documents, or null
  int64_t window;
  float scale;
};

// The rotary table row of token t: its position inside its document.
template <class Elem>
FRUGAL_INLINE int64_t rope_row(const Task<Elem>& a, int64_t t) {
  return a.pos ? a.pos[t] : t;
}

// D channels of one head at `src`, rotated for table row `t` where there are tables.
template <class Elem>
FRUGAL_INLINE void read_rotated(const Elem* src, int64_t D, const float* cos, const float* sin, int64_t t, float* out) {
  if (!cos) {
    for (int64_t d = 0; d < D; ++d) out[d] = load(src[d]);
    return;
  }
  const int64_t h = D / 2;
  const float* c = cos + t * h;
  const float* s = sin + t * h;
  for (int64_t d = 0; d < h; ++d) {
    const float x1 = load(src[d]), x2 = load(src[d + h]);
    out[d] = x1 * c[d] - x2 * s[d];
    out[d + h] = x2 * c[d] + x1 * s[d];
  }
}

// The gradient of a rotated head back through the rotation (its transpose), written to `dst`.
template <class Elem>
FRUGAL_INLINE void write_unrotated(const float* g, int64_t D, const float* cos, const float* sin, int64_t t,
                                   Elem* dst) {
  if (!cos) {
    for (int64_t d = 0; d < D; ++d) store(dst + d, g[d]);
    return;
  }
  const int64_t h = D / 2;
  const float* c = cos + t * h;
  const float* s = sin + t * h;
  for (int64_t d = 0; d < h; ++d) {
    store(dst + d, g[d] * c[d] + g[d + h] * s[d]);
    store(dst + d + h, g[d + h] * c[d] - g[d] * s[d]);
  }
}

// Row i's scores of keys outside the window (j <= i - window) or before the query's document to
// -inf.
FRUGAL_INLINE void mask_keys(float* si, int64_t i, int64_t window, const int64_t* pos) {
  mask_before(si, std::max(window > 0 ? i - window + 1 : int64_t{0}, document_start(pos, i)));
}

template <class V, class Elem>
FRUGAL_INLINE void forward_task(const Task<Elem>& a, float* scratch) {
  const int64_t T = a.T, D = a.D, Tp = padded(T), Dp = padded(D);
  const int64_t g = a.head / (a.H / a.K);
  const int64_t q_off = a.head * D, k_off = a.H * D + g * D, v_off = (a.H + a.K) * D + g * D;
  float* q = scratch;        // Tp x Dp, rotated, times scale
  float* kt = q + Tp * Dp;   // Dp x Tp, rotated
  float* v = kt + Dp * Tp;   // Tp x Dp
  float* y = v + Tp * Dp;    // Tp x Dp
  float* s = y + Tp * Dp;    // Tp x Tp: scores, then probabilities
  float* tmp = s + Tp * Tp;  // Dp
  for (int64_t t = 0; t < T; ++t) {
    const Elem* r = a.qkv + t * a.row;
    read_rotated(r + q_off, D, a.cos, a.sin, rope_row(a, t), tmp);
    for (int64_t d = 0; d < D; ++d) q[t * Dp + d] = tmp[d] * a.scale;
    read_rotated(r + k_off, D, a.cos, a.sin, rope_row(a, t), tmp);
    for (int64_t d = 0; d < D; ++d) kt[d * Tp + t] = tmp[d];
    for (int64_t d = 0; d < D; ++d) v[t * Dp + d] = load(r[v_off + d]);
  }
  causal_product<V>(q, Dp, kt, T, D, Tp, s);
  for (int64_t i = 0; i < T; ++i) {
    float* si = s + i * Tp;
    mask_keys(si, i, a.window, a.pos);
    softmax_row(si, i + 1, a.stats + 2 * i);
    const int64_t end = block_end(i);
    for (int64_t j = i + 1; j < end; ++j) si[j] = 0.0f;
    if (a.probs) std::copy(si, si + std::min(end, T), a.probs + i * T);
  }
  for (int64_t i0 = 0; i0 < T; i0 += kRows)
    for (int64_t d0 = 0; d0 < D; d0 += kLanes)
      tile<V>(s + i0 * Tp, Tp, 1, v + d0, Dp, std::min(i0 + kRows, T), y + i0 * Dp + d0, Dp);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t d = 0; d < D; ++d) store(a.out + t * a.yrow + q_off + d, y[t * Dp + d]);
}

// P of query head `h` (its stats and probs at `stats`, `probs`) into p (Tp x Tp, zero past each
// row's end up to its block end): the forward's copy where kept, else recomputed from qs and kt.
template <class V>
FRUGAL_INLINE void probabilities(const float* qs, const float* kt, const float* stats, const float* probs, int64_t T,
                                 int64_t D, int64_t window, const int64_t* pos, float* p) {
  const int64_t Tp = padded(T), Dp = padded(D);
  if (probs) {
    for (int64_t i = 0; i < T; ++i) {
      const int64_t end = block_end(i);
      std::copy(probs + i * T, probs + i * T + std::min(end, T), p + i * Tp);
      for (int64_t j = T; j < end; ++j) p[i * Tp + j] = 0.0f;
    }
    return;
  }
  causal_product<V>(qs, Dp, kt, T, D, Tp, p);
  for (int64_t i = 0; i < T; ++i) {
    float* pi = p + i * Tp;
    mask_keys(pi, i, window, pos);
    softmax_row_again(pi, i + 1, stats + 2 * i);
    for (int64_t j = i + 1; j < block_end(i); ++j) pi[j] = 0.0f;
  }
}

template <class V, class Elem>
FRUGAL_INLINE void backward_task(const Task<Elem>& a, float* scratch) {
  const int64_t T = a.T, D = a.D, Tp = padded(T), Dp = padded(D), group = a.H / a.K, g = a.head;
  const int64_t k_off = a.H * D + g * D, v_off = (a.H + a.K) * D + g * D;
  float* k = scratch;        // Tp x Dp, rotated
  float* kt = k + Tp * Dp;   // Dp x Tp, rotated
  float* vt = kt + Dp * Tp;  // Dp x Tp
  float* dk = vt + Dp * Tp;  // Tp x Dp: the group's sum, rotated space
  float* dv = dk + Tp * Dp;  // Tp x Dp
  float* q = dv + Tp * Dp;   // Tp x Dp, rotated
  float* qs = q + Tp * Dp;   // Tp x Dp, rotated, times scale
  float* gq = qs + Tp * Dp;  // Tp x Dp: dy
  float* dq = gq + Tp * Dp;  // Tp x Dp, rotated space
  float* p = dq + Tp * Dp;   // Tp x Tp
  float* ds = p + Tp * Tp;   // Tp x Tp: dP, then dS
  for (int64_t t = 0; t < T; ++t) {
    const Elem* r = a.qkv + t * a.row;
    read_rotated(r + k_off, D, a.cos, a.sin, rope_row(a, t), k + t * Dp);
    for (int64_t d = 0; d < D; ++d) kt[d * Tp + t] = k[t * Dp + d];
    for (int64_t d = 0; d < D; ++d) vt[d * Tp + t] = load(r[v_off + d]);
  }
  std::fill(dk, dk + Tp * Dp, 0.0f);
  std::fill(dv, dv + Tp * Dp, 0.0f);
  for (int64_t m = 0; m < group; ++m) {
    const int64_t h = g * group + m, q_off = h * D;
    const float* stats = a.stats + m * T * 2;
    const float* probs = a.probs ? a.probs + m * T * T : nullptr;
    for (int64_t t = 0; t < T; ++t) {
      read_rotated(a.qkv + t * a.row + q_off, D, a.cos, a.sin, rope_row(a, t), q + t * Dp);
      for (int64_t d = 0; d < D; ++d) qs[t * Dp + d] = q[t * Dp + d] * a.scale;
      for (int64_t d = 0; d < D; ++d) gq[t * Dp + d] = load(a.dy[t * a.yrow + q_off + d]);
    }
    probabilities<V>(qs, kt, stats, probs, T, D, a.window, a.pos, p);
    causal_product<V>(gq, Dp, vt, T, D, Tp, ds);  // dP
    for (int64_t i = 0; i < T; ++i) {
      const float* pi = p + i * Tp;
      float* di = ds + i * Tp;
      const int64_t n = i + 1;
      const float delta = row_dot(pi, di, n);
      for (int64_t j = 0; j < n; ++j) di[j] = pi[j] * (di[j] - delta) * a.scale;
      for (int64_t j = n; j < block_end(i); ++j) di[j] = 0.0f;
    }
    for (int64_t i0 = 0; i0 < T; i0 += kRows) {
      const int64_t j0 = i0;  // rows j0.. of dk / dv: query rows i >= j0 contribute
      for (int64_t d0 = 0; d0 < D; d0 += kLanes) {
        tile<V>(ds + i0 * Tp, Tp, 1, k + d0, Dp, std::min(i0 + kRows, T), dq + i0 * Dp + d0, Dp);
        tile<V, true>(ds + j0 * Tp + j0, 1, Tp, q + j0 * Dp + d0, Dp, T - j0, dk + j0 * Dp + d0, Dp);
        tile<V, true>(p + j0 * Tp + j0, 1, Tp, gq + j0 * Dp + d0, Dp, T - j0, dv + j0 * Dp + d0, Dp);
      }
    }
    for (int64_t t = 0; t < T; ++t)
      write_unrotated(dq + t * Dp, D, a.cos, a.sin, rope_row(a, t), a.out + t * a.row + q_off);
  }
  for (int64_t t = 0; t < T; ++t) {
    write_unrotated(dk + t * Dp, D, a.cos, a.sin, rope_row(a, t), a.out + t * a.row + k_off);
    for (int64_t d = 0; d < D; ++d) store(a.out + t * a.row + v_off + d, dv[t * Dp + d]);
  }
}

int64_t forward_floats(const GqaShape& s) {
  const int64_t Tp = padded(s.seq), Dp = padded(s.head_dim);
  return 4 * Tp * Dp + Tp * Tp + Dp;
}
int64_t backward_floats(const GqaShape& s) {
  const int64_t Tp = padded(s.seq), Dp = padded(s.head_dim);
  return 9 * Tp * Dp + 2 * Tp * Tp;
}

// Runs task(a, scratch) for every (batch, head) unit: query heads forward, kv heads backward.
template <class Elem, class Fn>
void for_each_unit(const Elem* qkv, Elem* out, const Elem* dy, float* stats, float* probs, const GqaShape& s,
                   float scale, int threads, bool backward, Fn fn) {
  if (threads < 1) threads = 1;
  const int64_t per_batch = backward ? s.kv_heads : s.heads;
  const int64_t units = s.batch * per_batch, T = s.seq, D = s.head_dim;
  const int64_t row = (s.heads + 2 * s.kv_heads) * D, yrow = s.heads * D;
  const int64_t scratch_floats = backward ? backward_floats(s) : forward_floats(s);
  std::vector<float> scratch(static_cast<size_t>(threads) * static_cast<size_t>(scratch_floats));
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t u = 0; u < units; ++u) {
    const int64_t b = u / per_batch, head = u % per_batch;
    // The first query head whose stats and probs the task reads or writes.
    const int64_t first_q = backward ? b * s.heads + head * (s.heads / s.kv_heads) : b * s.heads + head;
    Task<Elem> a{qkv + b * T * row,
                 out + b * T * (backward ? row : yrow),
                 backward ? dy + b * T * yrow : nullptr,
                 stats + first_q * T * 2,
                 probs ? probs + first_q * T * T : nullptr,
                 T,
                 D,
                 s.heads,
                 s.kv_heads,
                 row,
                 yrow,
                 head,
                 s.cos,
                 s.sin,
                 s.pos ? s.pos + b * T : nullptr,
                 s.window,
                 scale};
    fn(a, scratch.data() + thread_index() * scratch_floats);
  }
}

}  // namespace

namespace detail {
#ifdef FRUGAL_X86_LEVELS
#define FRUGAL_GQA_ENTRIES(name, Elem, body)                                                      \
  __attribute__((target("arch=x86-64-v4"))) void name##_v4(const Task<Elem>& a, float* scratch) { \
    body<Vec16>(a, scratch);                                                                      \
  }                                                                                               \
  __attribute__((target("arch=x86-64-v3"))) void name##_v3(const Task<Elem>& a, float* scratch) { \
    body<Vec8>(a, scratch);                                                                       \
  }                                                                                               \
  void name##_v1(const Task<Elem>& a, float* scratch) { body<Vec4>(a, scratch); }
#else
#define FRUGAL_GQA_ENTRIES(name, Elem, body) \
  void name##_v1(const Task<Elem>& a, float* scratch) { body<Vec4>(a, scratch); }
#endif
FRUGAL_GQA_ENTRIES(gqa_forward_f32, float, forward_task)
FRUGAL_GQA_ENTRIES(gqa_forward_bf16, uint16_t, forward_task)
FRUGAL_GQA_ENTRIES(gqa_backward_f32, float, backward_task)
FRUGAL_GQA_ENTRIES(gqa_backward_bf16, uint16_t, backward_task)
#undef FRUGAL_GQA_ENTRIES

template <class Elem>
using TaskFn = void (*)(const Task<Elem>&, float*);

template <class Elem>
TaskFn<Elem> pick(TaskFn<Elem> v4, TaskFn<Elem> v3, TaskFn<Elem> v1) {
  const int level = attention_level();
  return level == 4 ? v4 : level == 3 ? v3 : v1;
}
}  // namespace detail

#ifdef FRUGAL_X86_LEVELS
#define FRUGAL_GQA_BEST(name) detail::pick(detail::name##_v4, detail::name##_v3, detail::name##_v1)
#else
#define FRUGAL_GQA_BEST(name) detail::name##_v1
#endif

void gqa_forward_f32(const float* qkv, float* y, float* stats, float* probs, const GqaShape& s, float scale,
                     int threads) {
  for_each_unit(qkv, y, static_cast<const float*>(nullptr), stats, probs, s, scale, threads, false,
                FRUGAL_GQA_BEST(gqa_forward_f32));
}

void gqa_backward_f32(const float* qkv, const float* stats, const float* probs, const float* dy, float* dqkv,
                      const GqaShape& s, float scale, int threads) {
  for_each_unit(qkv, dqkv, dy, const_cast<float*>(stats), const_cast<float*>(probs), s, scale, threads, true,
                FRUGAL_GQA_BEST(gqa_backward_f32));
}

void gqa_forward_bf16(const uint16_t* qkv, uint16_t* y, float* stats, float* probs, const GqaShape& s, float scale,
                      int threads) {
  for_each_unit(qkv, y, static_cast<const uint16_t*>(nullptr), stats, probs, s, scale, threads, false,
                FRUGAL_GQA_BEST(gqa_forward_bf16));
}

void gqa_backward_bf16(const uint16_t* qkv, const float* stats, const float* probs, const uint16_t* dy, uint16_t* dqkv,
                       const GqaShape& s, float scale, int threads) {
  for_each_unit(qkv, dqkv, dy, const_cast<float*>(stats), const_cast<float*>(probs), s, scale, threads, true,
                FRUGAL_GQA_BEST(gqa_backward_bf16));
}

}  // namespace frugal::internal
