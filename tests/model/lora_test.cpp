// Low-rank adapters in the model (model/lora.h): an adapted model computes what the merged weights
// compute, for either family, LoRA and DoRA, all projections or some (parts of a fused matrix);
// the merged weights are W + s B A (DoRA: rows rescaled by m / ||W + s B A||), computed here
// independently; fresh adapters change nothing; only the adapters train; targets frugal cannot
// adapt are refused by name.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <string>

#include "frugal/core/errors.h"
#include "frugal/model/lora.h"
#include "frugal/model/model_family.h"
#include "frugal/model/weights.h"
#include "test_util.h"

namespace frugal::lora_test {
namespace {

ModelConfig tiny(ModelConfig::Arch arch) {
  ModelConfig m = test::tiny_model(arch);
  if (arch == ModelConfig::Arch::kLlama)
    m.attention_bias = ModelConfig::AttentionBias::kQkv;  // biases under the adapted rows
  return m;
}

LoraConfig lora(int64_t rank, const std::string& targets, bool dora) {
  LoraConfig l;
  l.rank = rank;
  l.alpha = 8;
  l.targets = targets;
  l.dora = dora;
  l.base_dtype = LoraConfig::BaseDtype::kFp32;  // exact: the comparisons below are to 1e-5
  return l;
}

// Non-zero B (and magnitudes away from the norms), so that the adapters change the product.
void perturb_adapters(CausalLmImpl& model) {
  torch::NoGradGuard no_grad;
  for (auto& p : model.named_parameters(true))
    if (is_adapter_parameter(p.key())) p.value().add_(torch::randn_like(p.value()) * 0.05);
}

// `to` takes `from`'s values (two models of one configuration, before adapters).
void copy_parameters(CausalLmImpl& from, CausalLmImpl& to) {
  torch::NoGradGuard no_grad;
  const NamedTensors src = from.named_parameter_list(), dst = to.named_parameter_list();
  for (size_t i = 0; i < src.size(); ++i) dst[i].second.copy_(src[i].second);
}

at::Tensor logits(CausalLmImpl& model, const at::Tensor& idx) {
  torch::NoGradGuard no_grad;
  model.eval();
  return model.forward(idx).contiguous();
}

// W + s B A for each part, DoRA's rows rescaled, from the parameters alone.
at::Tensor expected_merged(const at::Tensor& w, const LoraSiteImpl& site, double scale, bool dora) {
  at::Tensor out = w.detach().clone();
  for (const LoraSiteImpl::Part& p : site.parts()) {
    const at::Tensor v = w.narrow(0, p.row0, p.rows) + scale * at::mm(p.b, p.a);
    const at::Tensor rows = dora ? v * (p.magnitude / at::linalg_vector_norm(v, 2, {1})).unsqueeze(1) : v;
    out.narrow(0, p.row0, p.rows).copy_(rows.detach());
  }
  return out;
}

void expect_adapted_equals_merged(ModelConfig::Arch arch, const std::string& targets, bool dora, int64_t parts) {
  SCOPED_TRACE(std::string(arch == ModelConfig::Arch::kGpt ? "gpt" : "llama") + " targets " + targets +
               (dora ? " dora" : ""));
  torch::manual_seed(3);
  const ModelConfig m = tiny(arch);
  CausalLm model = make_causal_lm(m);
  const at::Tensor idx = torch::randint(0, m.vocab, {2, 12});
  const at::Tensor base = logits(*model, idx);
  const LoraSetup s = install_lora(*model, lora(4, targets, dora));
  EXPECT_EQ(s.adapted_modules, parts);
  EXPECT_DOUBLE_EQ(s.scale, 2.0);
  // Fresh adapters (B = 0; DoRA's m = ||W||) leave the model as it was.
  EXPECT_TRUE(logits(*model, idx).allclose(base, 0, 1e-6));
  perturb_adapters(*model);
  const at::Tensor adapted = logits(*model, idx);
  EXPECT_GT((adapted - base).abs().max().item<double>(), 1e-3) << "the adapters change nothing";

  for (const AdaptableProduct& p : model->adaptable_products()) {
    if (!*p.adapters) continue;
    at::Tensor w;
    for (const auto& [name, t] : model->named_parameter_list())
      if (name == p.weight) w = t;
    EXPECT_TRUE((*p.adapters)->merged(w).allclose(expected_merged(w, **p.adapters, 2.0, dora), 1e-5, 1e-6)) << p.weight;
  }
  CausalLm plain = make_causal_lm(m);
  const NamedTensors merged = merged_parameter_list(*model);
  ASSERT_EQ(merged.size(), plain->named_parameter_list().size());
  SafetensorsFile file{merged, {}};
  load_parameters(plain->named_parameter_list(), file, "merged");
  const double diff = (logits(*plain, idx) - adapted).abs().max().item<double>();
  EXPECT_LT(diff, 1e-5) << "the adapted model and its merged weights disagree";
}

TEST(Lora, AnAdaptedModelComputesWhatItsMergedWeightsCompute) {
  // Llama: q, k, v are one matrix (3 parts), gate and up another (2); 7 modules a block.
  expect_adapted_equals_merged(ModelConfig::Arch::kLlama, "all-linear", false, 14);
  expect_adapted_equals_merged(ModelConfig::Arch::kLlama, "all-linear", true, 14);
  // Some rows of a fused matrix: q and v without k, up without gate.
  expect_adapted_equals_merged(ModelConfig::Arch::kLlama, "q_proj, v_proj, up_proj", false, 6);
  expect_adapted_equals_merged(ModelConfig::Arch::kLlama, "q_proj, v_proj, up_proj", true, 6);
  // GPT-2: c_proj names both the attention's and the MLP's output projection, as in PEFT.
  expect_adapted_equals_merged(ModelConfig::Arch::kGpt, "c_attn,c_proj,c_fc", false, 8);
  expect_adapted_equals_merged(ModelConfig::Arch::kGpt, "c_proj", true, 4);
}

TEST(Lora, OnlyTheAdaptersTrain) {
  torch::manual_seed(5);
  const ModelConfig m = tiny(ModelConfig::Arch::kLlama);
  CausalLm model = make_causal_lm(m);
  const int64_t all = model->parameter_count();
  const LoraSetup s = install_lora(*model, lora(2, "all-linear", true));
  // Per block: A (2 x in), B (rows x 2) and m (rows) for q (32 rows), k, v (16), o (32), gate, up (48), down
  // (32); every input is 32 wide but down's (48).
  const int64_t rows = 32 + 16 + 16 + 32 + 48 + 48 + 32;
  const int64_t per_block = 2 * (32 * 6 + 48) + 2 * rows + rows;
  EXPECT_EQ(s.trainable_elements, 2 * per_block);
  EXPECT_EQ(s.frozen_elements, all);
  const at::Tensor idx = torch::randint(0, m.vocab, {2, 12});
  model->train();
  model->loss(idx, torch::randint(0, m.vocab, {2, 12})).backward();
  int64_t with_grad = 0;
  for (const auto& [name, p] : model->named_parameter_list()) {
    const bool adapter = name.find(".lora.") != std::string::npos;
    EXPECT_EQ(p.requires_grad(), adapter) << name;
    if (!adapter) {
      EXPECT_FALSE(p.grad().defined()) << name;
    }
    if (adapter && name.find("_B") != std::string::npos) {
      ASSERT_TRUE(p.grad().defined()) << name;
      EXPECT_GT(p.grad().abs().max().item<double>(), 0) << name;  // B gets a gradient at B = 0
      ++with_grad;
    }
  }
  EXPECT_EQ(with_grad, 14);
}

TEST(Lora, ABf16BaseHalvesTheAdaptedWeightsAndStaysCloseToTheFp32One) {
  torch::manual_seed(7);
  const ModelConfig m = tiny(ModelConfig::Arch::kLlama);
  CausalLm exact = make_causal_lm(m), half = make_causal_lm(m);
  copy_parameters(*exact, *half);
  install_lora(*exact, lora(4, "all-linear", true));
  LoraConfig l = lora(4, "all-linear", true);
  l.base_dtype = LoraConfig::BaseDtype::kBf16;
  torch::manual_seed(8);
  install_lora(*half, l);
  int64_t bytes_exact = 0, bytes_half = 0;
  for (const AdaptableProduct& p : half->adaptable_products())
    for (const auto& [name, t] : half->named_parameter_list())
      if (name == p.weight) {
        EXPECT_EQ(t.scalar_type(), at::kBFloat16) << name;
        bytes_half += t.numel() * static_cast<int64_t>(t.element_size());
        bytes_exact += t.numel() * 4;
      }
  EXPECT_EQ(2 * bytes_half, bytes_exact);
  const at::Tensor idx = torch::randint(0, m.vocab, {2, 12});
  const double diff = (logits(*exact, idx) - logits(*half, idx)).abs().max().item<double>();
  EXPECT_GT(diff, 0) << "the bf16 base is not rounded";
  EXPECT_LT(diff, 2e-2);
  for (const auto& [name, t] : merged_parameter_list(*half)) EXPECT_EQ(t.scalar_type(), at::kFloat) << name;
}

// The weight a parameter list holds under `name`.
at::Tensor find_param(CausalLmImpl& model, const std::string& name) {
  for (const auto& [n, t] : model.named_parameter_list())
    if (n == name) return t;
  return {};
}

// An NF4 base computes what an fp32 base holding its dequantised values computes (each Hugging
// Face module quantised on its own, as NF4Tensor quantises that module's weight), gradients
// included, in a quarter of bf16's bytes.
void expect_nf4_equals_dequantised(bool dora) {
  SCOPED_TRACE(dora ? "dora" : "lora");
  torch::manual_seed(11);
  const ModelConfig m = tiny(ModelConfig::Arch::kLlama);
  CausalLm quant = make_causal_lm(m), dense = make_causal_lm(m);
  copy_parameters(*quant, *dense);
  const int64_t weights = quant->parameter_count();
  LoraConfig l = lora(4, "all-linear", dora);
  l.base_dtype = LoraConfig::BaseDtype::kNf4;
  torch::manual_seed(12);
  const LoraSetup s = install_lora(*quant, l);
  EXPECT_EQ(s.base_dtype, "nf4");
  EXPECT_EQ(quant->parameter_count(), weights + s.trainable_elements) << "an NF4 base counts its weights";
  EXPECT_LT(s.base_bytes, 0.27 * static_cast<double>(s.base_bytes_bf16));
  EXPECT_GT(s.base_bytes, 0.25 * static_cast<double>(s.base_bytes_bf16));
  {
    // The dense copy: each module's rows replaced by their NF4 values.
    torch::NoGradGuard no_grad;
    for (const AdaptableProduct& p : quant->adaptable_products()) {
      ASSERT_TRUE(*p.adapters);
      EXPECT_EQ(find_param(*quant, p.weight).scalar_type(), at::kByte) << p.weight;
      const at::Tensor w = find_param(*dense, p.weight);
      for (const LoraSiteImpl::Part& part : (*p.adapters)->parts()) {
        const at::Tensor rows = w.narrow(0, part.row0, part.rows);
        rows.copy_(nf4_dequantize(nf4_quantize(rows), rows.sizes()));
      }
    }
  }
  torch::manual_seed(12);
  install_lora(*dense, lora(4, "all-linear", dora));
  perturb_adapters(*quant);
  {
    torch::NoGradGuard no_grad;
    for (const auto& [name, t] : quant->named_parameter_list())
      if (is_adapter_parameter(name)) find_param(*dense, name).copy_(t);
  }
  const at::Tensor idx = torch::randint(0, m.vocab, {2, 12}), y = torch::randint(0, m.vocab, {2, 12});
  EXPECT_TRUE(logits(*quant, idx).allclose(logits(*dense, idx), 1e-5, 1e-5));
  quant->train();
  dense->train();
  quant->loss(idx, y).backward();
  dense->loss(idx, y).backward();
  int64_t compared = 0;
  for (const auto& [name, t] : quant->named_parameter_list()) {
    if (!is_adapter_parameter(name)) {
      EXPECT_FALSE(t.requires_grad()) << name;
      continue;
    }
    ASSERT_TRUE(t.grad().defined()) << name;
    EXPECT_TRUE(t.grad().allclose(find_param(*dense, name).grad(), 1e-4, 1e-6)) << name;
    ++compared;
  }
  EXPECT_EQ(compared, dora ? 42 : 28);
  // The merged export: the dequantised base plus the adapters.
  const NamedTensors merged = merged_parameter_list(*quant), want = merged_parameter_list(*dense);
  ASSERT_EQ(merged.size(), want.size());
  for (size_t i = 0; i < merged.size(); ++i)
    EXPECT_TRUE(merged[i].second.allclose(want[i].second, 1e-6, 1e-6)) << merged[i].first;
}

TEST(Lora, AnNf4BaseComputesWhatItsDequantisedValuesCompute) {
  expect_nf4_equals_dequantised(false);
  expect_nf4_equals_dequantised(true);
}

TEST(Lora, TargetsTheModelDoesNotHaveAreRefusedByName) {
  auto error = [](ModelConfig::Arch arch, const std::string& targets) -> std::string {
    CausalLm model = make_causal_lm(tiny(arch));
    try {
      install_lora(*model, lora(4, targets, false));
    } catch (const ConfigError& e) {
      return e.what();
    }
    return "";
  };
  std::string e = error(ModelConfig::Arch::kGpt, "q_proj");
  EXPECT_NE(e.find("\"q_proj\" names no projection"), std::string::npos) << e;
  EXPECT_NE(e.find("c_attn"), std::string::npos) << e;
  e = error(ModelConfig::Arch::kLlama, "q_proj,lm_head");
  EXPECT_NE(e.find("\"lm_head\""), std::string::npos) << e;
  EXPECT_NE(e.find("gate_proj"), std::string::npos) << e;
  EXPECT_NE(error(ModelConfig::Arch::kLlama, "").find("lora.targets is empty"), std::string::npos);
  // A list whose quotes the shell took (or left half): the refusal says how to write one.
  e = error(ModelConfig::Arch::kLlama, "[q_proj");
  EXPECT_NE(e.find("as a TOML list of quoted strings"), std::string::npos) << e;
  EXPECT_EQ(error(ModelConfig::Arch::kGpt, "q_proj").find("TOML list"), std::string::npos);
  // A full module name selects one layer's module only.
  CausalLm model = make_causal_lm(tiny(ModelConfig::Arch::kLlama));
  EXPECT_EQ(install_lora(*model, lora(4, "model.layers.1.self_attn.q_proj", false)).adapted_modules, 1);
}

}  // namespace
}  // namespace frugal::lora_test
