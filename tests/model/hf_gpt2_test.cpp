// Hugging Face GPT-2 directories: the round trip through the transformers layout, the shape a run
// takes from config.json, and the refusals. The logits against transformers itself are
// tests/interop/hf_gpt2_check.py (CTest hf_gpt2_interop).
#include "frugal/model/hf_gpt2.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>

#include <nlohmann/json.hpp>

#include "frugal/core/errors.h"
#include "frugal/model/gpt.h"
#include "test_util.h"

namespace frugal::hf_gpt2_test {
namespace {

ModelConfig small() {
  ModelConfig c;
  c.layers = 2;
  c.heads = 2;
  c.embd = 16;
  c.block = 8;
  c.vocab = 40;
  c.activation = ModelConfig::Activation::kGeluTanh;
  c.norm_eps = 1e-3;
  return c;
}

nlohmann::json gpt2_config(const ModelConfig& m) { return nlohmann::json::parse(hf_gpt2_config_json(m)); }

void write_config(const std::string& dir, const nlohmann::json& j) { test::write_text(dir + "/config.json", j.dump()); }

// What the exception says, or "" when none is thrown.
template <class F>
std::string message_of(F f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(HfGpt2, WrittenAndReadBackEveryParameterIsBitwiseTheSame) {
  test::TempDir tmp;
  torch::manual_seed(3);
  Gpt a(small());
  const std::string dir = tmp.file("hf");
  write_hf_gpt2(a->named_parameter_list(), small(), dir, at::kFloat);
  const ModelConfig back = read_hf_gpt2_config(dir);
  EXPECT_EQ(back.layers, 2);
  EXPECT_EQ(back.heads, 2);
  EXPECT_EQ(back.embd, 16);
  EXPECT_EQ(back.block, 8);
  EXPECT_EQ(back.vocab, 40);
  EXPECT_EQ(back.activation, ModelConfig::Activation::kGeluTanh);
  EXPECT_DOUBLE_EQ(back.norm_eps, 1e-3);
  torch::manual_seed(4);
  Gpt b(back);
  load_hf_gpt2(b->named_parameter_list(), back, dir);
  const auto pa = a->named_parameter_list(), pb = b->named_parameter_list();
  ASSERT_EQ(pa.size(), pb.size());
  for (size_t i = 0; i < pa.size(); ++i) EXPECT_TRUE(torch::equal(pa[i].second, pb[i].second)) << pa[i].first;
}

TEST(HfGpt2, ConvOneDWeightsAreStoredInputsFirstUnderGpt2Names) {
  torch::manual_seed(5);
  Gpt a(small());
  const NamedTensors hf = to_hf_gpt2_tensors(a->named_parameter_list(), small(), at::kFloat);
  auto find = [&](const std::string& n) -> at::Tensor {
    for (const auto& [k, t] : hf)
      if (k == n) return t;
    ADD_FAILURE() << n << " is not written";
    return {};
  };
  const at::Tensor c_attn = find("transformer.h.1.attn.c_attn.weight");
  EXPECT_EQ(c_attn.sizes(), (std::vector<int64_t>{16, 48}));  // (in, out): GPT-2's Conv1D
  for (const auto& [k, t] : a->named_parameter_list())
    if (k == "h1.attn.qkv.weight") {
      EXPECT_TRUE(torch::equal(c_attn, t.t()));
    }
  EXPECT_EQ(find("transformer.h.0.mlp.c_proj.weight").sizes(), (std::vector<int64_t>{64, 16}));
  EXPECT_EQ(find("transformer.wpe.weight").sizes(), (std::vector<int64_t>{8, 16}));
  for (const auto& [k, t] : hf) EXPECT_NE(k, "lm_head.weight") << "the tied head is left out, as save_pretrained does";
}

TEST(HfGpt2, ASmallerBlockTakesTheFirstPositionEmbeddings) {
  test::TempDir tmp;
  torch::manual_seed(6);
  Gpt a(small());
  write_hf_gpt2(a->named_parameter_list(), small(), tmp.file("hf"), at::kFloat);
  ModelConfig shorter = small();
  shorter.block = 5;
  Gpt b(shorter);
  load_hf_gpt2(b->named_parameter_list(), shorter, tmp.file("hf"));
  at::Tensor wpe_a, wpe_b;
  for (const auto& [k, t] : a->named_parameter_list())
    if (k == "wpe.weight") wpe_a = t;
  for (const auto& [k, t] : b->named_parameter_list())
    if (k == "wpe.weight") wpe_b = t;
  EXPECT_TRUE(torch::equal(wpe_b, wpe_a.narrow(0, 0, 5)));
}

TEST(HfGpt2, TheRunTakesUnsetKeysFromConfigJsonAndRefusesAConflict) {
  test::TempDir tmp;
  const std::string dir = tmp.file("hf");
  torch::manual_seed(7);
  write_hf_gpt2(Gpt(small())->named_parameter_list(), small(), dir, at::kFloat);
  ResolvedConfig rc = resolve_config("", {"model.init_from=hf:" + dir, "model.block=6"}, {});
  adopt_hf_shape(rc);
  EXPECT_EQ(rc.config.model.layers, 2);
  EXPECT_EQ(rc.config.model.vocab, 40);
  EXPECT_EQ(rc.config.model.block, 6) << "a smaller block set on purpose is kept";
  EXPECT_EQ(rc.config.model.activation, ModelConfig::Activation::kGeluTanh);
  EXPECT_NE(rc.origins.at("model.layers").where.find("config.json n_layer"), std::string::npos);

  ResolvedConfig wider = resolve_config("", {"model.init_from=hf:" + dir, "model.embd=32"}, {});
  const std::string why = message_of([&] { adopt_hf_shape(wider); });
  EXPECT_NE(why.find("model.embd = 32"), std::string::npos) << why;
  EXPECT_NE(why.find("n_embd = 16"), std::string::npos) << why;
  ResolvedConfig longer = resolve_config("", {"model.init_from=hf:" + dir, "model.block=9"}, {});
  EXPECT_NE(message_of([&] { adopt_hf_shape(longer); }).find("not larger"), std::string::npos);
}

// hf:NAME that is not a directory is looked up in the Hugging Face cache, as transformers would;
// not there, the message says how to get it.
TEST(HfGpt2, AHubIdIsFoundInTheLocalCacheAndOtherwiseTheMessageSaysHowToGetIt) {
  test::TempDir tmp;
  const std::string snapshot = tmp.file("hub/models--org--tiny-gpt2/snapshots/0123abc");
  std::filesystem::create_directories(tmp.file("hub/models--org--tiny-gpt2/refs"));
  test::write_text(tmp.file("hub/models--org--tiny-gpt2/refs/main"), "0123abc\n");
  write_hf_gpt2(Gpt(small())->named_parameter_list(), small(), snapshot, at::kFloat);
  ::setenv("HF_HUB_CACHE", tmp.file("hub").c_str(), 1);
  ModelConfig m;
  m.init_from = "hf:org/tiny-gpt2";
  EXPECT_EQ(hf_init_dir(m), snapshot);
  ResolvedConfig rc = resolve_config("", {"model.init_from=hf:org/tiny-gpt2"}, {});
  adopt_hf_shape(rc);
  EXPECT_EQ(rc.config.model.vocab, 40);
  m.init_from = "hf:gpt2";
  const std::string why = message_of([&] { read_hf_gpt2_config(hf_init_dir(m)); });
  ::unsetenv("HF_HUB_CACHE");
  EXPECT_NE(why.find("the Hugging Face cache " + tmp.file("hub") + " has no snapshot"), std::string::npos) << why;
  EXPECT_NE(why.find("huggingface-cli download gpt2"), std::string::npos) << why;
  // A path (absolute, ./relative or deeper than org/name) is not a hub id: the folder is missing.
  for (const std::string& path : {tmp.file("nonexist"), std::string("./nonexist"), std::string("a/b/c")}) {
    m.init_from = "hf:" + path;
    const std::string missing = message_of([&] { read_hf_gpt2_config(hf_init_dir(m)); });
    EXPECT_NE(missing.find("\"hf:" + path + "\": no such directory"), std::string::npos) << missing;
    EXPECT_EQ(missing.find("huggingface-cli"), std::string::npos) << missing;
  }
}

TEST(HfGpt2, ConfigsFrugalCannotRepresentAreRefusedByKey) {
  test::TempDir tmp;
  const std::string dir = tmp.file("hf");
  std::filesystem::create_directories(dir);
  const std::vector<std::pair<std::string, nlohmann::json>> bad = {{"model_type", "llama"},
                                                                   {"tie_word_embeddings", false},
                                                                   {"n_inner", 99},
                                                                   {"activation_function", "relu"},
                                                                   {"add_cross_attention", true},
                                                                   {"scale_attn_by_inverse_layer_idx", true},
                                                                   {"n_head", 3},
                                                                   {"n_layer", 0}};
  for (const auto& [key, value] : bad) {
    nlohmann::json j = gpt2_config(small());
    j[key] = value;
    write_config(dir, j);
    const std::string why = message_of([&] { read_hf_gpt2_config(dir); });
    EXPECT_NE(why.find("\"" + key + "\""), std::string::npos) << key << ": " << why;
    EXPECT_NE(why.find("config.json"), std::string::npos) << why;
  }
  nlohmann::json j = gpt2_config(small());
  j.erase("n_embd");
  write_config(dir, j);
  EXPECT_NE(message_of([&] { read_hf_gpt2_config(dir); }).find("\"n_embd\" is missing"), std::string::npos);
  EXPECT_NE(message_of([&] { read_hf_gpt2_config(tmp.file("nowhere")); }).find("no such directory"), std::string::npos);
}

TEST(HfGpt2, WeightsThatDoNotFitAreBadInputNamingTheFileAndTensor) {
  test::TempDir tmp;
  const std::string dir = tmp.file("hf");
  torch::manual_seed(8);
  Gpt a(small());
  write_hf_gpt2(a->named_parameter_list(), small(), dir, at::kFloat);
  // One tensor short.
  NamedTensors t = to_hf_gpt2_tensors(a->named_parameter_list(), small(), at::kFloat);
  t.erase(t.begin() + 3);
  save_safetensors(dir + "/model.safetensors", t, {{"format", "pt"}});
  Gpt b(small());
  std::string why = message_of([&] { load_hf_gpt2(b->named_parameter_list(), small(), dir); });
  EXPECT_NE(why.find("model.safetensors"), std::string::npos) << why;
  EXPECT_NE(why.find("is missing"), std::string::npos) << why;
  // A head that is not the embedding.
  t = to_hf_gpt2_tensors(a->named_parameter_list(), small(), at::kFloat);
  t.emplace_back("lm_head.weight", torch::randn({40, 16}));
  save_safetensors(dir + "/model.safetensors", t, {{"format", "pt"}});
  why = message_of([&] { load_hf_gpt2(b->named_parameter_list(), small(), dir); });
  EXPECT_NE(why.find("lm_head.weight differs"), std::string::npos) << why;
  // Pickled weights only.
  std::filesystem::remove(dir + "/model.safetensors");
  test::write_text(dir + "/pytorch_model.bin", "x");
  why = message_of([&] { load_hf_gpt2(b->named_parameter_list(), small(), dir); });
  EXPECT_NE(why.find("safe_serialization=True"), std::string::npos) << why;
}

TEST(HfGpt2, ExportNeverReplacesAnExistingDirectory) {
  test::TempDir tmp;
  std::filesystem::create_directories(tmp.file("taken"));
  test::write_text(tmp.file("taken/keep.txt"), "mine");
  EXPECT_NE(message_of([&] {
              write_hf_gpt2(Gpt(small())->named_parameter_list(), small(), tmp.file("taken"), at::kFloat);
            }).find("already exists"),
            std::string::npos);
  EXPECT_EQ(test::read_text(tmp.file("taken/keep.txt")), "mine");
}

TEST(HfGpt2, TheTanhActivationIsGpt2sAndDiffersFromTheExactOne) {
  torch::manual_seed(9);
  ModelConfig exact = small();
  exact.activation = ModelConfig::Activation::kGelu;
  Gpt a(small()), b(exact);
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < a->parameters().size(); ++i) b->parameters()[i].copy_(a->parameters()[i]);
  // Large enough weights that the two GELUs' difference (up to ~1e-3) shows in the logits.
  for (auto& p : a->parameters()) p.mul_(20);
  for (auto& p : b->parameters()) p.mul_(20);
  a->eval();
  b->eval();
  const at::Tensor idx = torch::randint(0, 40, {1, 8}, torch::kLong);
  EXPECT_FALSE(torch::allclose(a->forward(idx), b->forward(idx), 1e-6, 1e-6));
}

}  // namespace
}  // namespace frugal::hf_gpt2_test
