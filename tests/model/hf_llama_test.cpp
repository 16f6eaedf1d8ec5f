// Hugging Face Llama-family directories (hf_checkpoint.h, llama/hf_llama.cpp): a sharded round
// trip through the transformers layout, config.json in both layouts transformers writes, the shape
// a run takes from it, and everything frugal cannot represent refused by file and field. The
// logits against transformers itself: tests/interop/hf_llama_check.py (CTest hf_llama_interop).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>

#include <nlohmann/json.hpp>

#include "frugal/core/errors.h"
#include "frugal/model/hf_checkpoint.h"
#include "frugal/model/llama.h"
#include "frugal/model/model_family.h"
#include "test_util.h"

namespace frugal::hf_llama_test {
namespace {
namespace fs = std::filesystem;
using nlohmann::json;

ModelConfig small() {
  ModelConfig m;
  m.arch = ModelConfig::Arch::kLlama;
  m.layers = 2;
  m.heads = 4;
  m.kv_heads = 2;
  m.embd = 32;
  m.head_dim = 12;
  m.mlp_width = 40;
  m.block = 16;
  m.vocab = 50;
  m.norm_eps = 1e-6;
  m.rope_theta = 5e5;
  m.rope_scaling = ModelConfig::RopeScaling::kLlama3;
  m.rope_factor = 8;
  m.rope_low_freq_factor = 1;
  m.rope_high_freq_factor = 4;
  m.rope_original_block = 8;
  m.attention_bias = ModelConfig::AttentionBias::kAll;
  m.qk_norm = true;
  m.tie_embeddings = false;
  return m;
}

json config_of(const ModelConfig& m) { return model_family(m.arch).hf_config(m, nullptr); }

void write_dir(const ModelConfig& m, const std::string& dir, int64_t shard_bytes, uint64_t seed) {
  torch::manual_seed(seed);
  CausalLm model = make_causal_lm(m);
  write_hf_dir(to_hf_tensors(model->named_parameter_list(), model_family(m.arch).hf_layout(m), at::kFloat),
               config_of(m).dump(2), dir, {}, shard_bytes);
}

template <class F>
std::string message_of(F f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(HfLlama, WrittenInShardsAndReadBackEveryParameterIsBitwiseTheSame) {
  test::TempDir tmp;
  const ModelConfig m = small();
  write_dir(m, tmp.file("hf"), 8000, 1);
  EXPECT_TRUE(fs::exists(tmp.file("hf/model.safetensors.index.json")));
  EXPECT_FALSE(fs::exists(tmp.file("hf/model.safetensors")));
  const json index = json::parse(test::read_text(tmp.file("hf/model.safetensors.index.json")));
  EXPECT_GT(index["weight_map"].size(), 20u);
  EXPECT_EQ(index["weight_map"]["model.layers.1.self_attn.k_proj.weight"].get<std::string>().rfind("model-000", 0), 0u);
  const ModelConfig back = read_hf_model_config(tmp.file("hf"));
  const Config a =
                   [&] {
                     Config c;
                     c.model = m;
                     return c;
                   }(),
               b = [&] {
                 Config c;
                 c.model = back;
                 return c;
               }();
  for (const KeySpec& k : config_schema())
    if (k.section() == "model") {
      EXPECT_EQ(k.get(a), k.get(b)) << k.key;
    }
  torch::manual_seed(1);
  CausalLm original = make_causal_lm(m);
  torch::manual_seed(2);
  CausalLm loaded = make_causal_lm(back);
  load_hf_model(loaded->named_parameter_list(), back, tmp.file("hf"));
  const auto pa = original->named_parameter_list(), pb = loaded->named_parameter_list();
  ASSERT_EQ(pa.size(), pb.size());
  for (size_t i = 0; i < pa.size(); ++i) EXPECT_TRUE(torch::equal(pa[i].second, pb[i].second)) << pa[i].first;
}

// transformers 4.x kept rope_theta at the top and the scaling in rope_scaling ("type" in older
// files, "rope_type" later); 5.x writes rope_parameters. Each reads as the same model.
TEST(HfLlama, ConfigJsonInEitherLayoutIsTheSameModel) {
  test::TempDir tmp;
  const ModelConfig m = small();
  write_dir(m, tmp.file("hf"), 0, 3);
  json j = json::parse(test::read_text(tmp.file("hf/config.json")));
  j.erase("rope_parameters");
  j["rope_scaling"] = {{"type", "llama3"},
                       {"factor", 8.0},
                       {"low_freq_factor", 1.0},
                       {"high_freq_factor", 4.0},
                       {"original_max_position_embeddings", 8}};
  for (const char* type_key : {"type", "rope_type"}) {
    json old = j;
    if (std::string(type_key) == "rope_type") {
      old["rope_scaling"].erase("type");
      old["rope_scaling"]["rope_type"] = "llama3";
    }
    test::write_text(tmp.file("hf/config.json"), old.dump());
    const ModelConfig back = read_hf_model_config(tmp.file("hf"));
    EXPECT_EQ(back.rope_scaling, ModelConfig::RopeScaling::kLlama3) << type_key;
    EXPECT_EQ(back.rope_theta, m.rope_theta);
    EXPECT_EQ(back.rope_original_block, 8);
    EXPECT_EQ(back.rope_high_freq_factor, 4.0);
  }
}

TEST(HfLlama, WhatFrugalCannotRepresentIsRefusedByFileAndField) {
  test::TempDir tmp;
  write_dir(small(), tmp.file("hf"), 0, 4);
  const json good = json::parse(test::read_text(tmp.file("hf/config.json")));
  const std::vector<std::tuple<std::string, json, std::string>> bad = {
      {"mlp_bias", true, "no biases"},
      {"hidden_act", "gelu", "SwiGLU"},
      {"rope_parameters", {{"rope_type", "dynamic"}, {"rope_theta", 1e4}, {"factor", 2.0}}, "rope_type"},
      {"partial_rotary_factor", 0.5, "every channel"},
      {"quantization_config", {{"quant_method", "gptq"}}, "unquantized"},
      {"layer_types", {"full_attention", "sliding_attention"}, "layer_types"},
      {"num_hidden_layers", 1000000000, "out of range"},
      {"hidden_size", 48.5, "whole number"},
      {"rms_norm_eps", "1e-6", "must be a number"},
      {"num_key_value_heads", 3, "must divide model.heads"},
      {"model_type", "gemma", "\"llama\", \"qwen2\", \"qwen3\", \"mistral\""}};
  for (const auto& [key, value, says] : bad) {
    json j = good;
    j[key] = value;
    if (key == "partial_rotary_factor") j.erase("rope_parameters");
    test::write_text(tmp.file("hf/config.json"), j.dump());
    const std::string why = message_of([&] { read_hf_model_config(tmp.file("hf")); });
    EXPECT_NE(why.find(says), std::string::npos) << key << ": " << why;
    EXPECT_NE(why.find("config.json"), std::string::npos) << key << ": " << why;
  }
  json qwen = good;
  qwen["model_type"] = "qwen2";
  qwen["use_sliding_window"] = true;
  test::write_text(tmp.file("hf/config.json"), qwen.dump());
  EXPECT_NE(message_of([&] { read_hf_model_config(tmp.file("hf")); }).find("\"use_sliding_window\""),
            std::string::npos);
  test::write_text(tmp.file("hf/config.json"), R"({"model_type": "llama", "rms_norm_eps": 1e999})");
  EXPECT_NE(message_of([&] { read_hf_model_config(tmp.file("hf")); }).find("not valid JSON"), std::string::npos);
}

TEST(HfLlama, TheRunTakesTheCheckpointsShapeAndAnUnsetBlockUpTo4096) {
  test::TempDir tmp;
  ModelConfig m = small();
  m.block = 131072;
  m.rope_original_block = 8192;
  write_dir(m, tmp.file("hf"), 0, 5);
  ResolvedConfig rc = resolve_config("", {"model.init_from=hf:" + tmp.file("hf")}, {});
  adopt_hf_shape(rc);
  EXPECT_EQ(rc.config.model.arch, ModelConfig::Arch::kLlama);
  EXPECT_EQ(rc.config.model.kv_heads, 2);
  EXPECT_EQ(rc.config.model.head_dim, 12);
  EXPECT_TRUE(rc.config.model.qk_norm);
  EXPECT_EQ(rc.config.model.block, 4096);
  EXPECT_NE(rc.origins.at("model.block").where.find("131072, capped at 4096"), std::string::npos);
  EXPECT_NE(rc.origins.at("model.kv_heads").where.find("num_key_value_heads"), std::string::npos);
  ResolvedConfig longer = resolve_config("", {"model.init_from=hf:" + tmp.file("hf"), "model.block=8192"}, {});
  adopt_hf_shape(longer);
  EXPECT_EQ(longer.config.model.block, 8192);
  ResolvedConfig other =
      resolve_config("", {"model.init_from=hf:" + tmp.file("hf"), "model.arch=llama", "model.kv_heads=4"}, {});
  const std::string why = message_of([&] { adopt_hf_shape(other); });
  EXPECT_NE(why.find("model.kv_heads = 4"), std::string::npos) << why;
  EXPECT_NE(why.find("num_key_value_heads = 2"), std::string::npos) << why;
}

TEST(HfLlama, WeightsThatDoNotFitAreNamedByFileAndTensor) {
  test::TempDir tmp;
  ModelConfig m = small();
  m.tie_embeddings = true;
  write_dir(m, tmp.file("hf"), 8000, 6);
  const std::string dir = tmp.file("hf");
  torch::manual_seed(7);
  CausalLm model = make_causal_lm(m);
  // A shard gone: named by the index.
  const json index = json::parse(test::read_text(dir + "/model.safetensors.index.json"));
  const std::string shard = index["weight_map"]["model.norm.weight"];
  fs::rename(dir + "/" + shard, dir + "/moved");
  std::string why = message_of([&] { load_hf_model(model->named_parameter_list(), m, dir); });
  EXPECT_NE(why.find(shard + ", which is missing"), std::string::npos) << why;
  fs::rename(dir + "/moved", dir + "/" + shard);
  // A tied head that differs from the embedding.
  NamedTensors extra = {{"lm_head.weight", torch::randn({50, 32})}};
  save_safetensors(dir + "/model-extra.safetensors", extra, {{"format", "pt"}});
  json with_head = index;
  with_head["weight_map"]["lm_head.weight"] = "model-extra.safetensors";
  test::write_text(dir + "/model.safetensors.index.json", with_head.dump());
  why = message_of([&] { load_hf_model(model->named_parameter_list(), m, dir); });
  EXPECT_NE(why.find("lm_head.weight differs from model.embed_tokens.weight"), std::string::npos) << why;
  // A model of another shape against these weights.
  test::write_text(dir + "/model.safetensors.index.json", index.dump());
  ModelConfig wider = m;
  wider.mlp_width = 48;
  CausalLm other = make_causal_lm(wider);
  why = message_of([&] { load_hf_model(other->named_parameter_list(), wider, dir); });
  EXPECT_NE(why.find("_proj.weight' has shape ["), std::string::npos) << why;
  EXPECT_NE(why.find("] but the model needs ["), std::string::npos) << why;
}

}  // namespace
}  // namespace frugal::hf_llama_test
