// The Llama family's fused elementwise loops; see internal/llama_kernel.h.
//
// What they replace: ATen's RMSNorm is five operators forward (pow, mean, add, rsqrt, two muls)
// and the autograd graph of each backward, every one a pass over the activations; its SwiGLU is
// silu, mul and a split of the packed gate/up product, three passes each way plus the saved
// intermediates. Here RMSNorm is one pass forward (a row's sum of squares, then the scaled row)
// keeping one float per row, and one pass backward; SwiGLU reads the packed product in place and
// is one pass each way, recomputing the sigmoid in the backward instead of keeping it.
#include "model/internal/llama_kernel.h"

#include <vector>

#include "model/internal/simd_math.h"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace frugal::internal {
namespace {

constexpr int kLanes = 16;
// Rows of the weight gradient's partial column sums: fixed, so the sums do not depend on the
// thread count (docs: results are the same for any run.threads).
constexpr int64_t kBlockRows = 64;

FRUGAL_INLINE float load(float x) { return x; }
FRUGAL_INLINE float load(uint16_t x) { return bf16_to_float(x); }
FRUGAL_INLINE void store(float* p, float v) { *p = v; }
FRUGAL_INLINE void store(uint16_t* p, float v) { *p = float_to_bf16(v); }

// sigmoid(g) without an exponential of a positive argument.
FRUGAL_INLINE float sigmoid(float g) {
  const float e = exp_nonpositive(-std::fabs(g));
  const float inv = 1.0f / (1.0f + e);
  return g >= 0.0f ? inv : e * inv;
}

template <class In>
FRUGAL_INLINE float sum_of_squares(const In* x, int64_t n) {
  float lane[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int l = 0; l < kLanes; ++l) {
      const float v = load(x[j + l]);
      lane[l] += v * v;
    }
  float s = 0.0f;
  for (; j < n; ++j) {
    const float v = load(x[j]);
    s += v * v;
  }
  for (int l = 0; l < kLanes; ++l) s += lane[l];
  return s;
}

template <class In, class Out>
FRUGAL_INLINE void rms_rows(const In* x, const float* w, Out* y, float* rstd, int64_t r0, int64_t r1, int64_t cols,
                            float eps) {
  for (int64_t r = r0; r < r1; ++r) {
    const In* __restrict xr = x + r * cols;
    Out* __restrict yr = y + r * cols;
    const float rs = 1.0f / std::sqrt(sum_of_squares(xr, cols) / static_cast<float>(cols) + eps);
    rstd[r] = rs;
    for (int64_t j = 0; j < cols; ++j) store(yr + j, (load(xr[j]) * rs) * w[j]);
  }
}

// One block of rows of the backward: dx for its rows, and its partial column sums of dy * xhat.
template <class In, class Grad>
FRUGAL_INLINE void rms_backward_rows(const In* x, const float* w, const float* rstd, const Grad* dy, In* dx,
                                     float* partial, int64_t r0, int64_t r1, int64_t cols) {
  for (int64_t j = 0; j < cols; ++j) partial[j] = 0.0f;
  const float inv_cols = 1.0f / static_cast<float>(cols);
  for (int64_t r = r0; r < r1; ++r) {
    const In* __restrict xr = x + r * cols;
    const Grad* __restrict gr = dy + r * cols;
    In* __restrict dxr = dx + r * cols;
    const float rs = rstd[r];
    float lane[kLanes] = {};
    int64_t j = 0;
    for (; j + kLanes <= cols; j += kLanes)
      for (int l = 0; l < kLanes; ++l) lane[l] += load(gr[j + l]) * w[j + l] * (load(xr[j + l]) * rs);
    float dot = 0.0f;
    for (; j < cols; ++j) dot += load(gr[j]) * w[j] * (load(xr[j]) * rs);
    for (int l = 0; l < kLanes; ++l) dot += lane[l];
    const float c = dot * inv_cols;
    for (j = 0; j < cols; ++j) {
      const float xhat = load(xr[j]) * rs;
      const float g = load(gr[j]);
      store(dxr + j, rs * (g * w[j] - xhat * c));
      partial[j] += g * xhat;
    }
  }
}

template <class In, class Out>
FRUGAL_INLINE void swiglu_rows(const In* gu, Out* act, int64_t r0, int64_t r1, int64_t cols) {
  for (int64_t r = r0; r < r1; ++r) {
    const In* __restrict g = gu + r * 2 * cols;
    const In* __restrict u = g + cols;
    Out* __restrict a = act + r * cols;
    for (int64_t j = 0; j < cols; ++j) {
      const float gj = load(g[j]);
      store(a + j, gj * sigmoid(gj) * load(u[j]));
    }
  }
}

template <class T>
FRUGAL_INLINE void swiglu_backward_rows(const T* gu, const T* dact, T* dgu, int64_t r0, int64_t r1, int64_t cols) {
  for (int64_t r = r0; r < r1; ++r) {
    const T* __restrict g = gu + r * 2 * cols;
    const T* __restrict u = g + cols;
    const T* __restrict d = dact + r * cols;
    T* __restrict dg = dgu + r * 2 * cols;
    T* __restrict du = dg + cols;
    for (int64_t j = 0; j < cols; ++j) {
      const float gj = load(g[j]), uj = load(u[j]), dj = load(d[j]);
      const float s = sigmoid(gj);
      store(dg + j, dj * uj * s * (1.0f + gj * (1.0f - s)));
      store(du + j, dj * gj * s);
    }
  }
}

}  // namespace

// The row loops over one span of rows, cloned per ISA level.
namespace detail {
FRUGAL_ISA_CLONES void rms_f32(const float* x, const float* w, float* y, float* rstd, int64_t r0, int64_t r1,
                               int64_t cols, float eps) {
  rms_rows(x, w, y, rstd, r0, r1, cols, eps);
}
FRUGAL_ISA_CLONES void rms_bf16(const uint16_t* x, const float* w, uint16_t* y, float* rstd, int64_t r0, int64_t r1,
                                int64_t cols, float eps) {
  rms_rows(x, w, y, rstd, r0, r1, cols, eps);
}
FRUGAL_ISA_CLONES void rms_f32_bf16(const float* x, const float* w, uint16_t* y, float* rstd, int64_t r0, int64_t r1,
                                    int64_t cols, float eps) {
  rms_rows(x, w, y, rstd, r0, r1, cols, eps);
}
FRUGAL_ISA_CLONES void rms_back_f32_f32(const float* x, const float* w, const float* rstd, const float* dy, float* dx,
                                        float* partial, int64_t r0, int64_t r1, int64_t cols) {
  rms_backward_rows(x, w, rstd, dy, dx, partial, r0, r1, cols);
}
FRUGAL_ISA_CLONES void rms_back_f32_bf16(const float* x, const float* w, const float* rstd, const uint16_t* dy,
                                         float* dx, float* partial, int64_t r0, int64_t r1, int64_t cols) {
  rms_backward_rows(x, w, rstd, dy, dx, partial, r0, r1, cols);
}
FRUGAL_ISA_CLONES void rms_back_bf16_bf16(const uint16_t* x, const float* w, const float* rstd, const uint16_t* dy,
                                          uint16_t* dx, float* partial, int64_t r0, int64_t r1, int64_t cols) {
  rms_backward_rows(x, w, rstd, dy, dx, partial, r0, r1, cols);
}
FRUGAL_ISA_CLONES void sum_blocks(const float* partial, float* dw, int64_t blocks, int64_t cols, int64_t j0,
                                  int64_t j1) {
  for (int64_t j = j0; j < j1; ++j) dw[j] = 0.0f;
  for (int64_t b = 0; b < blocks; ++b)
    for (int64_t j = j0; j < j1; ++j) dw[j] += partial[b * cols + j];
}
FRUGAL_ISA_CLONES void swiglu_f32(const float* gu, float* act, int64_t r0, int64_t r1, int64_t cols) {
  swiglu_rows(gu, act, r0, r1, cols);
}
FRUGAL_ISA_CLONES void swiglu_bf16(const uint16_t* gu, uint16_t* act, int64_t r0, int64_t r1, int64_t cols) {
  swiglu_rows(gu, act, r0, r1, cols);
}
FRUGAL_ISA_CLONES void swiglu_back_f32(const float* gu, const float* dact, float* dgu, int64_t r0, int64_t r1,
                                       int64_t cols) {
  swiglu_backward_rows(gu, dact, dgu, r0, r1, cols);
}
FRUGAL_ISA_CLONES void swiglu_back_bf16(const uint16_t* gu, const uint16_t* dact, uint16_t* dgu, int64_t r0, int64_t r1,
                                        int64_t cols) {
  swiglu_backward_rows(gu, dact, dgu, r0, r1, cols);
}
}  // namespace detail

namespace {
// fn(r0, r1) over spans of rows, about 16K elements or more each.
template <class Fn>
void over_rows(int64_t rows, int64_t cols, int threads, Fn fn) {
  parallel_spans(rows, threads, fn, std::max<int64_t>(1, (1 << 14) / std::max<int64_t>(cols, 1)), 1);
}

template <class In, class Grad, class Fn>
void rms_backward_blocks(const In* x, const float* w, const float* rstd, const Grad* dy, In* dx, float* dw,
                         int64_t rows, int64_t cols, int threads, Fn rows_fn) {
  const int64_t blocks = (rows + kBlockRows - 1) / kBlockRows;
  std::vector<float> partial(static_cast<size_t>(std::max<int64_t>(blocks, 1) * cols));
  if (threads < 1) threads = 1;
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t b = 0; b < blocks; ++b)
    rows_fn(x, w, rstd, dy, dx, partial.data() + b * cols, b * kBlockRows, std::min(rows, (b + 1) * kBlockRows), cols);
  parallel_spans(
      cols, threads, [&](int64_t j0, int64_t j1) { detail::sum_blocks(partial.data(), dw, blocks, cols, j0, j1); },
      std::max<int64_t>(64, (1 << 14) / std::max<int64_t>(blocks, 1)));
}
}  // namespace

void rms_norm_forward_f32(const float* x, const float* w, float* y, float* rstd, int64_t rows, int64_t cols, float eps,
                          int threads) {
  over_rows(rows, cols, threads, [&](int64_t a, int64_t b) { detail::rms_f32(x, w, y, rstd, a, b, cols, eps); });
}

void rms_norm_forward_bf16(const uint16_t* x, const float* w, uint16_t* y, float* rstd, int64_t rows, int64_t cols,
                           float eps, int threads) {
  over_rows(rows, cols, threads, [&](int64_t a, int64_t b) { detail::rms_bf16(x, w, y, rstd, a, b, cols, eps); });
}

void rms_norm_forward_f32_bf16(const float* x, const float* w, uint16_t* y, float* rstd, int64_t rows, int64_t cols,
                               float eps, int threads) {
  over_rows(rows, cols, threads, [&](int64_t a, int64_t b) { detail::rms_f32_bf16(x, w, y, rstd, a, b, cols, eps); });
}

void rms_norm_backward(const float* x_f32, const uint16_t* x_bf16, const float* w, const float* rstd,
                       const float* dy_f32, const uint16_t* dy_bf16, float* dx_f32, uint16_t* dx_bf16, float* dw,
                       int64_t rows, int64_t cols, int threads) {
  if (x_f32 && dy_f32) {
    rms_backward_blocks(x_f32, w, rstd, dy_f32, dx_f32, dw, rows, cols, threads, detail::rms_back_f32_f32);
  } else if (x_f32) {
    rms_backward_blocks(x_f32, w, rstd, dy_bf16, dx_f32, dw, rows, cols, threads, detail::rms_back_f32_bf16);
  } else {
    rms_backward_blocks(x_bf16, w, rstd, dy_bf16, dx_bf16, dw, rows, cols, threads, detail::rms_back_bf16_bf16);
  }
}

void swiglu_forward_f32(const float* gate_up, float* act, int64_t rows, int64_t cols, int threads) {
  over_rows(rows, cols, threads, [&](int64_t a, int64_t b) { detail::swiglu_f32(gate_up, act, a, b, cols); });
}

void swiglu_forward_bf16(const uint16_t* gate_up, uint16_t* act, int64_t rows, int64_t cols, int threads) {
  over_rows(rows, cols, threads, [&](int64_t a, int64_t b) { detail::swiglu_bf16(gate_up, act, a, b, cols); });
}

void swiglu_backward_f32(const float* gate_up, const float* dact, float* dgu, int64_t rows, int64_t cols, int threads) {
  over_rows(rows, cols, threads,
            [&](int64_t a, int64_t b) { detail::swiglu_back_f32(gate_up, dact, dgu, a, b, cols); });
}

void swiglu_backward_bf16(const uint16_t* gate_up, const uint16_t* dact, uint16_t* dgu, int64_t rows, int64_t cols,
                          int threads) {
  over_rows(rows, cols, threads,
            [&](int64_t a, int64_t b) { detail::swiglu_back_bf16(gate_up, dact, dgu, a, b, cols); });
}

}  // namespace frugal::internal
