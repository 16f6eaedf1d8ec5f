// Scalar building blocks for frugal's own CPU kernels (gelu_kernel.cpp, attention_kernel.cpp):
// written as branch-free arithmetic the compiler vectorises, and the attribute that clones a
// kernel per x86 instruction-set level. Kernels that include this are built without LibTorch
// headers, with -O3 -fno-math-errno -fno-trapping-math (floor and the float <-> int conversions
// vectorise only then).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

// "arch=x86-64-vN" clones need GCC 12 (tested); other compilers build the baseline loop only.
// The best clone (AVX-512, AVX2, baseline) is picked when the program loads.
// FRUGAL_X86_LEVELS: functions can be compiled per x86-64 level (target attributes) here.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12
#define FRUGAL_X86_LEVELS 1
#define FRUGAL_ISA_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define FRUGAL_ISA_CLONES
#endif
#define FRUGAL_INLINE inline __attribute__((always_inline))

namespace frugal::internal {

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

// Runs fn(begin, end) over [0, n) in up to `threads` contiguous spans, in parallel where the
// including file is compiled with OpenMP. Spans start at multiples of `align` (by default 64
// elements: whole cache lines, whole vectors) and are at least `grain` long; below that, one
// call on this thread.
template <class Fn>
void parallel_spans(int64_t n, int threads, Fn fn, int64_t grain = 1 << 14, int64_t align = 64) {
  const int64_t spans = std::max<int64_t>(1, std::min<int64_t>(threads, n / grain));
  if (spans == 1) {
    fn(int64_t{0}, n);
    return;
  }
  const int64_t step = ((n + spans - 1) / spans + align - 1) / align * align;  // spans * step >= n
#pragma omp parallel for num_threads(static_cast <int>(spans)) schedule(static, 1)
  for (int64_t i = 0; i < spans; ++i) {
    const int64_t begin = std::min(n, i * step), end = std::min(n, begin + step);
    if (begin < end) fn(begin, end);
  }
}

}  // namespace frugal::internal
