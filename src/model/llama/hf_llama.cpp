// The Llama family's entry in the family table (model_family.h): its config.json in both layouts
// transformers writes (4.x: top-level rope_theta + rope_scaling with "type" or "rope_type"; 5.x:
// rope_parameters), its tensor names, and the config.json of an export.
#include <fmt/format.h>

#include <cmath>
#include <set>

#include <nlohmann/json.hpp>

#include "frugal/core/errors.h"
#include "frugal/model/llama.h"
#include "model/internal/families.h"
#include "model/internal/hf_json.h"

namespace frugal {
using nlohmann::json;

namespace {

constexpr const char* kWhat = "Llama-family";
using Fields = std::vector<std::pair<std::string, std::string>>;

// The rope parameters wherever the file keeps them: rope_parameters (5.x), else rope_scaling
// (4.x) with rope_theta beside it. Returns the object and the field name used in messages.
std::pair<json, std::string> rope_parameters(const json& j) {
  if (hf_json::has(j, "rope_parameters") && j["rope_parameters"].is_object())
    return {j["rope_parameters"], "rope_parameters"};
  json r = hf_json::has(j, "rope_scaling") && j["rope_scaling"].is_object() ? j["rope_scaling"] : json::object();
  if (hf_json::has(j, "rope_theta") && !r.contains("rope_theta")) r["rope_theta"] = j["rope_theta"];
  return {r, "rope_scaling"};
}

void read_rope(const json& j, const std::string& origin, ModelConfig& m, Fields& fields) {
  using namespace hf_json;  // NOLINT(build/namespaces)
  const auto [r, field] = rope_parameters(j);
  const std::string at = origin + " " + field;
  m.rope_theta = get_double(r, "rope_theta", at, kWhat, 10000.0);
  fields.emplace_back("model.rope_theta", field + ".rope_theta");
  if (has(r, "partial_rotary_factor") && get_double(r, "partial_rotary_factor", at, kWhat) != 1.0)
    refuse(at, "partial_rotary_factor", r["partial_rotary_factor"], "frugal rotates every channel of a head");
  if (has(j, "partial_rotary_factor") && get_double(j, "partial_rotary_factor", origin, kWhat) != 1.0)
    refuse(origin, "partial_rotary_factor", j["partial_rotary_factor"], "frugal rotates every channel of a head");
  const std::string type = has(r, "rope_type") ? get_string(r, "rope_type", at, kWhat)
                                               : get_string(r, "type", at, kWhat, std::string("default"));
  fields.emplace_back("model.rope_scaling", field + ".rope_type");
  if (type == "default") return;
  const int64_t original = has(r, "original_max_position_embeddings")
                               ? get_int(r, "original_max_position_embeddings", at, kWhat)
                               : get_int(j, "original_max_position_embeddings", origin, kWhat, m.block);
  if (type == "linear") {
    m.rope_scaling = ModelConfig::RopeScaling::kLinear;
    m.rope_factor = get_double(r, "factor", at, kWhat);
  } else if (type == "llama3") {
    m.rope_scaling = ModelConfig::RopeScaling::kLlama3;
    m.rope_factor = get_double(r, "factor", at, kWhat);
    m.rope_low_freq_factor = get_double(r, "low_freq_factor", at, kWhat);
    m.rope_high_freq_factor = get_double(r, "high_freq_factor", at, kWhat);
    m.rope_original_block = original;
    fields.insert(fields.end(), {{"model.rope_low_freq_factor", field + ".low_freq_factor"},
                                 {"model.rope_high_freq_factor", field + ".high_freq_factor"},
                                 {"model.rope_original_block", field + ".original_max_position_embeddings"}});
  } else if (type == "yarn") {
    m.rope_scaling = ModelConfig::RopeScaling::kYarn;
    m.rope_original_block = original;
    m.rope_factor = has(r, "factor") ? get_double(r, "factor", at, kWhat)
                                     : static_cast<double>(m.block) / static_cast<double>(original);
    for (const char* k : {"attention_factor", "mscale", "mscale_all_dim"})
      if (has(r, k) && !(std::string(k) != "attention_factor" && get_double(r, k, at, kWhat) == 0))
        refuse(at, k, r[k], "frugal's YaRN takes its attention factor from the scaling factor (0.1 ln(factor) + 1)");
    if (get_double(r, "beta_fast", at, kWhat, 32) != 32 || get_double(r, "beta_slow", at, kWhat, 1) != 1)
      refuse(at, has(r, "beta_fast") ? "beta_fast" : "beta_slow", has(r, "beta_fast") ? r["beta_fast"] : r["beta_slow"],
             "frugal's YaRN has transformers' defaults beta_fast = 32, beta_slow = 1");
    if (!get_bool(r, "truncate", at, kWhat, true))
      refuse(at, "truncate", false, "frugal's YaRN truncates the correction range, transformers' default");
    fields.emplace_back("model.rope_original_block", field + ".original_max_position_embeddings");
  } else {
    refuse(at, "rope_type", type,
           "frugal has the rope types \"default\", \"linear\", \"llama3\" and \"yarn\" (\"dynamic\" NTK and "
           "\"longrope\" rescale with the sequence length)");
  }
  fields.emplace_back("model.rope_factor", field + ".factor");
}

// Sliding windows: Mistral's applies to every layer; Qwen's per-layer windows are refused.
void read_window(const json& j, const std::string& origin, const std::string& type, ModelConfig& m, Fields& fields) {
  using namespace hf_json;  // NOLINT(build/namespaces)
  if (type == "qwen2" || type == "qwen3") {
    if (get_bool(j, "use_sliding_window", origin, kWhat, false))
      refuse(origin, "use_sliding_window", true,
             "Qwen's sliding windows apply to the layers from max_window_layers on only, which frugal does not "
             "model (the released Qwen checkpoints set it false)");
  } else if (type == "mistral" && has(j, "sliding_window")) {
    m.sliding_window = get_int(j, "sliding_window", origin, kWhat);
    if (m.sliding_window < 1) refuse(origin, "sliding_window", j["sliding_window"], "must be positive or null");
    fields.emplace_back("model.sliding_window", "sliding_window");
  }
  if (has(j, "layer_types") && j["layer_types"].is_array())
    for (const auto& t : j["layer_types"]) {
      const bool full = t == "full_attention";
      const bool sliding = t == "sliding_attention" && type == "mistral" && m.sliding_window > 0;
      if (!full && !sliding)
        refuse(origin, "layer_types", t, "frugal gives every layer the same attention (\"full_attention\")");
    }
}

Fields read_llama(const json& j, const std::string& origin, ModelConfig& m) {
  using namespace hf_json;  // NOLINT(build/namespaces)
  const std::string type = get_string(j, "model_type", origin, kWhat);
  m.arch = ModelConfig::Arch::kLlama;
  m.vocab = get_int(j, "vocab_size", origin, kWhat);
  m.embd = get_int(j, "hidden_size", origin, kWhat);
  m.mlp_width = get_int(j, "intermediate_size", origin, kWhat);
  m.layers = get_int(j, "num_hidden_layers", origin, kWhat);
  m.heads = get_int(j, "num_attention_heads", origin, kWhat);
  m.kv_heads = get_int(j, "num_key_value_heads", origin, kWhat, m.heads);
  // Qwen3's default head is 128 channels wide whatever the hidden size (Qwen3Config).
  const int64_t default_head = type == "qwen3" ? 128 : (m.heads > 0 ? m.embd / m.heads : 0);
  m.head_dim = get_int(j, "head_dim", origin, kWhat, default_head);
  const int64_t default_context = type == "llama" ? 2048 : type == "mistral" ? 131072 : 32768;
  m.block = get_int(j, "max_position_embeddings", origin, kWhat, default_context);
  m.norm_eps = get_double(j, "rms_norm_eps", origin, kWhat, 1e-6);
  m.tie_embeddings = get_bool(j, "tie_word_embeddings", origin, kWhat, false);
  const std::string act = get_string(j, "hidden_act", origin, kWhat, std::string("silu"));
  if (act != "silu") refuse(origin, "hidden_act", act, "the Llama family's MLP is SwiGLU (\"silu\")");
  if (get_bool(j, "mlp_bias", origin, kWhat, false))
    refuse(origin, "mlp_bias", true, "frugal's SwiGLU MLP has no biases (as Llama, Qwen and Mistral)");
  if (has(j, "quantization_config"))
    refuse(origin, "quantization_config", j["quantization_config"].value("quant_method", json("?")),
           "frugal reads bf16, fp16 and fp32 weights; start from the unquantized checkpoint");
  if (type == "qwen2") {
    m.attention_bias = ModelConfig::AttentionBias::kQkv;
  } else if (type != "mistral" && get_bool(j, "attention_bias", origin, kWhat, false)) {
    m.attention_bias = ModelConfig::AttentionBias::kAll;
  }
  m.qk_norm = type == "qwen3";
  Fields fields = {
      {"model.layers", "num_hidden_layers"},
      {"model.heads", "num_attention_heads"},
      {"model.kv_heads", "num_key_value_heads"},
      {"model.embd", "hidden_size"},
      {"model.head_dim", "head_dim"},
      {"model.mlp_width", "intermediate_size"},
      {"model.block", "max_position_embeddings"},
      {"model.vocab", "vocab_size"},
      {"model.norm_eps", "rms_norm_eps"},
      {"model.tie_embeddings", "tie_word_embeddings"},
      // Qwen2 has q/k/v biases by its model_type; the others say so in attention_bias.
      {"model.attention_bias", type == "qwen2" || !has(j, "attention_bias") ? "model_type" : "attention_bias"},
      {"model.qk_norm", "model_type"}};
  const std::pair<const char*, int64_t> sizes[] = {
      {"num_hidden_layers", m.layers}, {"num_attention_heads", m.heads}, {"num_key_value_heads", m.kv_heads},
      {"hidden_size", m.embd},         {"head_dim", m.head_dim},         {"intermediate_size", m.mlp_width},
      {"vocab_size", m.vocab}};
  for (const auto& [key, v] : sizes)
    if (v < 1) refuse(origin, key, j.contains(key) ? j[key] : json(v), "must be positive");
  read_rope(j, origin, m, fields);
  read_window(j, origin, type, m, fields);
  return fields;
}

// The model_type an export writes: the source's where it can hold the model, else the first
// family member that can.
std::string export_type(const ModelConfig& m, const json* source) {
  using B = ModelConfig::AttentionBias;
  auto fits = [&](const std::string& t) {
    if (t == "qwen3") return m.sliding_window == 0 && m.attention_bias != B::kQkv;
    if (m.qk_norm) return false;
    if (t == "qwen2") return m.attention_bias == B::kQkv && m.sliding_window == 0;
    if (t == "mistral") return m.attention_bias == B::kNone;
    if (t == "llama") return m.attention_bias != B::kQkv && m.sliding_window == 0;
    return false;
  };
  if (source && source->contains("model_type") && (*source)["model_type"].is_string()) {
    const std::string t = (*source)["model_type"];
    if (fits(t)) return t;
  }
  for (const char* t : {"qwen3", "qwen2", "llama", "mistral"})
    if ((std::string(t) != "qwen3" || m.qk_norm) && fits(t)) return t;
  throw ConfigError(
      fmt::format("no Hugging Face model type holds this model (qk_norm = {}, attention_bias, "
                  "sliding_window = {}): Qwen3 has no q/k-only biases, the others no q/k norms",
                  m.qk_norm, m.sliding_window));
}

json rope_json(const ModelConfig& m) {
  json r = {{"rope_theta", m.rope_theta}};
  using S = ModelConfig::RopeScaling;
  const int64_t original = m.rope_original_block > 0 ? m.rope_original_block : m.block;
  switch (m.rope_scaling) {
    case S::kNone:
      r["rope_type"] = "default";
      break;
    case S::kLinear:
      r.update({{"rope_type", "linear"}, {"factor", m.rope_factor}});
      break;
    case S::kLlama3:
      r.update({{"rope_type", "llama3"},
                {"factor", m.rope_factor},
                {"low_freq_factor", m.rope_low_freq_factor},
                {"high_freq_factor", m.rope_high_freq_factor},
                {"original_max_position_embeddings", original}});
      break;
    case S::kYarn:
      r.update({{"rope_type", "yarn"}, {"factor", m.rope_factor}, {"original_max_position_embeddings", original}});
      break;
  }
  return r;
}

const char* class_of(const std::string& type) {
  return type == "qwen3"     ? "Qwen3ForCausalLM"
         : type == "qwen2"   ? "Qwen2ForCausalLM"
         : type == "mistral" ? "MistralForCausalLM"
                             : "LlamaForCausalLM";
}

class LlamaFamily : public ModelFamily {
 public:
  ModelConfig::Arch arch() const override { return ModelConfig::Arch::kLlama; }
  const char* name() const override { return "llama"; }
  CausalLm make(const ModelConfig& m) const override { return CausalLm(std::shared_ptr<CausalLmImpl>(Llama(m).ptr())); }
  std::vector<std::string> hf_model_types() const override { return {"llama", "qwen2", "qwen3", "mistral"}; }
  Fields read_hf_config(const json& j, const std::string& origin, ModelConfig& m) const override {
    return read_llama(j, origin, m);
  }
  HfLayout hf_layout(const ModelConfig& m) const override;
  json hf_config(const ModelConfig& m, const json* source) const override;
  std::string hf_class(const ModelConfig& m) const override { return class_of(export_type(m, nullptr)); }
};

bool skipped(const std::string& name) {
  const std::string buffer = ".rotary_emb.inv_freq";  // saved by transformers before 4.31
  return name.size() > buffer.size() && name.compare(name.size() - buffer.size(), buffer.size(), buffer) == 0;
}

HfLayout LlamaFamily::hf_layout(const ModelConfig& m) const {
  const int64_t H = m.heads, K = kv_heads_of(m), D = head_dim_of(m), Fw = llama_mlp_width(m);
  const bool qkv_bias = m.attention_bias != ModelConfig::AttentionBias::kNone;
  const bool o_bias = m.attention_bias == ModelConfig::AttentionBias::kAll;
  HfLayout l;
  l.what = "Llama";
  l.skipped = skipped;
  l.tensors.push_back({"embed.weight", {"model.embed_tokens.weight"}});
  for (int64_t i = 0; i < m.layers; ++i) {
    const std::string hf = fmt::format("model.layers.{}.", i), ours = fmt::format("h{}.", i);
    auto qkv = [&](const char* suffix) {
      return std::vector<std::string>{hf + "self_attn.q_proj." + suffix, hf + "self_attn.k_proj." + suffix,
                                      hf + "self_attn.v_proj." + suffix};
    };
    l.tensors.push_back({ours + "attn_norm.weight", {hf + "input_layernorm.weight"}});
    l.tensors.push_back({ours + "attn.qkv.weight", qkv("weight"), {H * D, K * D, K * D}});
    if (qkv_bias) l.tensors.push_back({ours + "attn.qkv.bias", qkv("bias"), {H * D, K * D, K * D}});
    l.tensors.push_back({ours + "attn.proj.weight", {hf + "self_attn.o_proj.weight"}});
    if (o_bias) l.tensors.push_back({ours + "attn.proj.bias", {hf + "self_attn.o_proj.bias"}});
    if (m.qk_norm) {
      l.tensors.push_back({ours + "attn.q_norm.weight", {hf + "self_attn.q_norm.weight"}});
      l.tensors.push_back({ours + "attn.k_norm.weight", {hf + "self_attn.k_norm.weight"}});
    }
    l.tensors.push_back({ours + "mlp_norm.weight", {hf + "post_attention_layernorm.weight"}});
    l.tensors.push_back(
        {ours + "mlp.gate_up.weight", {hf + "mlp.gate_proj.weight", hf + "mlp.up_proj.weight"}, {Fw, Fw}});
    l.tensors.push_back({ours + "mlp.down.weight", {hf + "mlp.down_proj.weight"}});
  }
  l.tensors.push_back({"norm.weight", {"model.norm.weight"}});
  if (m.tie_embeddings) {
    l.tied_head = "lm_head.weight";
    l.embedding = "model.embed_tokens.weight";
  } else {
    l.tensors.push_back({"lm_head.weight", {"lm_head.weight"}});
  }
  return l;
}

json LlamaFamily::hf_config(const ModelConfig& m, const json* source) const {
  const std::string type = export_type(m, source);
  json j = {{"architectures", json::array({class_of(type)})},
            {"model_type", type},
            {"vocab_size", m.vocab},
            {"hidden_size", m.embd},
            {"intermediate_size", llama_mlp_width(m)},
            {"num_hidden_layers", m.layers},
            {"num_attention_heads", m.heads},
            {"num_key_value_heads", kv_heads_of(m)},
            {"head_dim", head_dim_of(m)},
            {"hidden_act", "silu"},
            {"max_position_embeddings", m.block},
            {"rms_norm_eps", m.norm_eps},
            {"tie_word_embeddings", m.tie_embeddings},
            {"initializer_range", 0.02},
            {"attention_dropout", 0.0},
            {"use_cache", true},
            // Both layouts: 5.x reads rope_parameters, 4.x rope_theta and rope_scaling.
            {"rope_parameters", rope_json(m)},
            {"rope_theta", m.rope_theta},
            {"rope_scaling", m.rope_scaling == ModelConfig::RopeScaling::kNone ? json(nullptr) : rope_json(m)}};
  if (type == "llama" || type == "qwen3") j["attention_bias"] = m.attention_bias == ModelConfig::AttentionBias::kAll;
  if (type == "llama") j["mlp_bias"] = false;
  if (type == "mistral") j["sliding_window"] = m.sliding_window > 0 ? json(m.sliding_window) : json(nullptr);
  if (type == "qwen2" || type == "qwen3") j["use_sliding_window"] = false;
  if (source) {
    // What frugal does not model but the checkpoint said: token ids, the context it was trained
    // for (the run's model.block may have been shorter).
    for (const char* k : {"bos_token_id", "eos_token_id", "pad_token_id"})
      if (source->contains(k)) j[k] = (*source)[k];
    if (source->contains("max_position_embeddings") && (*source)["max_position_embeddings"].is_number_integer() &&
        (*source)["max_position_embeddings"].get<int64_t>() > m.block)
      j["max_position_embeddings"] = (*source)["max_position_embeddings"];
  }
  return j;
}

}  // namespace

const ModelFamily& llama_family() {
  static const LlamaFamily family;
  return family;
}

}  // namespace frugal
