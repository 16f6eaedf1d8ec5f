// The Llama family's model (llama.h): grouped-query attention equals multi-head attention with the
// key/value heads repeated, decoding with the KV cache (rotary offsets, a sliding window) predicts
// what the full forward does, activation checkpointing changes no gradient, bf16 tracks fp32, the
// FLOP count and parameter names are the documented ones, and the config checks name the key.
// Against transformers itself: tests/interop/hf_llama_check.py.
#include "frugal/model/llama.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "frugal/core/compat.h"
#include "frugal/core/config_loader.h"
#include "frugal/core/errors.h"
#include "frugal/model/activation_checkpointing.h"

namespace frugal::llama_test {
namespace {

ModelConfig small() {
  ModelConfig m;
  m.arch = ModelConfig::Arch::kLlama;
  m.layers = 2;
  m.heads = 4;
  m.kv_heads = 2;
  m.embd = 64;
  m.mlp_width = 96;
  m.block = 32;
  m.vocab = 90;
  m.rope_theta = 1000.0;
  m.norm_eps = 1e-6;
  m.tie_embeddings = false;
  return m;
}

// Every parameter perturbed: norms away from one, so a missing or misplaced weight shows.
Llama perturbed(const ModelConfig& m, uint64_t seed) {
  torch::manual_seed(seed);
  Llama model(m);
  torch::NoGradGuard no_grad;
  for (auto& p : model->parameters()) p.add_(torch::randn_like(p) * 0.1);
  return model;
}

at::Tensor tokens(int64_t n, int64_t vocab, uint64_t seed) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  return at::randint(vocab, {1, n}, gen, at::TensorOptions().dtype(at::kLong));
}

TEST(Llama, GroupedQueryAttentionEqualsMultiHeadWithRepeatedKeyValueHeads) {
  const ModelConfig gqa = small();
  ModelConfig mha = gqa;
  mha.kv_heads = 4;
  Llama a = perturbed(gqa, 1);
  torch::manual_seed(2);
  Llama b(mha);
  const int64_t D = 16, H = 4, K = 2;
  {
    torch::NoGradGuard no_grad;
    auto pa = a->named_parameters(), pb = b->named_parameters();
    for (const auto& item : pa) {
      const std::string& name = item.key();
      at::Tensor src = item.value(), dst = pb[name];
      if (name.find("attn.qkv.weight") == std::string::npos) {
        dst.copy_(src);
        continue;
      }
      // MHA's k (and v) head h is GQA's kv head h / 2.
      dst.narrow(0, 0, H * D).copy_(src.narrow(0, 0, H * D));
      for (int64_t part = 0; part < 2; ++part)
        for (int64_t h = 0; h < H; ++h)
          dst.narrow(0, (H + part * H + h) * D, D).copy_(src.narrow(0, (H + part * K + h / (H / K)) * D, D));
    }
  }
  a->eval();
  b->eval();
  const at::Tensor idx = tokens(20, gqa.vocab, 3);
  torch::NoGradGuard no_grad;
  EXPECT_TRUE(torch::allclose(a->forward(idx), b->forward(idx), 1e-5, 1e-5));
}

// Greedy decoding with the cache against the argmax of the whole sequence re-run each step: the
// cache's rotary offsets and (with a window shorter than the sequence) its window must be the
// full forward's.
TEST(Llama, TheKvCacheDecodesWhatTheFullForwardPredicts) {
  for (int64_t window : {0, 5}) {
    ModelConfig m = small();
    m.sliding_window = window;
    Llama model = perturbed(m, 4);
    const at::Tensor prompt = tokens(6, m.vocab, 5);
    std::vector<int64_t> seq(prompt.data_ptr<int64_t>(), prompt.data_ptr<int64_t>() + 6);
    const std::vector<int64_t> cached = model->generate(seq, 16, 0.0, 0);
    model->eval();
    torch::NoGradGuard no_grad;
    for (int64_t i = 0; i < 16; ++i) {
      const at::Tensor logits = model->forward(torch::tensor(seq, torch::kLong).view({1, -1}));
      seq.push_back(logits[0][-1].argmax().item<int64_t>());
    }
    EXPECT_EQ(cached, std::vector<int64_t>(seq.begin() + 6, seq.end())) << "window " << window;
  }
}

std::vector<at::Tensor> grads(const ModelConfig& m, bool recompute) {
  Llama model = perturbed(m, 6);
  if (recompute) model->set_recompute(checkpoint_plan(*parse_activation_checkpointing("blocks"), m.layers));
  const at::Tensor x = tokens(24, m.vocab, 7), y = tokens(24, m.vocab, 8);
  torch::manual_seed(9);  // the dropout masks
  model->loss(x, y).backward();
  std::vector<at::Tensor> out;
  for (const auto& p : model->parameters()) out.push_back(p.grad().clone());
  return out;
}

TEST(Llama, ActivationCheckpointingChangesNoGradientEvenWithDropout) {
  for (double dropout : {0.0, 0.2}) {
    ModelConfig m = small();
    m.layers = 3;
    m.dropout = dropout;
    const auto plain = grads(m, false), recomputed = grads(m, true);
    ASSERT_EQ(plain.size(), recomputed.size());
    for (size_t i = 0; i < plain.size(); ++i) EXPECT_TRUE(torch::equal(plain[i], recomputed[i])) << i;
  }
}

TEST(Llama, Bf16AutocastTracksFp32) {
  const ModelConfig m = small();
  Llama model = perturbed(m, 10);
  const at::Tensor x = tokens(32, m.vocab, 11), y = tokens(32, m.vocab, 12);
  const double fp32 = model->loss(x, y).item<double>();
  at::Tensor loss;
  {
    compat::AutocastGuard guard(c10::DeviceType::CPU, at::kBFloat16, true);
    loss = model->loss(x, y);
  }
  loss.backward();
  EXPECT_NEAR(loss.item<double>(), fp32, 0.03 * fp32);
  for (const auto& p : model->parameters()) EXPECT_TRUE(p.grad().isfinite().all().item<bool>());
}

TEST(Llama, TheFlopCountHasGroupedKeysTheSwigluMlpAndTheHead) {
  const ModelConfig m = small();  // L 2, C 64, H 4, K 2, D 16, F 96, V 90, T 32
  const double matmuls = 2.0 * ((4 + 2 * 2) * 16 * 64 + 4 * 16 * 64 + 3 * 96 * 64) + 90 * 64;
  EXPECT_DOUBLE_EQ(Llama(m)->flops_per_token(), 6 * matmuls + 12.0 * 2 * 32 * 4 * 16);
  ModelConfig windowed = m;
  windowed.sliding_window = 8;
  EXPECT_DOUBLE_EQ(Llama(windowed)->flops_per_token(), 6 * matmuls + 12.0 * 2 * 8 * 4 * 16);
}

TEST(Llama, ParametersAreTheDocumentedOnes) {
  ModelConfig m = small();
  m.layers = 1;
  m.attention_bias = ModelConfig::AttentionBias::kQkv;
  m.qk_norm = true;
  std::map<std::string, std::vector<int64_t>> got;
  for (const auto& [name, t] : Llama(m)->named_parameter_list()) got[name] = t.sizes().vec();
  const std::map<std::string, std::vector<int64_t>> want = {{"embed.weight", {90, 64}},
                                                            {"h0.attn_norm.weight", {64}},
                                                            {"h0.attn.qkv.weight", {128, 64}},
                                                            {"h0.attn.qkv.bias", {128}},
                                                            {"h0.attn.proj.weight", {64, 64}},
                                                            {"h0.attn.q_norm.weight", {16}},
                                                            {"h0.attn.k_norm.weight", {16}},
                                                            {"h0.mlp_norm.weight", {64}},
                                                            {"h0.mlp.gate_up.weight", {192, 64}},
                                                            {"h0.mlp.down.weight", {64, 96}},
                                                            {"norm.weight", {64}},
                                                            {"lm_head.weight", {90, 64}}};
  EXPECT_EQ(got, want);
  m.tie_embeddings = true;
  m.attention_bias = ModelConfig::AttentionBias::kAll;
  int64_t biases = 0, heads = 0;
  for (const auto& [name, t] : Llama(m)->named_parameter_list()) {
    biases += name.find("bias") != std::string::npos;
    heads += name == "lm_head.weight";
  }
  EXPECT_EQ(biases, 2);  // q/k/v and the output projection's
  EXPECT_EQ(heads, 0);
}

std::string refusal(const ModelConfig& m) {
  try {
    validate_model_config(m);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(Llama, ConfigChecksNameTheKey) {
  ModelConfig gpt;
  gpt.kv_heads = 2;
  EXPECT_NE(refusal(gpt).find("model.kv_heads applies to the Llama family"), std::string::npos) << refusal(gpt);
  gpt = ModelConfig();
  gpt.tie_embeddings = false;
  EXPECT_NE(refusal(gpt).find("model.tie_embeddings"), std::string::npos);
  ModelConfig m = small();
  m.kv_heads = 3;
  EXPECT_NE(refusal(m).find("model.kv_heads = 3 must divide model.heads = 4"), std::string::npos) << refusal(m);
  m = small();
  m.head_dim = 15;
  EXPECT_NE(refusal(m).find("cannot be rotated"), std::string::npos) << refusal(m);
  m.head_dim = 24;  // its own width: heads need not divide embd
  m.heads = 3;
  m.kv_heads = 1;
  EXPECT_EQ(refusal(m), "");
  m = small();
  m.rope_scaling = ModelConfig::RopeScaling::kLlama3;
  m.rope_low_freq_factor = 4;
  EXPECT_NE(refusal(m).find("model.rope_high_freq_factor"), std::string::npos);
  // The GPT's one key a Llama would ignore: its MLP is SwiGLU whatever model.activation says.
  m = small();
  m.activation = ModelConfig::Activation::kGeluTanh;
  EXPECT_NE(refusal(m).find("model.activation applies to the GPT"), std::string::npos) << refusal(m);
}

}  // namespace
}  // namespace frugal::llama_test
