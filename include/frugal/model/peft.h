// PEFT's adapter format both ways (docs/lora.md): the directory `PeftModel.save_pretrained` writes,
// adapter_config.json + adapter_model.safetensors, with the tensors named
// "base_model.model.<module>.lora_A.weight" (r, in), "....lora_B.weight" (out, r) and, for DoRA,
// "....lora_magnitude_vector" (out), <module> the Hugging Face module ("model.layers.0.mlp.up_proj").
#pragma once

#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "frugal/ckpt/safetensors.h"
#include "frugal/model/causal_lm.h"
#include "frugal/model/lora.h"

namespace frugal {

// DIR/adapter_config.json, checked to be a LoRA adapter frugal can represent (peft_type LORA, no
// per-module ranks or alphas, no bias, no layer subsets): ConfigError naming the file and field.
nlohmann::json read_peft_config(const std::string& dir);

// Copies DIR/adapter_model.safetensors into the adapters install_lora added to `model`, strictly:
// every adapter tensor filled, nothing else in the file, the shapes as the model's. ConfigError
// naming the file and tensor.
void load_peft_adapter(CausalLmImpl& model, const std::string& dir);

// Writes `out_dir` (which must not exist; all at once) as PEFT's adapter directory for `model`'s
// adapters, in fp32: PeftModel.from_pretrained(base, out_dir) loads it and adapts the very modules
// `model` adapts (target_modules: peft_target_modules, lora.h). `base` names the base model
// (base_model_name_or_path), `hf_class` its transformers class. `extra`: more files written with
// them (the run's tokenizer, as a fine-tune's output folder holds it), by name.
void write_peft_adapter(CausalLmImpl& model, const LoraSetup& setup, const std::string& base,
                        const std::string& hf_class, const std::string& out_dir,
                        const std::map<std::string, std::string>& extra = {});

}  // namespace frugal
