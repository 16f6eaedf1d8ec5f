// Raw CPU loops of the Llama family's fused elementwise ops (frugal/model/fused_llama.h wraps them
// as autograd ops): RMSNorm forward and backward, SwiGLU forward and backward. Built in their own
// translation unit without LibTorch headers, cloned per x86 instruction-set level, spread over
// OpenMP threads. Results do not depend on the thread count: every output element is computed by
// the same arithmetic in the same order whichever thread runs it (the weight gradient's column
// sums go through fixed blocks of rows, added in block order).
//
// Layouts, all contiguous, row-major:
//   x, y, dy, dx   (rows, cols); y and dx may be float or bf16 independently of x (Out);
//   weight, dw     (cols,) float;
//   rstd           (rows,) float: 1 / sqrt(mean(x^2) + eps), written by the forward;
//   gate_up, dgu   (rows, 2 * cols): gate in columns [0, cols), up in [cols, 2 * cols);
//   act, dact      (rows, cols).
#pragma once

#include <cstdint>

namespace frugal::internal {

// y = x * rstd * w per row (HF's LlamaRMSNorm: normalised first, then scaled).
void rms_norm_forward_f32(const float* x, const float* w, float* y, float* rstd, int64_t rows, int64_t cols, float eps,
                          int threads);
void rms_norm_forward_bf16(const uint16_t* x, const float* w, uint16_t* y, float* rstd, int64_t rows, int64_t cols,
                           float eps, int threads);
// float in, bfloat16 out (autocast: the norm's output goes on in the next matmul's dtype).
void rms_norm_forward_f32_bf16(const float* x, const float* w, uint16_t* y, float* rstd, int64_t rows, int64_t cols,
                               float eps, int threads);
// dx = rstd * (g - xhat * mean(g * xhat)), g = dy * w, xhat = x * rstd; dw = sum over rows of
// dy * xhat. dy is float or bf16 (dy_bf16 != nullptr), x likewise; dx is written in x's dtype.
void rms_norm_backward(const float* x_f32, const uint16_t* x_bf16, const float* w, const float* rstd,
                       const float* dy_f32, const uint16_t* dy_bf16, float* dx_f32, uint16_t* dx_bf16, float* dw,
                       int64_t rows, int64_t cols, int threads);

// act = silu(gate) * up, silu(g) = g / (1 + exp(-g)).
void swiglu_forward_f32(const float* gate_up, float* act, int64_t rows, int64_t cols, int threads);
void swiglu_forward_bf16(const uint16_t* gate_up, uint16_t* act, int64_t rows, int64_t cols, int threads);
// dgate = dact * up * s (1 + g (1 - s)), dup = dact * g * s, s = sigmoid(g).
void swiglu_backward_f32(const float* gate_up, const float* dact, float* dgu, int64_t rows, int64_t cols, int threads);
void swiglu_backward_bf16(const uint16_t* gate_up, const uint16_t* dact, uint16_t* dgu, int64_t rows, int64_t cols,
                          int threads);

}  // namespace frugal::internal
