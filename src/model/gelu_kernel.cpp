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
#include "model/internal/gelu_kernel.h"

#include <cmath>
#include <cstring>

// "arch=x86-64-vN" clones need GCC 12 (tested); other compilers build the baseline loop only.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12
#define FRUGAL_GELU_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define FRUGAL_GELU_CLONES
#endif
#define FRUGAL_INLINE inline __attribute__((always_inline))

namespace frugal::internal {
namespace {

// exp(a) for a <= 0: Cody-Waite reduction to r in [-ln2/2, ln2/2], degree-7 Taylor polynomial
// (relative error < 1e-8 before rounding), scaled by 2^n built in the exponent bits. Arguments
// below -87 (exp < 1.7e-38, the smallest normal float) give 0. NaN passes through.
FRUGAL_INLINE float exp_nonpositive(float in) {
  const float a = in < -87.0f ? -87.0f : in;
  const float n = std::floor(a * 1.44269504088896341f + 0.5f);
  float r = a - n * 0.693145751953125f;
  r = r - n * 1.42860682030941723e-6f;
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return in < -87.0f ? 0.0f : p * scale;
}

struct PhiPdf {
  float cdf, pdf;
};

FRUGAL_INLINE PhiPdf phi(float x) {
  constexpr float kP = 0.3275911f, kA1 = 0.254829592f, kA2 = -0.284496736f, kA3 = 1.421413741f,
                  kA4 = -1.453152027f, kA5 = 1.061405429f;
  constexpr float kInvSqrt2 = 0.70710678118654752f, kInvSqrt2Pi = 0.39894228040143268f;
  const float e = exp_nonpositive(-0.5f * x * x);
  const float z = std::fabs(x) * kInvSqrt2;
  const float t = 1.0f / (1.0f + kP * z);
  const float poly = t * (kA1 + t * (kA2 + t * (kA3 + t * (kA4 + t * kA5))));
  const float q = 0.5f * poly * e;  // Phi(-|x|)
  return {x >= 0.0f ? 1.0f - q : q, e * kInvSqrt2Pi};
}

FRUGAL_INLINE float bf16_to_float(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// Round to nearest even, as c10::BFloat16 does; NaN stays a (quiet) NaN.
FRUGAL_INLINE uint16_t float_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  return static_cast<uint16_t>(f != f ? 0x7fc0u : rounded);
}

}  // namespace

FRUGAL_GELU_CLONES void gelu_forward_f32(const float* __restrict x, float* __restrict y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * phi(x[i]).cdf;
}

FRUGAL_GELU_CLONES void gelu_backward_f32(const float* __restrict x, const float* __restrict dy,
                                          float* __restrict dx, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const PhiPdf p = phi(x[i]);
    dx[i] = dy[i] * (p.cdf + x[i] * p.pdf);
  }
}

FRUGAL_GELU_CLONES void gelu_forward_bf16(const uint16_t* __restrict x, uint16_t* __restrict y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = bf16_to_float(x[i]);
    y[i] = float_to_bf16(v * phi(v).cdf);
  }
}

FRUGAL_GELU_CLONES void gelu_backward_bf16(const uint16_t* __restrict x, const uint16_t* __restrict dy,
                                           uint16_t* __restrict dx, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = bf16_to_float(x[i]);
    const PhiPdf p = phi(v);
    dx[i] = float_to_bf16(bf16_to_float(dy[i]) * (p.cdf + v * p.pdf));
  }
}

}  // namespace frugal::internal
