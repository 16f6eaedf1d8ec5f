// Raw CPU loops of the fused GELU (exact, erf form). Built in their own translation unit, without
// LibTorch headers, once per x86 instruction-set level and chosen at run time (see
// gelu_kernel.cpp); frugal/model/fused_gelu.h wraps them as an autograd op. Each call splits its
// n elements into one contiguous span per thread (up to `threads`; OpenMP): element-wise, so the
// result does not depend on the thread count.
#pragma once

#include <cstdint>

namespace frugal::internal {

// y = x * Phi(x), n elements.
void gelu_forward_f32(const float* x, float* y, int64_t n, int threads);
// dx = dy * (Phi(x) + x * phi(x)).
void gelu_backward_f32(const float* x, const float* dy, float* dx, int64_t n, int threads);
// The same on bfloat16 bit patterns: computed in float, rounded to nearest even.
void gelu_forward_bf16(const uint16_t* x, uint16_t* y, int64_t n, int threads);
void gelu_backward_bf16(const uint16_t* x, const uint16_t* dy, uint16_t* dx, int64_t n, int threads);

// The biased form on a rows x cols row-major matrix u: y = GELU(u + b) and d = GELU'(u + b),
// b broadcast over the rows. The derivative is kept so the backward is arithmetic only.
void bias_gelu_forward_f32(const float* u, const float* b, float* y, float* d, int64_t rows, int64_t cols, int threads);
// dx = dy * d, and db = the column sums of dx. The threads split the columns, and each column is
// summed in row order, so both results are the same for any thread count.
void bias_gelu_backward_f32(const float* d, const float* dy, float* dx, float* db, int64_t rows, int64_t cols,
                            int threads);

}  // namespace frugal::internal
