// RMSNorm and SwiGLU, the Llama family's elementwise work, as autograd ops with frugal's own CPU
// loops (src/model/llama_kernel.cpp): one pass forward and one backward each, float or bfloat16
// (computed in float, rounded once). On a GPU, with `gpu_kernels` (model.kernels = "frugal"),
// frugal's CUDA kernels of the same arithmetic (src/kernels/llama.cu). Elsewhere (a GPU without
// them, other dtypes) they run the ATen reference, which is also what the tests compare them with.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>

#include <utility>
#include <vector>

namespace frugal {

// weight * (x / sqrt(mean(x^2 over the last dim) + eps)), Hugging Face's LlamaRMSNorm, with the
// result in `out_dtype` (autocast's dtype where autocast is on, so no cast pass follows). x of
// any shape with the normalised dimension last; weight (x.size(-1),) float.
at::Tensor fused_rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps, c10::ScalarType out_dtype,
                          bool gpu_kernels = false);
// The same in ATen operations, as transformers writes it (computed in fp32, cast back to x's
// dtype before the weight).
at::Tensor rms_norm_reference(const at::Tensor& x, const at::Tensor& weight, double eps);

// silu(gate) * up for the packed product gate_up (..., 2F), gate in the first F columns:
// (..., F).
at::Tensor fused_swiglu(const at::Tensor& gate_up, bool gpu_kernels = false);

// h = x + y and the RMSNorm of h (in out_dtype), the residual form of fused_rms_norm: on a GPU with
// `gpu_kernels`, one kernel each way (x in fp32 or bf16, y in out_dtype: the matmul's output);
// elsewhere the sum, then fused_rms_norm. Returns {h, normed}.
std::pair<at::Tensor, at::Tensor> residual_rms_norm(const at::Tensor& x, const at::Tensor& y, const at::Tensor& weight,
                                                    double eps, c10::ScalarType out_dtype, bool gpu_kernels);

// The rotary embedding in the layout the attention reads, on frugal's kernel (src/kernels/llama.cu;
// one pass each way): from the packed projection qkv (B, T, (H + 2K) D), the queries (B, H, T, D)
// and keys (B, K, T, D) rotated by positions 0..T-1 (rotate-half with the tables cos, sin of
// model/rope.h: (>= T, D / 2) floats) and the values (B, K, T, D), each contiguous. What
// apply_rope on the heads and the transposes compute, without their copies.
// REQUIRES: rope_split_runs(qkv, cos, sin, H, K).
std::vector<at::Tensor> rope_split(const at::Tensor& qkv, const at::Tensor& cos, const at::Tensor& sin, int64_t H,
                                   int64_t K);
// Whether the kernel runs: qkv a 3-D fp32 or bf16 CUDA tensor on a GPU the kernels run on, an
// even head dimension, float tables on its device covering its positions.
bool rope_split_runs(const at::Tensor& qkv, const at::Tensor& cos, const at::Tensor& sin, int64_t H, int64_t K);
at::Tensor swiglu_reference(const at::Tensor& gate_up);

}  // namespace frugal
