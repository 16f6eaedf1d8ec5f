// NF4, QLoRA's 4-bit NormalFloat (Dettmers et al. 2023), for a frozen base under adapters
// (lora.base_dtype = "nf4", model/lora.h, docs/lora.md). A weight's values, taken in bf16 and
// flattened in row-major order, are cut into blocks of 64; each value becomes the index of the
// nearest of 16 levels (the quantiles of a normal distribution, scaled to [-1, 1]) after division
// by its block's absolute maximum, two indices a byte. The block maxima are quantised again
// ("double quantisation"): less their mean, in blocks of 256, each block's to int8 by the factor
// 256 / (2 max |.|). Storage: half a byte per weight, plus 1/64 byte for the maxima and a bf16
// factor per 16,384 weights: 0.258x bf16's bytes.
//
// The layout and every rounding are torchao's NF4Tensor's (to_nf4(w.bfloat16(), 64, 256)), so the
// codes, maxima, factors, mean and the dequantised bf16 weight are the same bits
// (tests/interop/nf4_check.py); torchao refuses sizes that are not whole blocks of 64 x 256, where
// a short last block here takes the maximum over what it holds. The mean is the blocks' exact mean
// rounded to bf16 (torchao sums in float: the same bits except in the rarest ties), independent of
// the thread count, so a run quantises its base to the same bits wherever it resumes.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace frugal {

constexpr int64_t kNf4Block = 64;         // weights per absmax scale
constexpr int64_t kNf4ScalerBlock = 256;  // scales per int8 quantisation factor

// One tensor in NF4.
struct Nf4 {
  at::Tensor codes;    // uint8 (n / 2): two level indices a byte, the first in the high 4 bits
  at::Tensor scalers;  // int8 (ceil(n / 64)): the blocks' absmax less `mean`, times their factor
  at::Tensor factors;  // bf16 (ceil(n / 16,384)): 256 / (2 max |absmax - mean|) per 256 blocks
  at::Tensor mean;     // bf16 (1): the mean of the blocks' absmax
};

// `w` (any floating dtype; its values rounded to bf16 first) in NF4. Throws ConfigError for an odd
// number of elements.
Nf4 nf4_quantize(const at::Tensor& w);

// The bf16 values `q` stands for, shaped `shape` (whose elements number the codes' twice).
at::Tensor nf4_dequantize(const Nf4& q, at::IntArrayRef shape);

// The 16 levels, bf16, on `device`.
at::Tensor nf4_levels(const c10::Device& device);

// x W^T + b for a frozen W held as NF4 in row slices (`slices[k]` holds rows[k] rows of `in`
// columns; W is their concatenation): W is dequantised for the product and again for the input's
// gradient in the backward instead of being kept (torchao's linear_nf4). `bias` (may be undefined)
// is frozen: the result has a gradient for x only. Under autocast the product runs in its dtype;
// otherwise W is cast to x's.
at::Tensor nf4_linear(const at::Tensor& x, const std::vector<Nf4>& slices, const std::vector<int64_t>& rows, int64_t in,
                      const at::Tensor& bias);

}  // namespace frugal
