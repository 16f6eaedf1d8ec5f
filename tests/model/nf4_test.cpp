// NF4 (model/nf4.h): values on the levels come back exactly, packed high nibble first; any weight
// comes back within half a level gap of its block's scale (short last blocks, an all-zero block);
// the product over an NF4 weight is the product over its dequantised values, gradient included.
// (Bit-for-bit agreement with torchao's NF4Tensor: tests/interop/nf4_check.py.)
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "frugal/core/errors.h"
#include "frugal/model/nf4.h"

namespace frugal::nf4_test {
namespace {

TEST(Nf4, ValuesOnTheLevelsComeBackExactlyPackedHighNibbleFirst) {
  // Every block holds -0.5 and 0.5 (its absmax: each block's scale is the mean, exactly) and levels
  // times 0.5 elsewhere.
  torch::manual_seed(1);
  const at::Tensor levels = nf4_levels(at::kCPU);
  at::Tensor idx = torch::randint(0, 16, {4, 128});
  idx.select(1, 0).fill_(0);
  idx.select(1, 1).fill_(15);
  idx.select(1, 64).fill_(0);
  idx.select(1, 65).fill_(15);
  const at::Tensor w = levels.index_select(0, idx.view({-1})).view({4, 128}) * 0.5;
  const Nf4 q = nf4_quantize(w);
  EXPECT_EQ(q.codes.scalar_type(), at::kByte);
  EXPECT_EQ(q.codes.numel(), 256);
  EXPECT_EQ(q.codes[0].item<int64_t>(), 0x0F) << "the first value is not in the high 4 bits";
  const at::Tensor packed = idx.view({-1, 2}).select(1, 0) * 16 + idx.view({-1, 2}).select(1, 1);
  EXPECT_TRUE(q.codes.to(at::kLong).equal(packed));
  EXPECT_EQ(q.scalers.numel(), 8);
  EXPECT_EQ(q.factors.numel(), 1);
  EXPECT_EQ(q.mean.item<float>(), 0.5f);
  const at::Tensor back = nf4_dequantize(q, {4, 128});
  EXPECT_EQ(back.scalar_type(), at::kBFloat16);
  EXPECT_TRUE(back.equal(w.to(at::kBFloat16)));
}

TEST(Nf4, AnyWeightComesBackWithinHalfALevelGapOfItsBlockScale) {
  torch::manual_seed(2);
  // 97 x 70 = 6,790 values: 107 blocks (the last 6 long), one short block of scales; rows of
  // different magnitudes (scales far from their mean), and a block of zeros.
  at::Tensor w = torch::randn({97, 70}) * torch::linspace(0.01, 3, 97).unsqueeze(1);
  w.view({-1}).narrow(0, 640, 64).zero_();
  const Nf4 q = nf4_quantize(w);
  EXPECT_EQ(q.codes.numel(), 97 * 35);
  EXPECT_EQ(q.scalers.numel(), 107);
  EXPECT_EQ(q.factors.numel(), 1);
  const at::Tensor back = nf4_dequantize(q, {97, 70}).to(at::kFloat);
  ASSERT_FALSE(back.isnan().any().item<bool>());
  EXPECT_TRUE(back.view({-1}).narrow(0, 640, 64).eq(0).all().item<bool>()) << "a block of zeros does not stay zero";
  const at::Tensor exact = w.to(at::kBFloat16).to(at::kFloat).view({-1});
  at::Tensor padded = at::zeros({107 * 64});
  padded.narrow(0, 0, exact.numel()).copy_(exact);
  const at::Tensor absmax = padded.view({107, 64}).abs().amax(1);
  // The widest gap between levels is -0.6962 - (-1); the scale itself is off by at most a step of
  // its int8 quantisation, plus bf16's rounding.
  const at::Tensor step = (absmax - absmax.mean()).abs().max() / 127;
  const at::Tensor bound = (absmax * 0.1519 + step + absmax * 0.01).repeat_interleave(64).narrow(0, 0, exact.numel());
  const at::Tensor err = (back.view({-1}) - exact).abs();
  EXPECT_TRUE(err.le(bound).all().item<bool>()) << "worst excess " << (err - bound).max().item<double>();
  EXPECT_GT(err.max().item<double>(), 0) << "nothing was rounded: not 4 bits";
}

TEST(Nf4, TheProductOverAnNf4WeightIsTheProductOverItsValues) {
  torch::manual_seed(3);
  const at::Tensor top = torch::randn({24, 32}), bottom = torch::randn({8, 32}) * 0.1, bias = torch::randn({32});
  const std::vector<Nf4> slices = {nf4_quantize(top), nf4_quantize(bottom)};
  const at::Tensor w =
      at::cat({nf4_dequantize(slices[0], {24, 32}), nf4_dequantize(slices[1], {8, 32})}).to(at::kFloat);
  const at::Tensor x = torch::randn({2, 5, 32}, torch::requires_grad());
  const at::Tensor g = torch::randn({2, 5, 32});
  const at::Tensor y = nf4_linear(x, slices, {24, 8}, 32, bias);
  const at::Tensor dx = torch::autograd::grad({y}, {x}, {g})[0];
  const at::Tensor y_ref = at::linear(x, w, bias);
  const at::Tensor dx_ref = torch::autograd::grad({y_ref}, {x}, {g})[0];
  EXPECT_TRUE(y.allclose(y_ref, 1e-6, 1e-6));
  EXPECT_TRUE(dx.allclose(dx_ref, 1e-5, 1e-6));
  EXPECT_EQ(dx.scalar_type(), at::kFloat);
}

TEST(Nf4, AnOddNumberOfWeightsIsRefusedByName) {
  try {
    nf4_quantize(torch::randn({3, 5}));
    FAIL() << "an odd count was quantised";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("lora.base_dtype = \"nf4\""), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace frugal::nf4_test
