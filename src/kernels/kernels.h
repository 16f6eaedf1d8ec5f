// frugal's CUDA kernels (src/kernels/*.cu): the fused classifier and the LayerNorm family, on raw
// device pointers and the caller's CUDA stream. They allocate nothing and never wait for the
// device, so a CUDA graph can capture them. This header needs no CUDA header: a stream is passed
// as `void*` (a cudaStream_t), and the element type of a buffer as Dtype.
//
// The tensor-level wrappers, their checks and the autograd Functions are in
// include/frugal/model/kernel_ops.h; docs/gpu.md describes each kernel and when it runs.
//
// Every function returns 0 when the launch was queued, else the CUDA error code (cudaError_t as
// an int), whose text kernel_error_text() gives.
#pragma once

#include <cstddef>
#include <cstdint>

namespace frugal::kernels {

enum class Dtype { kF32, kBf16 };

const char* kernel_error_text(int code);

// 0 when this build holds code the current device can run (its machine code, or PTX the driver
// compiles for it), else the CUDA error: cudaErrorNoKernelImageForDevice where the build's
// architectures (FRUGAL_CUDA_ARCHITECTURES) leave the device's out. Clears the error it raised.
int kernel_image_status();

// ---- fused classifier (classifier.cu) --------------------------------------------------------
// logits: `rows` rows of `ld` elements (ld >= vocab; columns vocab..ld-1 are the head's padding
// and ignored), dtype `dt`. targets: `rows` int64 token ids. For each row r:
//   lse[r]  = log(sum_{j < vocab} exp(logits[r, j]))
//   loss[r] = lse[r] - logits[r, targets[r]]    0 where targets[r] == ignore_index,
//                                                NaN where the target is outside [0, vocab)
// One pass over the logits; no normalised probabilities are written.
int classifier_forward(const void* logits, Dtype dt, int64_t rows, int64_t vocab, int64_t ld, const int64_t* targets,
                       int64_t ignore_index, float* lse, float* loss, void* stream);

// The gradient of mean(loss over the rows whose target is not ignore_index), times *grad:
//   dlogits[r, j] = (exp(logits[r, j] - lse[r]) - [j == targets[r]]) * *grad / max(*count, 1)
// for j < vocab; 0 for the padding columns and for every column of an ignored row. grad and count
// are device scalars (the upstream gradient, the number of counted rows), read by the kernel, so
// nothing waits for the host. dlogits may be the logits buffer itself (in place); both have the
// same dtype and row stride.
int classifier_backward(void* dlogits, const void* logits, Dtype dt, int64_t rows, int64_t vocab, int64_t ld,
                        const int64_t* targets, int64_t ignore_index, const float* lse, const float* grad,
                        const float* count, void* stream);

// ---- LayerNorm (layernorm.cu) ----------------------------------------------------------------
// Rows of C contiguous elements. x, weight and bias share dtype `xt` (the residual stream's and the
// parameters'); the normalised output has dtype `ot` (bf16 where it feeds a bf16 matmul, saving a
// cast). mean and rstd (fp32, one per row) are kept for the backward.
int layernorm_forward(void* out, Dtype ot, float* mean, float* rstd, const void* x, const void* weight,
                      const void* bias, Dtype xt, int64_t rows, int64_t C, float eps, void* stream);

// h = residual + y (dtype xt; y has dtype ot, the matmul's), then out = LayerNorm(h): the residual
// add and the norm in one pass.
int residual_layernorm_forward(void* h, void* out, float* mean, float* rstd, const void* residual, const void* y,
                               const void* weight, const void* bias, Dtype xt, Dtype ot, int64_t rows, int64_t C,
                               float eps, void* stream);

// The backward of either forward, in one kernel:
//   dx      = LayerNorm's input gradient from dout (dtype ot) + dresid (dtype xt; may be null)
//   dx_low  = the same values in dtype ot (may be null): the gradient of y in the residual form
//   dweight, dbias (fp32, C each) = the column sums of dout * xhat and of dout, summed in a fixed
//   order (the same bits on every run, no atomics on floats).
// x is the normalised input (h for the residual form). scratch holds
// layernorm_backward_scratch_floats(rows, C, sm_count) floats; counter is one unsigned int that is
// 0 on entry and 0 again on return (the kernel's last block resets it).
size_t layernorm_backward_blocks(int64_t rows, int sm_count);
size_t layernorm_backward_scratch_floats(int64_t rows, int64_t C, int sm_count);
int layernorm_backward(void* dx, void* dx_low, const void* dout, const void* dresid, const void* x, const void* weight,
                       const float* mean, const float* rstd, Dtype xt, Dtype ot, float* dweight, float* dbias,
                       float* scratch, unsigned* counter, int64_t rows, int64_t C, int sm_count, void* stream);

// ---- the Llama family (llama.cu) --------------------------------------------------------------
// RMSNorm over rows of C contiguous elements, the CPU loops' arithmetic (model/fused_llama.h):
//   rstd[r] = 1 / sqrt(sum_c x[r,c]^2 / C + eps),   out[r,c] = (x[r,c] * rstd[r]) * weight[c]
// computed in float and rounded once to `ot`; x has dtype xt, weight C floats, rstd one float a row.
int rmsnorm_forward(void* out, Dtype ot, float* rstd, const void* x, Dtype xt, const float* weight, int64_t rows,
                    int64_t C, float eps, void* stream);
// The residual form, one pass: h = residual + y (residual and h of dtype xt, y of dtype ot: the
// matmul's), then out = the RMSNorm of h as above.
int residual_rmsnorm_forward(void* h, void* out, Dtype ot, float* rstd, const void* residual, const void* y, Dtype xt,
                             const float* weight, int64_t rows, int64_t C, float eps, void* stream);
// The backward of either, dy of dtype dt:
//   dx[r,c]    = rstd[r] * (dy w[c] - xhat * mean_c(dy w xhat)) + dresid[r,c], xhat = x * rstd[r]
//                (dtype xt; x is h for the residual form; dresid of dtype xt, may be null)
//   dx_low     = the same values in dtype dt (may be null): the residual form's gradient of y
//   dweight[c] = sum_r dy[r,c] * xhat[r,c]   (float; partial sums per group of rows in `scratch`,
//                rmsnorm_backward_scratch_floats(rows, C) floats, added in a fixed order: the same
//                bits on every run)
size_t rmsnorm_backward_scratch_floats(int64_t rows, int64_t C);
int rmsnorm_backward(void* dx, void* dx_low, const void* dy, Dtype dt, const void* dresid, const void* x, Dtype xt,
                     const float* weight, const float* rstd, float* dweight, float* scratch, int64_t rows, int64_t C,
                     void* stream);
// SwiGLU over the packed product gate_up (rows x 2F, gate in the first F columns), dtype t:
//   act[r,j] = silu(g) * u;   backward: dgate = dact u s (1 + g (1 - s)), dup = dact g s, s = sigmoid(g)
int swiglu_forward(void* act, const void* gate_up, Dtype t, int64_t rows, int64_t F, void* stream);
int swiglu_backward(void* dgate_up, const void* gate_up, const void* dact, Dtype t, int64_t rows, int64_t F,
                    void* stream);

// The rotary embedding in the layout the attention reads: from the packed projection qkv
// (B, T, (H + 2K) D: H query heads, then K key heads, then K value heads), q (B, H, T, D) and k
// (B, K, T, D) rotated by position t (rotate-half with the tables cos, sin: (>= T, D / 2) floats)
// and v (B, K, T, D) copied, all contiguous, dtype t. `backward`: the gradient of qkv from those of
// q, k and v, written into qkv's buffer. D even.
int rope_split(bool backward, void* qkv, void* q, void* k, void* v, Dtype t, const float* cos, const float* sin,
               int64_t B, int64_t T, int64_t H, int64_t K, int64_t D, void* stream);

// ---- the MLP's bias and GELU (bias_gelu.cu) -------------------------------------------------------
// Rows of C contiguous elements of dtype t (u: the MLP's first product, taken without its bias),
// bias C floats; GELU as kernel_math.h's gelu_value (`tanh_form`: GPT-2's approximation):
//   y[r,c] = gelu(u[r,c] + bias[c])                       computed in float, rounded once to t
int bias_gelu_forward(void* y, const void* u, Dtype t, const float* bias, int64_t rows, int64_t C, bool tanh_form,
                      void* stream);
// The backward, in one pass over dy and u:
//   du[r,c]  = dy[r,c] * gelu'(u[r,c] + bias[c])          rounded once to t (dy and du of dtype t)
//   dbias[c] = sum_r of those values before rounding       (float; partial sums per group of rows in
//              `scratch`, bias_gelu_backward_scratch_floats(rows, C) floats, added in a fixed order:
//              the same bits on every run)
size_t bias_gelu_backward_scratch_floats(int64_t rows, int64_t C);
int bias_gelu_backward(void* du, float* dbias, const void* dy, const void* u, Dtype t, const float* bias,
                       float* scratch, int64_t rows, int64_t C, bool tanh_form, void* stream);
// ---- fp8 casts (fp8_cast.cu) -----------------------------------------------------------------
// out[i] = x[i] * s rounded to float8 (e4m3, or e5m2 when `e5m2`): the nearest value, ties to
// even, saturated to the format's largest finite value (448; 57344), where
//   s = (float)(max / max((double)*amax, 1e-12))
// from the device scalar amax (the absolute maximum of x). x: n elements of dtype xt; out: n bytes.
// s is also written to *scale (a device float; may be null). One pass; nothing waits for the host.
int fp8_scaled_cast(void* out, const void* x, Dtype xt, int64_t n, bool e5m2, const float* amax, float* scale,
                    void* stream);

}  // namespace frugal::kernels
