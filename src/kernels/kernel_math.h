// The arithmetic frugal's CUDA kernels share with the CPU tests: each function here is what one
// thread computes for one element or one merge step, compiled for the device by nvcc and for the
// host by the C++ compiler, so tests/kernels/kernel_math_test.cpp checks it against ATen on a
// machine without a GPU. No CUDA headers: plain C++17 plus the __host__ __device__ marks.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define FRUGAL_HD __host__ __device__ __forceinline__
#else
#define FRUGAL_HD inline
#endif

namespace frugal::kernels {

// bfloat16 <-> float by their bits. The conversion down rounds to nearest, ties to even, and keeps
// NaN a (quiet) NaN, as c10::BFloat16 and __float2bfloat16_rn do.
FRUGAL_HD float bf16_bits_to_float(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

FRUGAL_HD uint16_t float_to_bf16_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);  // NaN stays NaN
  const uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>((u + rounding) >> 16);
}

// A running softmax denominator: the largest logit seen and the sum of exp(logit - max). Two
// partial states merge into the state of their union in either order (up to rounding).
struct SoftmaxState {
  float max;
  float sum;
};

FRUGAL_HD SoftmaxState softmax_empty() { return {-INFINITY, 0.0f}; }

FRUGAL_HD SoftmaxState softmax_add(SoftmaxState s, float x) {
  if (x > s.max) return {x, s.sum * expf(s.max - x) + 1.0f};
  if (x == -INFINITY) return s;  // adds exp(-inf) = 0 (and -inf - -inf would be NaN)
  return {s.max, s.sum + expf(x - s.max)};
}

FRUGAL_HD SoftmaxState softmax_merge(SoftmaxState a, SoftmaxState b) {
  if (b.max == -INFINITY) return a;
  if (a.max == -INFINITY) return b;
  const float m = a.max > b.max ? a.max : b.max;
  return {m, a.sum * expf(a.max - m) + b.sum * expf(b.max - m)};
}

// log(sum(exp(x))) of everything added to the state.
FRUGAL_HD float softmax_logsumexp(SoftmaxState s) { return s.max + logf(s.sum); }

// d(mean loss)/d(logit) for one element: (softmax - onehot) * scale, where scale is the upstream
// gradient over the number of rows whose target counts.
FRUGAL_HD float classifier_dlogit(float logit, float lse, bool is_target, float scale) {
  return (expf(logit - lse) - (is_target ? 1.0f : 0.0f)) * scale;
}

// LayerNorm's input gradient for one element of a row:
//   dx = rstd * (g - mean(g) - xhat * mean(g * xhat)),  g = dout * weight, xhat = (x - mean) * rstd
// with mean_g and mean_gx the row's two means.
FRUGAL_HD float layernorm_dx(float g, float xhat, float mean_g, float mean_gx, float rstd) {
  return rstd * (g - mean_g - xhat * mean_gx);
}

// GELU and its derivative at x, the exact (erf) form or GPT-2's tanh approximation, in ATen's
// arithmetic (its gelu and gelu_backward kernels):
//   exact: x * Phi(x);  Phi(x) + x * phi(x)
//   tanh:  0.5 x (1 + tanh(z)), z = sqrt(2/pi) (x + 0.044715 x^3);
//          0.5 (1 + tanh(z)) + 0.5 x (1 - tanh(z)^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2)
FRUGAL_HD float gelu_value(float x, bool tanh_form) {
  if (tanh_form) {
    const float inner = 0.7978845608028654f * (x + 0.044715f * x * x * x);
    return 0.5f * x * (1.0f + tanhf(inner));
  }
  return x * 0.5f * (1.0f + erff(x * 0.7071067811865476f));
}

FRUGAL_HD float gelu_derivative(float x, bool tanh_form) {
  if (tanh_form) {
    const float x_sq = x * x;
    const float t = tanhf(0.7978845608028654f * (x + 0.044715f * x_sq * x));
    return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * 0.7978845608028654f * (1.0f + 3.0f * 0.044715f * x_sq);
  }
  const float cdf = 0.5f * (1.0f + erff(x * 0.7071067811865476f));
  const float pdf = expf(-0.5f * x * x) * 0.3989422804014327f;
  return cdf + x * pdf;
}

}  // namespace frugal::kernels
