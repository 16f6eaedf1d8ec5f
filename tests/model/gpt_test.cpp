// The GPT decoder: causality, KV-cache decoding, sizes and the FLOP formula, and the float fast
// paths (fused attention, linear_gelu, the residual fused into the output projections) against
// the same weights in double, which take ATen's plain paths.
#include "frugal/model/gpt.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "frugal/core/compat.h"

namespace frugal::gpt_test {
namespace {

ModelConfig small() {
  ModelConfig c;
  c.layers = 2;
  c.heads = 2;
  c.embd = 32;
  c.block = 16;
  c.vocab = 256;
  return c;
}

TEST(Gpt, ChangingAFutureTokenNeverChangesPastLogits) {
  torch::manual_seed(0);
  Gpt m(small());
  m->eval();
  torch::NoGradGuard ng;
  auto idx = torch::randint(0, 256, {2, 16}, torch::kLong);
  auto base = m->forward(idx);
  for (int64_t t : {3, 9, 15}) {
    auto changed = idx.clone();
    changed.index_put_({torch::indexing::Slice(), t}, (idx.index({torch::indexing::Slice(), t}) + 1) % 256);
    auto out = m->forward(changed);
    // Positions before t are bitwise unchanged; position t itself must change.
    EXPECT_TRUE(torch::equal(out.narrow(1, 0, t), base.narrow(1, 0, t))) << "t=" << t;
    EXPECT_FALSE(torch::allclose(out.narrow(1, t, 1), base.narrow(1, t, 1))) << "t=" << t;
  }
}

TEST(Gpt, FloatTrainingForwardAndGradientsMatchTheSameWeightsInDouble) {
  torch::manual_seed(7);
  ModelConfig c = small();
  c.embd = 64;  // head size 32: the attention kernel reads and writes its heads in place
  Gpt fast(c), plain(c);
  {
    torch::NoGradGuard ng;
    // Every weight random, biases and LayerNorms included, so no term of the sum can be lost
    // unnoticed (GPT-2's initialisation sets the biases to 0).
    for (auto& p : fast->parameters()) p.normal_(0, 0.2);
    auto src = fast->parameters(), dst = plain->parameters();
    for (size_t i = 0; i < src.size(); ++i) dst[i].copy_(src[i]);
  }
  plain->to(torch::kDouble);
  fast->train();
  plain->train();
  auto idx = torch::randint(0, 256, {3, 16}, torch::kLong);
  auto weight = torch::randn({3, 16, 256});
  auto y_fast = fast->forward(idx), y_plain = plain->forward(idx);
  (y_fast * weight).sum().backward();
  (y_plain * weight.to(torch::kDouble)).sum().backward();
  auto rel = [](const at::Tensor& got, const at::Tensor& want) {
    return (got.to(torch::kDouble) - want).abs().max().item<double>() / (want.abs().max().item<double>() + 1e-12);
  };
  EXPECT_LT(rel(y_fast, y_plain), 1e-5);
  auto gf = fast->named_parameters(), gp = plain->named_parameters();
  for (const auto& item : gf) {
    SCOPED_TRACE(item.key());
    ASSERT_TRUE(item.value().grad().defined());
    EXPECT_LT(rel(item.value().grad(), gp[item.key()].grad()), 1e-4);
  }
}

// model.head_multiple: the head's product runs at the vocabulary rounded up (here 250 -> 256)
// against zero rows appended to the tied weight; logits, loss and every gradient equal the
// unpadded head's, and the weight keeps its 250 rows. The logits' row stride shows the width the
// product ran at; on the CPU, 0 (auto) leaves the head unpadded.
TEST(Gpt, PaddedHeadGivesTheUnpaddedLogitsLossAndGradients) {
  torch::manual_seed(8);
  ModelConfig c = small();
  c.vocab = 250;
  ModelConfig cp = c, ca = c;
  c.head_multiple = 1;
  cp.head_multiple = 64;
  ca.head_multiple = 0;
  Gpt plain(c), padded(cp), autod(ca);
  {
    torch::NoGradGuard ng;
    auto src = plain->parameters();
    for (Gpt* m : {&padded, &autod}) {
      auto dst = (*m)->parameters();
      for (size_t i = 0; i < src.size(); ++i) dst[i].copy_(src[i]);
    }
  }
  auto idx = torch::randint(0, 250, {3, 16}, torch::kLong), y = torch::randint(0, 250, {3, 16}, torch::kLong);
  {
    torch::NoGradGuard ng;
    auto lp = plain->forward(idx), lq = padded->forward(idx), la = autod->forward(idx);
    ASSERT_EQ(lq.sizes(), lp.sizes());
    EXPECT_EQ(lq.stride(1), 256);  // the product ran 256 wide
    EXPECT_EQ(lp.stride(1), 250);
    EXPECT_EQ(la.stride(1), 250);  // auto: off on the CPU
    EXPECT_TRUE(torch::allclose(lq, lp, 1e-5, 1e-6));
  }
  auto loss_plain = plain->loss(idx, y), loss_padded = padded->loss(idx, y);
  EXPECT_NEAR(loss_padded.item<double>(), loss_plain.item<double>(), 1e-6);
  loss_plain.backward();
  loss_padded.backward();
  auto gp = plain->named_parameters(), gq = padded->named_parameters();
  for (const auto& item : gp) {
    SCOPED_TRACE(item.key());
    const at::Tensor& g = gq[item.key()].grad();
    ASSERT_TRUE(g.defined());
    ASSERT_EQ(g.sizes(), item.value().grad().sizes());
    EXPECT_TRUE(torch::allclose(g, item.value().grad(), 1e-4, 1e-7));
  }
  EXPECT_EQ(padded->named_parameters()["wte.weight"].size(0), 250);
  // Under bf16 autocast the weight is cast, then padded: the same width, the logits within bf16's
  // rounding of the unpadded head's.
  {
    torch::NoGradGuard ng;
    compat::AutocastGuard bf16(c10::DeviceType::CPU, at::kBFloat16);
    auto lq = padded->forward(idx), lp = plain->forward(idx);
    EXPECT_EQ(lq.stride(1), 256);
    EXPECT_EQ(lq.scalar_type(), at::kBFloat16);
    EXPECT_TRUE(torch::allclose(lq.to(at::kFloat), lp.to(at::kFloat), 2e-2, 2e-2));
  }
  // Greedy decoding through the KV cache reads the same head.
  padded->eval();
  plain->eval();
  EXPECT_EQ(padded->generate({1, 2, 3}, 6, 0.0, 0), plain->generate({1, 2, 3}, 6, 0.0, 0));
}

TEST(Gpt, KvCacheDecodingMatchesFullForward) {
  torch::manual_seed(1);
  Gpt m(small());
  m->eval();
  std::vector<int64_t> prompt = {10, 20, 30};
  auto out = m->generate(prompt, 8, 0.0, 0);
  ASSERT_EQ(out.size(), 8u);
  // Greedy tokens from the cache must equal argmax of a full, uncached forward at each step.
  torch::NoGradGuard ng;
  std::vector<int64_t> seq = prompt;
  for (int64_t tok : out) {
    auto logits = m->forward(torch::tensor(seq).view({1, -1}));
    EXPECT_EQ(logits[0][static_cast<int64_t>(seq.size()) - 1].argmax().item<int64_t>(), tok);
    seq.push_back(tok);
  }
}

TEST(Gpt, GenerationPastTheBlockKeepsGoing) {
  torch::manual_seed(2);
  Gpt m(small());
  auto out = m->generate(std::vector<int64_t>(20, 65), 30, 0.8, 7);
  EXPECT_EQ(out.size(), 30u);
  EXPECT_EQ(out, m->generate(std::vector<int64_t>(20, 65), 30, 0.8, 7));  // seeded sampling
}

// Past the block the cache restarts from the newest block/2 tokens (gpt.h): each greedy token must
// be the argmax of an uncached forward over exactly that window, so positions after a restart
// (and a prompt longer than the block) are checked, not only determinism.
TEST(Gpt, GreedyGenerationPastTheBlockEqualsAFullForwardOverItsWindow) {
  torch::manual_seed(4);
  const ModelConfig c = small();
  Gpt m(c);
  m->eval();
  std::vector<int64_t> prompt;
  for (int64_t i = 0; i < 20; ++i) prompt.push_back((i * 37) % 256);  // longer than the block (16)
  const auto out = m->generate(prompt, 40, 0.0, 0);
  ASSERT_EQ(out.size(), 40u);
  torch::NoGradGuard ng;
  std::vector<int64_t> seq = prompt;
  size_t start = 0;
  int restarts = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    if (static_cast<int64_t>(seq.size() - start) > c.block) {
      start = seq.size() - static_cast<size_t>(c.block / 2);
      ++restarts;
    }
    const std::vector<int64_t> window(seq.begin() + static_cast<std::ptrdiff_t>(start), seq.end());
    auto logits = m->forward(torch::tensor(window).view({1, -1}));
    EXPECT_EQ(logits[0][static_cast<int64_t>(window.size()) - 1].argmax().item<int64_t>(), out[i]) << "token " << i;
    seq.push_back(out[i]);
  }
  EXPECT_GE(restarts, 4);  // the prompt's, then one every block/2 tokens
}

TEST(Gpt, ParameterCountAndFlopsFollowTheFormula) {
  auto c = small();
  Gpt m(c);
  const int64_t C = c.embd, L = c.layers;
  // wte + wpe + per block (2 LN, qkv, proj, fc, fc_proj) + ln_f
  int64_t expect = c.vocab * C + c.block * C +
                   L * (4 * C + (3 * C * C + 3 * C) + (C * C + C) + (4 * C * C + 4 * C) + (4 * C * C + C)) + 2 * C;
  EXPECT_EQ(m->parameter_count(), expect);
  double fpt = 6.0 * (12.0 * L * C * C + c.vocab * C) + 12.0 * L * c.block * C;
  EXPECT_DOUBLE_EQ(m->flops_per_token(), fpt);
}

TEST(Gpt, LongerThanBlockIsAClearError) {
  Gpt m(small());
  try {
    m->forward(torch::zeros({1, 17}, torch::kLong));
    FAIL() << "expected an error";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("exceeds model.block = 16"), std::string::npos);
  }
}

}  // namespace
}  // namespace frugal::gpt_test
