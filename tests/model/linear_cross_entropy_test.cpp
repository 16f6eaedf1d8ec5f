// The chunked output head + cross-entropy (linear_cross_entropy.h): values and gradients against
// ATen's cross-entropy of the full logits in double, for any chunking and with ignored targets;
// under autocast against the full computation in bfloat16; and, through the counting allocator,
// that no (tokens x vocab) fp32 buffer is held at vocab 32K where the plain path holds two.
#include "frugal/model/linear_cross_entropy.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "frugal/core/compat.h"
#include "frugal/core/memory.h"

namespace frugal::linear_cross_entropy_test {
namespace {

struct Result {
  double loss;
  at::Tensor dx, dw;
};

Result fused(const at::Tensor& x0, const at::Tensor& w0, const at::Tensor& t, int64_t chunk, int64_t pad = 1) {
  at::Tensor x = x0.clone().requires_grad_(true), w = w0.clone().requires_grad_(true);
  at::Tensor loss = linear_cross_entropy(x, w, t, chunk, -100, pad);
  (loss * 3).backward();  // a loss gradient other than 1: the backward scales what the forward kept
  return {loss.item<double>(), x.grad(), w.grad()};
}

Result reference(const at::Tensor& x0, const at::Tensor& w0, const at::Tensor& t) {
  at::Tensor x = x0.clone().requires_grad_(true), w = w0.clone().requires_grad_(true);
  at::Tensor loss = torch::cross_entropy_loss(at::linear(x, w).reshape({-1, w.size(0)}), t.reshape({-1}), {},
                                              at::Reduction::Mean, -100);
  (loss * 3).backward();
  return {loss.item<double>(), x.grad(), w.grad()};
}

// Chunks of one row, of a size that does not divide the rows, of the auto rule, and one chunk.
TEST(LinearCrossEntropy, MatchesCrossEntropyOfTheFullLogitsInDouble) {
  torch::manual_seed(1);
  const at::Tensor x = torch::randn({2, 11, 24}, torch::kDouble) * 2;
  const at::Tensor w = torch::randn({97, 24}, torch::kDouble);
  at::Tensor t = torch::randint(0, 97, {2, 11}, torch::kLong);
  t.index_put_({0, 3}, -100);
  t.index_put_({1, 7}, -100);
  const Result ref = reference(x, w, t);
  for (int64_t chunk : {1, 5, 0, 22, 1000}) {
    const Result got = fused(x, w, t, chunk);
    EXPECT_NEAR(got.loss, ref.loss, 1e-12) << chunk;
    EXPECT_TRUE(torch::allclose(got.dx, ref.dx, 1e-10, 1e-12)) << chunk << " " << (got.dx - ref.dx).abs().max();
    EXPECT_TRUE(torch::allclose(got.dw, ref.dw, 1e-10, 1e-12)) << chunk << " " << (got.dw - ref.dw).abs().max();
  }
}

// The head padded to a multiple of 8 or 64 rows (97 classes run as 104 or 128): the padding
// columns take no part in the softmax, and the gradients are the unpadded head's.
TEST(LinearCrossEntropy, APaddedHeadGivesTheUnpaddedLossAndGradients) {
  torch::manual_seed(5);
  const at::Tensor x = torch::randn({3, 7, 24}, torch::kDouble), w = torch::randn({97, 24}, torch::kDouble);
  at::Tensor t = torch::randint(0, 97, {3, 7}, torch::kLong);
  t.index_put_({1, 2}, -100);
  const Result ref = reference(x, w, t);
  for (int64_t pad : {8, 64, 97})
    for (int64_t chunk : {4, 0}) {
      const Result got = fused(x, w, t, chunk, pad);
      EXPECT_NEAR(got.loss, ref.loss, 1e-12) << pad << " " << chunk;
      EXPECT_EQ(got.dw.sizes(), w.sizes());
      EXPECT_TRUE(torch::allclose(got.dx, ref.dx, 1e-10, 1e-12)) << pad << " " << chunk;
      EXPECT_TRUE(torch::allclose(got.dw, ref.dw, 1e-10, 1e-12)) << pad << " " << chunk;
    }
}

TEST(LinearCrossEntropy, InFloatWithinFloatRounding) {
  torch::manual_seed(2);
  const at::Tensor x = torch::randn({64, 32}), w = torch::randn({300, 32}) * 0.3;
  const at::Tensor t = torch::randint(0, 300, {64}, torch::kLong);
  const Result ref = reference(x.to(torch::kDouble), w.to(torch::kDouble), t), got = fused(x, w, t, 0);
  EXPECT_NEAR(got.loss, ref.loss, 1e-5);
  EXPECT_TRUE(torch::allclose(got.dw.to(torch::kDouble), ref.dw, 1e-4, 1e-6));
}

TEST(LinearCrossEntropy, EveryTargetIgnoredGivesZeroAndNoGradient) {
  const at::Tensor x = torch::randn({4, 8}), w = torch::randn({10, 8});
  const Result got = fused(x, w, torch::full({4}, -100, torch::kLong), 2);
  EXPECT_EQ(got.loss, 0.0);
  EXPECT_EQ(got.dx.abs().max().item<float>(), 0.0f);
  EXPECT_EQ(got.dw.abs().max().item<float>(), 0.0f);
}

// Under autocast the products are bfloat16 as autocast's linear would make them: the loss and
// gradients agree with the full computation in bfloat16 to its rounding.
TEST(LinearCrossEntropy, UnderAutocastTheProductsAreBfloat16) {
  torch::manual_seed(3);
  const at::Tensor x = torch::randn({48, 32}), w = torch::randn({200, 32}) * 0.2;
  const at::Tensor t = torch::randint(0, 200, {48}, torch::kLong);
  Result got, ref;
  {
    compat::AutocastGuard autocast(c10::DeviceType::CPU, at::kBFloat16, true);
    got = fused(x, w, t, 7);
    at::Tensor xr = x.clone().requires_grad_(true), wr = w.clone().requires_grad_(true);
    at::Tensor loss = torch::cross_entropy_loss(at::linear(xr, wr).to(at::kFloat), t);
    (loss * 3).backward();
    ref = {loss.item<double>(), xr.grad(), wr.grad()};
  }
  EXPECT_NEAR(got.loss, ref.loss, 2e-2);
  EXPECT_TRUE(torch::allclose(got.dw, ref.dw, 5e-2, 5e-3)) << (got.dw - ref.dw).abs().max();
  EXPECT_TRUE(torch::allclose(got.dx.to(at::kFloat), ref.dx.to(at::kFloat), 5e-2, 5e-3));
}

// The peak of tensor bytes over the loss and its backward, from the counting allocator.
template <class F>
int64_t peak_bytes(F f) {
  const int64_t base = tensor_bytes_now();
  reset_tensor_bytes_peak();
  f();
  return tensor_bytes_peak() - base;
}

// 512 tokens against a 32,768-entry vocabulary: the logits alone are 64 MiB in fp32. The plain
// path holds them and their gradient (the measurement sees it); the chunked one stays well below
// one such buffer.
TEST(LinearCrossEntropy, HoldsNoTokensByVocabBufferAtVocab32K) {
  install_counting_allocator();
  const int64_t N = 512, V = 32768, C = 32;
  torch::manual_seed(4);
  const at::Tensor t = torch::randint(0, V, {N}, torch::kLong);
  const int64_t logits_bytes = N * V * 4;
  at::Tensor x = torch::randn({N, C}).requires_grad_(true), w = (torch::randn({V, C}) * 0.05).requires_grad_(true);
  const int64_t chunked = peak_bytes([&] { linear_cross_entropy(x, w, t).backward(); });
  x.mutable_grad().reset();
  w.mutable_grad().reset();
  const int64_t plain = peak_bytes([&] { torch::cross_entropy_loss(at::linear(x, w), t).backward(); });
  EXPECT_GT(plain, logits_bytes) << "the measurement must see the plain path's logits";
  EXPECT_LT(chunked, logits_bytes / 2) << "chunked peak " << chunked << " bytes";
}

TEST(LinearCrossEntropy, AutoChunksMakeLogitsAboutTheSizeOfTheHiddenStates) {
  EXPECT_EQ(chunk_rows_for(32768, 4096, 128256), 1024);  // Llama 3 at 32K tokens: 32 chunks of 1024 x 128K
  EXPECT_EQ(chunk_rows_for(1000, 4096, 256), 1000);      // a small vocabulary: one chunk
  EXPECT_EQ(chunk_rows_for(4096, 64, 32768), 32);        // at least 2^20 logits a chunk (here 32 rows)
  // On a GPU, GPT-2's vocabulary at micro-batch 16 x 1024 (not 66 chunks of 249 rows): 13 chunks on
  // ATen's operators (2^26 logits), 4 on the classifier kernel (2^28), where Llama 3 at 32K tokens
  // takes 16.
  EXPECT_EQ(chunk_rows_for(16384, 768, 50257, kMinChunkLogitsGpu), 1336);
  EXPECT_EQ(chunk_rows_for(16384, 768, 50257, kMinChunkLogitsKernel), 5342);
  EXPECT_EQ(chunk_rows_for(32768, 4096, 128256, kMinChunkLogitsKernel), 2093);
  EXPECT_EQ(chunk_rows_for(3, 8, 100000), 3);
}

}  // namespace
}  // namespace frugal::linear_cross_entropy_test
