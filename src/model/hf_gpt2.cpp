// Hugging Face GPT-2 directories in and out: the GPT's family entry; see hf_gpt2.h.
#include "frugal/model/hf_gpt2.h"

#include <fmt/format.h>

#include <filesystem>
#include <memory>

#include <nlohmann/json.hpp>

#include "frugal/core/atomic_file.h"
#include "frugal/core/errors.h"
#include "frugal/model/hf_checkpoint.h"
#include "frugal/model/gpt.h"
#include "model/internal/families.h"
#include "model/internal/hf_json.h"

namespace frugal {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* kWhat = "GPT-2";

// One tensor of a block: frugal's name after "h<i>.", GPT-2's after "h.<i>.", and whether GPT-2
// keeps it transposed (a Conv1D weight, (in, out)).
struct BlockTensor {
  const char* frugal;
  const char* hf;
  bool transposed;
};
constexpr BlockTensor kBlockTensors[] = {
    {"ln1.weight", "ln_1.weight", false},
    {"ln1.bias", "ln_1.bias", false},
    {"attn.qkv.weight", "attn.c_attn.weight", true},
    {"attn.qkv.bias", "attn.c_attn.bias", false},
    {"attn.proj.weight", "attn.c_proj.weight", true},
    {"attn.proj.bias", "attn.c_proj.bias", false},
    {"ln2.weight", "ln_2.weight", false},
    {"ln2.bias", "ln_2.bias", false},
    {"fc.weight", "mlp.c_fc.weight", true},
    {"fc.bias", "mlp.c_fc.bias", false},
    {"fc_proj.weight", "mlp.c_proj.weight", true},
    {"fc_proj.bias", "mlp.c_proj.bias", false},
};

// Checkpoints saved by older transformers versions (the hub's original "gpt2") have no
// "transformer." prefix.
std::string canonical(const std::string& name) {
  if (name.rfind("transformer.", 0) == 0 || name == "lm_head.weight") return name;
  return "transformer." + name;
}

// The causal-mask buffers older versions saved.
bool skipped(const std::string& n) {
  auto ends = [&](const char* s) {
    const std::string suffix(s);
    return n.size() > suffix.size() && n.compare(n.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  return ends(".attn.bias") || ends(".attn.masked_bias");
}

std::vector<std::pair<std::string, std::string>> read_gpt2(const json& j, const std::string& origin, ModelConfig& m) {
  using namespace hf_json;  // NOLINT(build/namespaces)
  const std::string type = get_string(j, "model_type", origin, kWhat);
  if (type != "gpt2") refuse(origin, "model_type", j["model_type"], "frugal's GPT reads model_type \"gpt2\" only");
  m.arch = ModelConfig::Arch::kGpt;
  m.vocab = get_int(j, "vocab_size", origin, kWhat);
  m.block = get_int(j, "n_positions", origin, kWhat);
  m.embd = get_int(j, "n_embd", origin, kWhat);
  m.layers = get_int(j, "n_layer", origin, kWhat);
  m.heads = get_int(j, "n_head", origin, kWhat);
  m.norm_eps = get_double(j, "layer_norm_epsilon", origin, kWhat, 1e-5);
  const std::pair<const char*, int64_t> sizes[] = {{"vocab_size", m.vocab},
                                                   {"n_positions", m.block},
                                                   {"n_embd", m.embd},
                                                   {"n_layer", m.layers},
                                                   {"n_head", m.heads}};
  for (const auto& [key, v] : sizes)
    if (v < 1) refuse(origin, key, j[key], "must be positive");
  if (m.embd % m.heads != 0) refuse(origin, "n_head", j["n_head"], fmt::format("does not divide n_embd = {}", m.embd));
  const std::string act = get_string(j, "activation_function", origin, kWhat, std::string("gelu_new"));
  if (act == "gelu_new" || act == "gelu_pytorch_tanh" || act == "gelu_fast")
    m.activation = ModelConfig::Activation::kGeluTanh;
  else if (act == "gelu")
    m.activation = ModelConfig::Activation::kGelu;
  else
    refuse(origin, "activation_function", act,
           "frugal's GPT has GELU only: \"gelu_new\", \"gelu_pytorch_tanh\", \"gelu_fast\" (tanh) or \"gelu\" (exact)");
  if (has(j, "n_inner") && j["n_inner"] != json(4 * m.embd))
    refuse(origin, "n_inner", j["n_inner"], fmt::format("frugal's MLP is 4 x n_embd = {} wide", 4 * m.embd));
  if (!get_bool(j, "tie_word_embeddings", origin, kWhat, true))
    refuse(origin, "tie_word_embeddings", false, "frugal's GPT ties its output head to the token embedding");
  if (get_bool(j, "add_cross_attention", origin, kWhat, false))
    refuse(origin, "add_cross_attention", true, "frugal's GPT is a decoder without cross-attention");
  if (!get_bool(j, "scale_attn_weights", origin, kWhat, true))
    refuse(origin, "scale_attn_weights", false, "frugal scales attention scores by 1/sqrt(head size)");
  if (get_bool(j, "scale_attn_by_inverse_layer_idx", origin, kWhat, false))
    refuse(origin, "scale_attn_by_inverse_layer_idx", true, "frugal scales every layer's attention alike");
  return {{"model.layers", "n_layer"},
          {"model.heads", "n_head"},
          {"model.embd", "n_embd"},
          {"model.block", "n_positions"},
          {"model.vocab", "vocab_size"},
          {"model.activation", "activation_function"},
          {"model.norm_eps", "layer_norm_epsilon"}};
}

class GptFamily : public ModelFamily {
 public:
  ModelConfig::Arch arch() const override { return ModelConfig::Arch::kGpt; }
  const char* name() const override { return "gpt"; }
  CausalLm make(const ModelConfig& m) const override { return CausalLm(std::shared_ptr<CausalLmImpl>(Gpt(m).ptr())); }
  std::vector<std::string> hf_model_types() const override { return {"gpt2"}; }
  std::vector<std::pair<std::string, std::string>> read_hf_config(const json& j, const std::string& origin,
                                                                  ModelConfig& m) const override {
    return read_gpt2(j, origin, m);
  }

  HfLayout hf_layout(const ModelConfig& m) const override {
    HfLayout l;
    l.what = kWhat;
    l.canonical = canonical;
    l.skipped = skipped;
    l.tied_head = "lm_head.weight";
    l.embedding = "transformer.wte.weight";
    l.tensors.push_back({"wte.weight", {"transformer.wte.weight"}});
    l.tensors.push_back({"wpe.weight", {"transformer.wpe.weight"}, {}, false, /*may_truncate_rows=*/true});
    for (int64_t i = 0; i < m.layers; ++i)
      for (const auto& t : kBlockTensors)
        l.tensors.push_back(
            {fmt::format("h{}.{}", i, t.frugal), {fmt::format("transformer.h.{}.{}", i, t.hf)}, {}, t.transposed});
    l.tensors.push_back({"ln_f.weight", {"transformer.ln_f.weight"}});
    l.tensors.push_back({"ln_f.bias", {"transformer.ln_f.bias"}});
    return l;
  }

  json hf_config(const ModelConfig& m, const json* source) const override {
    const bool tanh = m.activation == ModelConfig::Activation::kGeluTanh;
    json j = {{"architectures", json::array({"GPT2LMHeadModel"})},
              {"model_type", "gpt2"},
              {"vocab_size", m.vocab},
              {"n_positions", m.block},
              {"n_embd", m.embd},
              {"n_layer", m.layers},
              {"n_head", m.heads},
              {"n_inner", nullptr},
              {"activation_function", tanh ? "gelu_new" : "gelu"},
              {"layer_norm_epsilon", m.norm_eps},
              {"resid_pdrop", m.dropout},
              {"embd_pdrop", m.dropout},
              {"attn_pdrop", m.dropout},
              {"initializer_range", 0.02},
              {"scale_attn_weights", true},
              {"tie_word_embeddings", true},
              {"bos_token_id", nullptr},
              {"eos_token_id", nullptr},
              {"use_cache", true}};
    if (source)
      for (const char* k : {"bos_token_id", "eos_token_id"})
        if (source->contains(k)) j[k] = (*source)[k];
    return j;
  }
  std::string hf_class(const ModelConfig&) const override { return "GPT2LMHeadModel"; }
};

}  // namespace

const ModelFamily& gpt_family() {
  static const GptFamily family;
  return family;
}

ModelConfig read_hf_gpt2_config(const std::string& dir) {
  // The GPT-2 reader only: another model_type is refused by name (read_hf_model_config dispatches).
  const std::string origin = (fs::path(dir) / "config.json").string();
  if (fs::is_regular_file(origin)) {
    json j;
    try {
      j = json::parse(read_small_file(origin));
    } catch (const json::exception& e) {
      throw ConfigError(fmt::format("{}: not valid JSON: {}", origin, e.what()));
    }
    if (j.is_object() && j.contains("model_type") && j["model_type"] != "gpt2") {
      ModelConfig m;
      read_gpt2(j, origin, m);
    }
  }
  return read_hf_model_config(dir);
}

void load_hf_gpt2(const NamedTensors& params, const ModelConfig& m, const std::string& dir) {
  load_hf_model(params, m, dir);
}

NamedTensors to_hf_gpt2_tensors(const NamedTensors& params, const ModelConfig& m, c10::ScalarType dtype) {
  return to_hf_tensors(params, gpt_family().hf_layout(m), dtype);
}

std::string hf_gpt2_config_json(const ModelConfig& m) { return gpt_family().hf_config(m, nullptr).dump(2) + "\n"; }

void write_hf_gpt2(const NamedTensors& params, const ModelConfig& m, const std::string& out_dir, c10::ScalarType dtype,
                   const std::map<std::string, std::string>& extra_files) {
  write_hf_dir(to_hf_gpt2_tensors(params, m, dtype), hf_gpt2_config_json(m), out_dir, extra_files, 0);
}

}  // namespace frugal
