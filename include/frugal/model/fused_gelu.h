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

}  // namespace frugal
