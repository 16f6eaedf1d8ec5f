// validate_model_config (core/config_loader.h): the model keys that contradict each other or the
// family they are set for.
#include <fmt/format.h>

#include <utility>
#include <vector>

#include "frugal/core/config_loader.h"
#include "frugal/core/errors.h"

namespace frugal {

namespace {
// The llama keys a GPT must leave at their defaults: (key, whether this one is set).
std::vector<std::pair<const char*, bool>> llama_only_keys_set(const ModelConfig& m) {
  const ModelConfig d;
  return {{"model.kv_heads", m.kv_heads != 0 && m.kv_heads != m.heads},
          {"model.head_dim", m.head_dim != 0 && m.head_dim * m.heads != m.embd},
          {"model.mlp_width", m.mlp_width != 0},
          {"model.rope_theta", m.rope_theta != d.rope_theta},
          {"model.rope_scaling", m.rope_scaling != d.rope_scaling},
          {"model.attention_bias", m.attention_bias != d.attention_bias},
          {"model.qk_norm", m.qk_norm},
          {"model.tie_embeddings", !m.tie_embeddings},
          {"model.sliding_window", m.sliding_window != 0},
          {"model.loss_chunk", m.loss_chunk != 0}};
}
}  // namespace

void validate_model_config(const ModelConfig& m) {
  if (m.arch == ModelConfig::Arch::kLlama && m.activation != ModelConfig().activation)
    throw ConfigError(
        "model.activation applies to the GPT; the Llama family's MLP is SwiGLU (SiLU-gated), which no key changes "
        "(docs/model.md): unset it, or set model.arch = \"gpt\"");
  if (m.arch == ModelConfig::Arch::kGpt) {
    for (const auto& [key, set] : llama_only_keys_set(m))
      if (set)
        throw ConfigError(
            fmt::format("{} applies to the Llama family, but model.arch = \"gpt\" (the GPT has none: "
                        "docs/model.md); unset it, or set model.arch = \"llama\"",
                        key));
  }
  const bool own_head_dim = m.arch == ModelConfig::Arch::kLlama && m.head_dim > 0;
  if (!own_head_dim && m.embd % m.heads != 0)
    throw ConfigError(
        fmt::format("model.heads = {} must divide model.embd = {} (each head gets embd/heads channels); "
                    "try model.heads = {}",
                    m.heads, m.embd, m.embd % 4 == 0 ? 4 : 1));
  if (m.arch != ModelConfig::Arch::kLlama) return;
  const int64_t kv = m.kv_heads > 0 ? m.kv_heads : m.heads;
  if (m.heads % kv != 0)
    throw ConfigError(
        fmt::format("model.kv_heads = {} must divide model.heads = {} (each key/value head serves a "
                    "group of heads / kv_heads query heads)",
                    m.kv_heads, m.heads));
  const int64_t head_dim = own_head_dim ? m.head_dim : m.embd / m.heads;
  if (head_dim % 2 != 0)
    throw ConfigError(
        fmt::format("a head of {} channels (model.head_dim, or model.embd / model.heads) cannot be "
                    "rotated: rotary position embeddings pair channel d with d + head_dim / 2; make it "
                    "even",
                    head_dim));
  if (m.rope_scaling == ModelConfig::RopeScaling::kLlama3 && !(m.rope_high_freq_factor > m.rope_low_freq_factor))
    throw ConfigError(
        fmt::format("model.rope_high_freq_factor = {} must exceed model.rope_low_freq_factor = {} "
                    "(llama3 scaling interpolates between the two wavelengths)",
                    m.rope_high_freq_factor, m.rope_low_freq_factor));
}

}  // namespace frugal
