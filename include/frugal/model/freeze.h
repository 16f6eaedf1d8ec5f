// train.freeze: parameters left as they are, named by the globs a user writes over the Hugging
// Face names `frugal export` gives them ("model.embed_tokens.weight", "transformer.h.0.*"), for
// any family (model_family.h holds each family's names). A frozen parameter stops requiring a
// gradient; the optimizer's groups, the gradient norm and data parallel's buckets take only
// parameters that do (train/optimizer.h, dist/data_parallel.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "frugal/ckpt/safetensors.h"
#include "frugal/model/causal_lm.h"

namespace frugal {

struct FrozenParameters {
  std::vector<std::string> hf_names;  // every Hugging Face tensor frozen, in the model's order
  int64_t tensors = 0;                // frugal parameters frozen
  int64_t frozen_elements = 0, trainable_elements = 0;
};

// The globs of train.freeze: split at commas, trimmed, empty ones dropped.
std::vector<std::string> freeze_patterns(const std::string& text);

// Freezes the parameters of `model` whose Hugging Face names the globs of `patterns` match
// (fnmatch: *, ?, [..]). Throws ConfigError naming train.freeze and the pattern for a glob that
// matches no name, for one that matches part of a tensor frugal holds as one (a Llama block's
// q_proj without k_proj and v_proj: they are one matrix), and when nothing would be left to train.
FrozenParameters freeze_parameters(CausalLmImpl& model, const std::string& patterns);

// A fine-tune's checkpoints name its frozen tensors instead of storing them, where the run has a
// base to take them from (model.init_from): {"init_from": base, "tensors": {name: digest}}, a
// digest (xxh3) of each frozen parameter's values by its module name; null when the module has
// none frozen or there is no base.
nlohmann::json frozen_base(const torch::nn::Module& module, const std::string& init_from);
// `tensors` less those `frozen` (frozen_base's) names.
NamedTensors without_frozen(NamedTensors tensors, const nlohmann::json& frozen);
// Checks that the frozen tensors of `module` (loaded from the base) hold the values `frozen`
// recorded; throws ConfigError naming `origin` (the checkpoint or weights file), the base and the
// first tensor that differs or is missing.
void check_frozen_base(const torch::nn::Module& module, const nlohmann::json& frozen, const std::string& origin);

}  // namespace frugal
