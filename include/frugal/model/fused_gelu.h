// GELU (exact, erf form) as one autograd op with frugal's own CPU loops: the forward reads x
// and writes y, the backward reads x and dy and writes dx, each in one vectorised pass compiled
// for the CPU's widest instruction set (AVX-512 where present), in float or bfloat16 (computed
// in float). Same values as torch::gelu to within 1e-6 in float (tested). Other devices and
// dtypes fall back to torch::gelu.
#pragma once

#include <ATen/core/Tensor.h>

namespace frugal {

at::Tensor fused_gelu(const at::Tensor& x);

// GELU(x W^T + b), the MLP's first layer and its activation. When training in float on the CPU,
// the product runs without the bias, and one pass adds the bias, applies GELU and keeps GELU's
// derivative (in place of the pre-activation, so no more memory); the backward is then one pass
// that multiplies by the derivative and sums the bias gradient, with no transcendental maths and
// the same result for any thread count. Otherwise (no gradient, autocast, other dtypes or
// devices, no bias) it is fused_gelu(linear(x, W, b)).
at::Tensor linear_gelu(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias);

// GELU(u + bias) for the MLP's first product u = x W^T taken without its bias (..., F), bias (F,)
// float; `tanh_form`: GPT-2's tanh approximation, else the exact (erf) form. With `gpu_kernels`
// (model.kernels = "frugal") on a GPU that runs frugal's kernels, in fp32 or bf16: one kernel
// adds the bias and applies GELU (src/kernels/bias_gelu.cu), and the backward writes u's gradient
// and sums the bias gradient (fp32, in a fixed order) in the same pass, where ATen's linear sums
// it from the written gradient in a second one. Elsewhere the same arithmetic on ATen operators
// in float (in double for double), the reference the GPU tests hold the kernels to. The result
// and u's gradient have u's dtype, the bias gradient the bias's.
at::Tensor bias_gelu(const at::Tensor& u, const at::Tensor& bias, bool tanh_form, bool gpu_kernels);

}  // namespace frugal
