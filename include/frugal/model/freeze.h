// train.freeze: parameters left as they are, named by the globs a user writes over the Hugging
// Face names `frugal export` gives them ("model.embed_tokens.weight", "transformer.h.0.*"), for
// any family (model_family.h holds each family's names). A frozen parameter stops requiring a
// gradient; the optimizer's groups, the gradient norm and data parallel's buckets take only
// parameters that do (train/optimizer.h, dist/data_parallel.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

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

}  // namespace frugal
