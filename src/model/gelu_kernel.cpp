// The fused GELU loops; see internal/gelu_kernel.h.
//
// ATen runs GELU's forward and backward as generic vectorised kernels at the AVX2 level (what
// LibTorch 1.13 dispatches to by default). These loops are written as plain, branch-free
// arithmetic that the compiler vectorises, and each entry point is cloned for AVX-512 (x86-64-v4)
// and AVX2 (x86-64-v3) besides the baseline, the best clone being picked when the program loads.
// Maths (erf by Abramowitz & Stegun 7.1.26, max abs error 1.5e-7, the approximation ATen's own
// vectorised erf uses):
//   Phi(x) = 0.5 * (1 + erf(x / sqrt 2)),   phi(x) = exp(-x^2 / 2) / sqrt(2 pi)
//   erf(z) = 1 - t (a1 + t (a2 + t (a3 + t (a4 + t a5)))) exp(-z^2),   t = 1 / (1 + p z),  z >= 0
// so exp(-x^2 / 2) serves both Phi and phi: one exponential per element, forward or backward.
// The biased form (linear_gelu) adds the bias on the way in and writes GELU' next to GELU, so its
// backward is a product and a column sum with no exponential at all.
#include "model/internal/gelu_kernel.h"

#include "model/internal/simd_math.h"

#include <vector>

namespace frugal::internal {
namespace {

struct PhiPdf {
  float cdf, pdf;
};

FRUGAL_INLINE PhiPdf phi(float x) {
  constexpr float kP = 0.3275911f, kA1 = 0.254829592f, kA2 = -0.284496736f, kA3 = 1.421413741f, kA4 = -1.453152027f,
                  kA5 = 1.061405429f;
  constexpr float kInvSqrt2 = 0.70710678118654752f, kInvSqrt2Pi = 0.39894228040143268f;
  const float e = exp_nonpositive(-0.5f * x * x);
  const float z = std::fabs(x) * kInvSqrt2;
  const float t = 1.0f / (1.0f + kP * z);
  const float poly = t * (kA1 + t * (kA2 + t * (kA3 + t * (kA4 + t * kA5))));
  const float q = 0.5f * poly * e;  // Phi(-|x|)
  return {x >= 0.0f ? 1.0f - q : q, e * kInvSqrt2Pi};
}

}  // namespace

// The loops over one span, cloned per ISA level; the public entry points below split [0, n)
// into one span per thread.
namespace detail {

FRUGAL_ISA_CLONES void gelu_forward_f32(const float* __restrict x, float* __restrict y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * phi(x[i]).cdf;
}

FRUGAL_ISA_CLONES void gelu_backward_f32(const float* __restrict x, const float* __restrict dy, float* __restrict dx,
                                         int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const PhiPdf p = phi(x[i]);
    dx[i] = dy[i] * (p.cdf + x[i] * p.pdf);
  }
}

FRUGAL_ISA_CLONES void gelu_forward_bf16(const uint16_t* __restrict x, uint16_t* __restrict y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = bf16_to_float(x[i]);
    y[i] = float_to_bf16(v * phi(v).cdf);
  }
}

FRUGAL_ISA_CLONES void gelu_backward_bf16(const uint16_t* __restrict x, const uint16_t* __restrict dy,
                                          uint16_t* __restrict dx, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = bf16_to_float(x[i]);
    const PhiPdf p = phi(v);
    dx[i] = float_to_bf16(bf16_to_float(dy[i]) * (p.cdf + v * p.pdf));
  }
}

// One row's columns [0, n) of the biased form: v = u + b; y = GELU(v), d = GELU'(v).
FRUGAL_ISA_CLONES void bias_gelu_forward_row_f32(const float* __restrict u, const float* __restrict b,
                                                 float* __restrict y, float* __restrict d, int64_t n) {
  for (int64_t j = 0; j < n; ++j) {
    const float v = u[j] + b[j];
    const PhiPdf p = phi(v);
    y[j] = v * p.cdf;
    d[j] = p.cdf + v * p.pdf;
  }
}

// Rows [0, rows) of a row-major block with `cols` columns: dx = dy * d, and `sum` = the block's
// column sums of dx.
FRUGAL_ISA_CLONES void bias_gelu_backward_rows_f32(const float* __restrict d, const float* __restrict dy,
                                                   float* __restrict dx, float* __restrict sum, int64_t rows,
                                                   int64_t cols) {
  for (int64_t j = 0; j < cols; ++j) sum[j] = 0.0f;
  for (int64_t r = 0; r < rows; ++r) {
    const float* __restrict dr = d + r * cols;
    const float* __restrict gr = dy + r * cols;
    float* __restrict xr = dx + r * cols;
    for (int64_t j = 0; j < cols; ++j) {
      const float g = gr[j] * dr[j];
      xr[j] = g;
      sum[j] += g;
    }
  }
}

// out[j] = sum over k < blocks of partial[k * cols + j], k in order.
FRUGAL_ISA_CLONES void add_rows_f32(const float* __restrict partial, float* __restrict out, int64_t blocks,
                                    int64_t cols) {
  for (int64_t j = 0; j < cols; ++j) out[j] = 0.0f;
  for (int64_t k = 0; k < blocks; ++k)
    for (int64_t j = 0; j < cols; ++j) out[j] += partial[k * cols + j];
}

}  // namespace detail

void bias_gelu_forward_f32(const float* u, const float* b, float* y, float* d, int64_t rows, int64_t cols,
                           int threads) {
  // Rows are independent: one span of whole rows per thread.
  parallel_spans(
      rows, threads,
      [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r)
          detail::bias_gelu_forward_row_f32(u + r * cols, b, y + r * cols, d + r * cols, cols);
      },
      std::max<int64_t>(1, (int64_t{1} << 14) / std::max<int64_t>(1, cols)), 1);
}

void bias_gelu_backward_f32(const float* d, const float* dy, float* dx, float* db, int64_t rows, int64_t cols,
                            int threads) {
  // Rows go in fixed blocks of kSumRows, each summed on its own (whichever thread takes it), then
  // the blocks' sums are added in block order: the same result for any thread count, and a
  // rounding error that grows with the block length rather than the row count.
  constexpr int64_t kSumRows = 64;
  const int64_t blocks = (rows + kSumRows - 1) / kSumRows;
  std::vector<float> partial(static_cast<size_t>(blocks * cols));
  parallel_spans(
      blocks, threads,
      [&](int64_t k0, int64_t k1) {
        for (int64_t k = k0; k < k1; ++k) {
          const int64_t r0 = k * kSumRows, n = std::min(rows, r0 + kSumRows) - r0;
          detail::bias_gelu_backward_rows_f32(d + r0 * cols, dy + r0 * cols, dx + r0 * cols, partial.data() + k * cols,
                                              n, cols);
        }
      },
      std::max<int64_t>(1, (int64_t{1} << 14) / std::max<int64_t>(1, kSumRows * cols)), 1);
  detail::add_rows_f32(partial.data(), db, blocks, cols);
}

void gelu_forward_f32(const float* x, float* y, int64_t n, int threads) {
  parallel_spans(n, threads, [&](int64_t b, int64_t e) { detail::gelu_forward_f32(x + b, y + b, e - b); });
}

void gelu_backward_f32(const float* x, const float* dy, float* dx, int64_t n, int threads) {
  parallel_spans(n, threads, [&](int64_t b, int64_t e) { detail::gelu_backward_f32(x + b, dy + b, dx + b, e - b); });
}

void gelu_forward_bf16(const uint16_t* x, uint16_t* y, int64_t n, int threads) {
  parallel_spans(n, threads, [&](int64_t b, int64_t e) { detail::gelu_forward_bf16(x + b, y + b, e - b); });
}

void gelu_backward_bf16(const uint16_t* x, const uint16_t* dy, uint16_t* dx, int64_t n, int threads) {
  parallel_spans(n, threads, [&](int64_t b, int64_t e) { detail::gelu_backward_bf16(x + b, dy + b, dx + b, e - b); });
}

}  // namespace frugal::internal
