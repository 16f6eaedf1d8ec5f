// GELU (exact, erf form) as one autograd op with frugal's own CPU loops: the forward reads x
// and writes y, the backward reads x and dy and writes dx, each in one vectorised pass compiled
// for the CPU's widest instruction set (AVX-512 where present), in float or bfloat16 (computed
// in float). Same values as torch::gelu to within 1e-6 in float (tested). Other devices and
// dtypes fall back to torch::gelu.
#pragma once

#include <ATen/core/Tensor.h>

namespace frugal {

at::Tensor fused_gelu(const at::Tensor& x);

}  // namespace frugal
