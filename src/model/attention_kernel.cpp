// The causal self-attention loops; see internal/attention_kernel.h.
//
// What they replace: ATen's path copies q, k and v out of the qkv projection into (B*H, T, D)
// blocks, runs one small OpenBLAS call per head for q k^T and another for p v (a 64x64 by 64x32
// product is mostly call overhead and packing), computes the masked upper half only to throw it
// away, and copies y back into (B, T, C). Here each (batch, head) pair is one task: its q, k, v
// are read strided from the projection into float scratch (k and v also transposed where a
// product wants them), the products skip the tiles above the diagonal, and y / dqkv are written
// straight into their final layouts. Float heads whose size is a multiple of 16 and whose length
// is a multiple of 8 (the common shapes) skip most scratch copies: the tiles read v, q, k and dy
// where they stand and write y and dqkv in place (the same arithmetic, so the same bits). The
// forward always keeps two floats per query row (the row max and 1 / row sum of the softmax);
// the T x T softmax itself, which ATen's path keeps for the backward, only when the caller asks
// (fused_attention.cpp: while it is no larger than q, k, v). Without it the backward recomputes
// the scores and probabilities with the same tiles and the same arithmetic as the forward (as
// FlashAttention does), at the cost of one more q k^T product, so a long context stores no
// (B, H, T, T) tensor per layer.
//
// Every product is one register tile: 8 rows by 16 columns, accumulated over the shared
// dimension in 8 vector registers and stored once, so no accumulator goes through memory inside
// the loop. The tile is written per vector width: one 16-float register per row on AVX-512 (8
// rows at once), two 8-float registers per row on AVX2 (4 rows at a time, as 8 accumulators, 2
// loads and a broadcast fit AVX2's 16 registers), four 4-float ones elsewhere (2 rows). Each
// entry point is compiled once per x86 level and the best is picked at the first call.
// Scratch rows and columns are padded to multiples of 16 so tiles never need a narrower tail.
// Row reductions (max, sum, the backward's row dot) use 16 fixed partial sums. Results do not
// depend on how many threads ran: one task per head, always the same arithmetic in the same
// order (each output element is one sum over the shared dimension in index order, whatever
// the vector width).
//
// Packed rows (AttentionShape::pos): keys before the query's document start are set to -inf
// before the softmax, so they get probability 0 and no gradient (the tiles still multiply their
// zeros: no fewer products, one compare per score).
//
// Maths per head, S = scale q k^T (j <= i only), P = softmax_rows(S), y = P v; backward:
//   dv = P^T dy,  dP = dy v^T,  dS = P * (dP - rowsum(P * dP)),  dq = scale dS k,  dk = scale dS^T q.
#include "model/internal/attention_kernel.h"

#include <algorithm>
#include <atomic>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "model/internal/attention_tiles.h"
#include "model/internal/simd_math.h"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace frugal::internal {
namespace {
using namespace tiles;  // NOLINT(build/namespaces): the shared tiles, written for these loops
// Pointers of one (batch, head) task. Rows of qkv are 3C apart (q at +0, k at +C, v at +2C
// from the head's first column); rows of y / dy are C apart; stats is the head's T x 2 block,
// probs its T x T block or null.
template <class Elem>
struct Head {
  const Elem* qkv;
  Elem* out;  // y (forward) or dqkv (backward)
  const Elem* dy;
  float* stats;        // written by the forward, read by the backward
  float* probs;        // likewise where not null
  const int64_t* pos;  // the row's positions inside their documents, or null
  int64_t T, D, C;
  float scale;
};

// Float heads whose size is a multiple of the tile width and whose length is a multiple of the
// tile height are read and written in place (qkv, dy, y, dqkv rows), without scratch copies: a
// tile then never reaches past the head's own columns or past the last row.
template <class Elem>
FRUGAL_INLINE bool in_place(const Head<Elem>& h) {
  return std::is_same<Elem, float>::value && h.D % kLanes == 0 && h.T % kRows == 0;
}

// The same pointer as float where Elem is float; null otherwise (in_place is false then, so the
// null is never used).
template <class Elem>
FRUGAL_INLINE auto float_view(Elem* p) {
  using F = std::conditional_t<std::is_const<Elem>::value, const float, float>;
  if constexpr (std::is_same<std::remove_const_t<Elem>, float>::value) {
    return static_cast<F*>(p);
  } else {
    return static_cast<F*>(nullptr);
  }
}

template <class V, class Elem>
FRUGAL_INLINE void forward_head(const Head<Elem>& h, float* scratch) {
  const int64_t T = h.T, D = h.D, C = h.C, row = 3 * C, Tp = padded(T), Dp = padded(D);
  float* q = scratch;       // Tp x Dp, times scale
  float* kt = q + Tp * Dp;  // Dp x Tp
  float* v = kt + Dp * Tp;  // Tp x Dp
  float* y = v + Tp * Dp;   // Tp x Dp
  float* s = y + Tp * Dp;   // Tp x Tp: scores, then probabilities (0 above the diagonal)
  const float scale = h.scale;
  const bool direct = in_place(h);
  for (int64_t t = 0; t < T; ++t) {
    const Elem* __restrict r = h.qkv + t * row;
    float* __restrict qt = q + t * Dp;
    float* __restrict vt = v + t * Dp;
    for (int64_t d = 0; d < D; ++d) qt[d] = load(r[d]) * scale;
    if (!direct)
      for (int64_t d = 0; d < D; ++d) vt[d] = load(r[2 * C + d]);
    for (int64_t d = 0; d < D; ++d) kt[d * Tp + t] = load(r[C + d]);
  }
  causal_product<V>(q, Dp, kt, T, D, Tp, s);
  for (int64_t i = 0; i < T; ++i) {
    float* si = s + i * Tp;
    mask_before(si, document_start(h.pos, i));
    softmax_row(si, i + 1, h.stats + 2 * i);
    const int64_t end = block_end(i);
    for (int64_t j = i + 1; j < end; ++j) si[j] = 0.0f;
    // The backward's copy: the row up to its block's end (the rest of probs is never read).
    if (h.probs) std::copy(si, si + std::min(end, T), h.probs + i * T);
  }
  // y = P v; in place, v is read from qkv and y written to its place in (B, T, C).
  const float* vsrc = direct ? float_view(h.qkv) + 2 * C : v;
  float* yd = direct ? float_view(h.out) : y;
  const int64_t ldv = direct ? row : Dp, ldy = direct ? C : Dp;
  for (int64_t i0 = 0; i0 < T; i0 += kRows)
    for (int64_t d0 = 0; d0 < D; d0 += kLanes)
      tile<V>(s + i0 * Tp, Tp, 1, vsrc + d0, ldv, std::min(i0 + kRows, T), yd + i0 * ldy + d0, ldy);
  if (direct) return;
  for (int64_t t = 0; t < T; ++t) {
    Elem* __restrict out = h.out + t * C;
    const float* __restrict yt = y + t * Dp;
    for (int64_t d = 0; d < D; ++d) store(out + d, yt[d]);
  }
}

template <class V, class Elem>
FRUGAL_INLINE void backward_head(const Head<Elem>& h, float* scratch) {
  const int64_t T = h.T, D = h.D, C = h.C, row = 3 * C, Tp = padded(T), Dp = padded(D);
  float* q = scratch;        // Tp x Dp
  float* qs = q + Tp * Dp;   // Tp x Dp: q times scale, as the forward used it
  float* k = qs + Tp * Dp;   // Tp x Dp
  float* kt = k + Tp * Dp;   // Dp x Tp
  float* vt = kt + Dp * Tp;  // Dp x Tp
  float* g = vt + Dp * Tp;   // Tp x Dp: dy
  float* dq = g + Tp * Dp;   // Tp x Dp each
  float* dk = dq + Tp * Dp;
  float* dv = dk + Tp * Dp;
  float* p = dv + Tp * Dp;  // Tp x Tp: P (0 above the diagonal), unless read from probs in place
  float* ds = p + Tp * Tp;  // Tp x Tp: dP, then dS (0 above the diagonal)
  const float scale = h.scale;
  const bool direct = in_place(h);
  const bool recompute = h.probs == nullptr;
  for (int64_t t = 0; t < T; ++t) {
    const Elem* __restrict r = h.qkv + t * row;
    const Elem* __restrict gr = h.dy + t * C;
    float* __restrict qt = q + t * Dp;
    float* __restrict qst = qs + t * Dp;
    float* __restrict kr = k + t * Dp;
    float* __restrict gt = g + t * Dp;
    if (!direct) {  // in place, q, k and dy are read from qkv and dy themselves
      for (int64_t d = 0; d < D; ++d) qt[d] = load(r[d]);
      for (int64_t d = 0; d < D; ++d) kr[d] = load(r[C + d]);
      for (int64_t d = 0; d < D; ++d) gt[d] = load(gr[d]);
    }
    if (recompute) {
      for (int64_t d = 0; d < D; ++d) qst[d] = load(r[d]) * scale;
      for (int64_t d = 0; d < D; ++d) kt[d * Tp + t] = load(r[C + d]);
    }
    for (int64_t d = 0; d < D; ++d) vt[d * Tp + t] = load(r[2 * C + d]);
  }
  // P: the forward's probs in place where every block is whole (T a multiple of kRows: no tile
  // reads past row or column T), else copied up to each row's block end (zeros past T).
  int64_t ldp = Tp;
  if (h.probs && T % kRows == 0) {
    p = h.probs;
    ldp = T;
  } else if (h.probs) {
    for (int64_t i = 0; i < T; ++i) {
      const int64_t end = block_end(i);
      std::copy(h.probs + i * T, h.probs + i * T + std::min(end, T), p + i * Tp);
      for (int64_t j = T; j < end; ++j) p[i * Tp + j] = 0.0f;
    }
  } else {
    causal_product<V>(qs, Dp, kt, T, D, Tp, p);  // S, as in the forward
    for (int64_t i = 0; i < T; ++i) {
      float* pi = p + i * Tp;
      mask_before(pi, document_start(h.pos, i));
      softmax_row_again(pi, i + 1, h.stats + 2 * i);
      for (int64_t j = i + 1; j < block_end(i); ++j) pi[j] = 0.0f;
    }
  }
  // In place, q, k and dy are read from qkv and dy, and dq, dk, dv written to their places in
  // dqkv; otherwise all go through the scratch blocks.
  const float* qsrc = direct ? float_view(h.qkv) : q;
  const float* ksrc = direct ? float_view(h.qkv) + C : k;
  const float* gsrc = direct ? float_view(h.dy) : g;
  float* dqd = direct ? float_view(h.out) : dq;
  float* dkd = direct ? float_view(h.out) + C : dk;
  float* dvd = direct ? float_view(h.out) + 2 * C : dv;
  const int64_t ldqk = direct ? row : Dp, ldg = direct ? C : Dp, ldo = direct ? row : Dp;
  causal_product<V>(gsrc, ldg, vt, T, D, Tp, ds);  // dP
  for (int64_t i = 0; i < T; ++i) {
    const float* pi = p + i * ldp;
    float* di = ds + i * Tp;
    const int64_t n = i + 1;
    const float delta = row_dot(pi, di, n);
    for (int64_t j = 0; j < n; ++j) di[j] = pi[j] * (di[j] - delta) * h.scale;
    for (int64_t j = n; j < block_end(i); ++j) di[j] = 0.0f;
  }
  for (int64_t i0 = 0; i0 < T; i0 += kRows) {
    const int64_t j0 = i0;  // rows j0.. of dk / dv: query rows i >= j0 contribute
    for (int64_t d0 = 0; d0 < D; d0 += kLanes) {
      tile<V>(ds + i0 * Tp, Tp, 1, ksrc + d0, ldqk, std::min(i0 + kRows, T), dqd + i0 * ldo + d0, ldo);
      tile<V>(ds + j0 * Tp + j0, 1, Tp, qsrc + j0 * ldqk + d0, ldqk, T - j0, dkd + j0 * ldo + d0, ldo);
      tile<V>(p + j0 * ldp + j0, 1, ldp, gsrc + j0 * ldg + d0, ldg, T - j0, dvd + j0 * ldo + d0, ldo);
    }
  }
  if (direct) return;
  for (int64_t t = 0; t < T; ++t) {
    Elem* __restrict out = h.out + t * row;
    const float* __restrict a = dq + t * Dp;
    const float* __restrict b = dk + t * Dp;
    const float* __restrict c = dv + t * Dp;
    for (int64_t d = 0; d < D; ++d) store(out + d, a[d]);
    for (int64_t d = 0; d < D; ++d) store(out + C + d, b[d]);
    for (int64_t d = 0; d < D; ++d) store(out + 2 * C + d, c[d]);
  }
}

// Runs task(head, scratch) for every (batch, head) pair over `threads` threads, each with its
// own scratch of `scratch_floats` (allocated here, before any thread starts, so a failed
// allocation throws in the caller's thread).
template <class Elem, class Task>
void for_each_head(const Elem* qkv, Elem* out, const Elem* dy, float* stats, float* probs, const AttentionShape& s,
                   float scale, int threads, int64_t scratch_floats, Task task) {
  if (threads < 1) threads = 1;
  const int64_t C = s.heads * s.head_dim, units = s.batch * s.heads, T = s.seq;
  std::vector<float> scratch(static_cast<size_t>(threads) * static_cast<size_t>(scratch_floats));
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t u = 0; u < units; ++u) {
    const int64_t b = u / s.heads, hd = (u % s.heads) * s.head_dim;
    const bool backward = dy != nullptr;
    Head<Elem> h{qkv + b * T * 3 * C + hd,
                 out + b * T * (backward ? 3 * C : C) + hd,
                 backward ? dy + b * T * C + hd : nullptr,
                 stats + u * T * 2,
                 probs ? probs + u * T * T : nullptr,
                 s.pos ? s.pos + b * T : nullptr,
                 T,
                 s.head_dim,
                 C,
                 scale};
    task(h, scratch.data() + thread_index() * scratch_floats);
  }
}

int64_t forward_scratch(const AttentionShape& s) {
  const int64_t Tp = padded(s.seq), Dp = padded(s.head_dim);
  return 4 * Tp * Dp + Tp * Tp;
}
int64_t backward_scratch(const AttentionShape& s) {
  const int64_t Tp = padded(s.seq), Dp = padded(s.head_dim);
  return 7 * Tp * Dp + 2 * Dp * Tp + 2 * Tp * Tp;
}

}  // namespace

// One entry point per element type, direction and x86 level; the OpenMP loop above stays
// outside them. (Not target_clones: the register tile differs per level, which a clone cannot
// see at compile time.)
namespace detail {
#ifdef FRUGAL_X86_LEVELS
#define FRUGAL_LEVEL_ENTRIES(name, Elem, body)                                                    \
  __attribute__((target("arch=x86-64-v4"))) void name##_v4(const Head<Elem>& h, float* scratch) { \
    body<Vec16>(h, scratch);                                                                      \
  }                                                                                               \
  __attribute__((target("arch=x86-64-v3"))) void name##_v3(const Head<Elem>& h, float* scratch) { \
    body<Vec8>(h, scratch);                                                                       \
  }                                                                                               \
  void name##_v1(const Head<Elem>& h, float* scratch) { body<Vec4>(h, scratch); }
#else
#define FRUGAL_LEVEL_ENTRIES(name, Elem, body) \
  void name##_v1(const Head<Elem>& h, float* scratch) { body<Vec4>(h, scratch); }
#endif
FRUGAL_LEVEL_ENTRIES(forward_head_f32, float, forward_head)
FRUGAL_LEVEL_ENTRIES(forward_head_bf16, uint16_t, forward_head)
FRUGAL_LEVEL_ENTRIES(backward_head_f32, float, backward_head)
FRUGAL_LEVEL_ENTRIES(backward_head_bf16, uint16_t, backward_head)
#undef FRUGAL_LEVEL_ENTRIES

int detected_level() {
#ifdef FRUGAL_X86_LEVELS
  return __builtin_cpu_supports("x86-64-v4") ? 4 : __builtin_cpu_supports("x86-64-v3") ? 3 : 1;
#else
  return 1;
#endif
}

std::atomic<int>& level_in_use() {
  static std::atomic<int> level{detected_level()};
  return level;
}

template <class Elem>
using HeadFn = void (*)(const Head<Elem>&, float*);

template <class Elem>
HeadFn<Elem> pick(HeadFn<Elem> v4, HeadFn<Elem> v3, HeadFn<Elem> v1) {
  const int level = level_in_use().load(std::memory_order_relaxed);
  return level == 4 ? v4 : level == 3 ? v3 : v1;
}
}  // namespace detail

std::vector<int> attention_levels() {
  std::vector<int> out{1};
  const int best = detail::detected_level();
  if (best >= 3) out.push_back(3);
  if (best >= 4) out.push_back(4);
  return out;
}

int attention_level() { return detail::level_in_use().load(); }

void set_attention_level(int level) {
  const auto ok = attention_levels();
  if (std::find(ok.begin(), ok.end(), level) == ok.end()) {
    std::string listed;
    for (int l : ok) listed += (listed.empty() ? "" : ", ") + std::to_string(l);
    throw std::invalid_argument("attention kernel: x86-64 level " + std::to_string(level) +
                                " is not available on this CPU (available: " + listed + ")");
  }
  detail::level_in_use().store(level);
}

#ifdef FRUGAL_X86_LEVELS
#define FRUGAL_BEST(name) detail::pick(detail::name##_v4, detail::name##_v3, detail::name##_v1)
#else
#define FRUGAL_BEST(name) detail::name##_v1
#endif

void attention_forward_f32(const float* qkv, float* y, float* stats, float* probs, const AttentionShape& shape,
                           float scale, int threads) {
  for_each_head(qkv, y, static_cast<const float*>(nullptr), stats, probs, shape, scale, threads, forward_scratch(shape),
                FRUGAL_BEST(forward_head_f32));
}

void attention_backward_f32(const float* qkv, const float* stats, const float* probs, const float* dy, float* dqkv,
                            const AttentionShape& shape, float scale, int threads) {
  for_each_head(qkv, dqkv, dy, const_cast<float*>(stats), const_cast<float*>(probs), shape, scale, threads,
                backward_scratch(shape), FRUGAL_BEST(backward_head_f32));
}

void attention_forward_bf16(const uint16_t* qkv, uint16_t* y, float* stats, float* probs, const AttentionShape& shape,
                            float scale, int threads) {
  for_each_head(qkv, y, static_cast<const uint16_t*>(nullptr), stats, probs, shape, scale, threads,
                forward_scratch(shape), FRUGAL_BEST(forward_head_bf16));
}

void attention_backward_bf16(const uint16_t* qkv, const float* stats, const float* probs, const uint16_t* dy,
                             uint16_t* dqkv, const AttentionShape& shape, float scale, int threads) {
  for_each_head(qkv, dqkv, dy, const_cast<float*>(stats), const_cast<float*>(probs), shape, scale, threads,
                backward_scratch(shape), FRUGAL_BEST(backward_head_bf16));
}

}  // namespace frugal::internal
