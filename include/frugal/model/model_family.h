// The decoder families frugal builds natively, each with its Hugging Face layout, in one table:
// a family is an entry here and a file or folder of its own (gpt.cpp + hf_gpt2.cpp; llama/), not
// an `if` at each caller. The trainer, smoke test, batch-size finder, sampler and exporter build
// models through make_causal_lm and read or write checkpoints through the family of model.arch.
#pragma once

#include <c10/core/ScalarType.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "frugal/ckpt/safetensors.h"
#include "frugal/core/config.h"
#include "frugal/model/causal_lm.h"

namespace frugal {

// One frugal parameter and the Hugging Face tensors it holds: their rows stacked in order (a
// Llama block's q, k and v projections are one matrix here), transposed where the file keeps
// (in, out) (GPT-2's Conv1D), and with only the first rows kept where the file holds more
// (GPT-2's position embeddings past model.block).
struct HfTensor {
  HfTensor(std::string frugal_name, std::vector<std::string> hf_names, std::vector<int64_t> part_rows = {},
           bool is_transposed = false, bool truncates = false)
      : frugal(std::move(frugal_name)),
        hf(std::move(hf_names)),
        rows(std::move(part_rows)),
        transposed(is_transposed),
        may_truncate_rows(truncates) {}
  std::string frugal;
  std::vector<std::string> hf;
  std::vector<int64_t> rows;  // the rows each of `hf` holds, where there are several
  bool transposed = false;
  bool may_truncate_rows = false;
};

// How a family's parameters are named in a Hugging Face state dict.
struct HfLayout {
  std::string what;               // "GPT-2", "Llama": in messages
  std::vector<HfTensor> tensors;  // every parameter of the model
  // A file's tensor name as `tensors` spells it ("h.0.ln_1.weight" -> "transformer.h.0.ln_1.weight"
  // for checkpoints saved without the prefix); identity where empty.
  std::string (*canonical)(const std::string& name) = nullptr;
  // Tensors older files carry that are not parameters (attention-mask buffers, rotary inv_freq).
  bool (*skipped)(const std::string& name) = nullptr;
  // Where the model's head is tied to the embedding, a file may still hold the head (equal to the
  // embedding): its name, and the embedding's.
  std::string tied_head, embedding;
};

class ModelFamily {
 public:
  virtual ~ModelFamily() = default;
  virtual ModelConfig::Arch arch() const = 0;
  virtual const char* name() const = 0;  // "gpt", "llama": model.arch's spelling
  virtual CausalLm make(const ModelConfig& m) const = 0;

  // config.json's model_type values this family reads.
  virtual std::vector<std::string> hf_model_types() const = 0;
  // The [model] keys config.json `j` (of DIR/config.json, `origin`) determines, in `m`, with the
  // config.json field each came from ("model.layers" -> "num_hidden_layers"). Throws ConfigError
  // naming the file and field for what the family cannot represent.
  virtual std::vector<std::pair<std::string, std::string>> read_hf_config(const nlohmann::json& j,
                                                                          const std::string& origin,
                                                                          ModelConfig& m) const = 0;
  virtual HfLayout hf_layout(const ModelConfig& m) const = 0;
  // config.json for `m`; `source` is the config.json the run started from (null when none), whose
  // fields that frugal does not model (token ids, rope details) an export carries over.
  virtual nlohmann::json hf_config(const ModelConfig& m, const nlohmann::json* source) const = 0;
  // The class transformers loads the export with, for messages: "GPT2LMHeadModel".
  virtual std::string hf_class(const ModelConfig& m) const = 0;
};

const ModelFamily& model_family(ModelConfig::Arch arch);
// The family whose hf_model_types() holds `model_type`; null when none does.
const ModelFamily* model_family_for_hf(const std::string& model_type);
// Every model_type some family reads, for messages.
std::vector<std::string> hf_model_types();

// A model of model.arch's family sized by `m`, initialised from the current torch seed.
CausalLm make_causal_lm(const ModelConfig& m);

}  // namespace frugal
