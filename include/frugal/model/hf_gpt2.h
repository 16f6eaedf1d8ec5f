// Hugging Face GPT-2 checkpoints in and out (the GPT's entry in model_family.h; the directory
// handling common to every family is hf_checkpoint.h): the directory `transformers` writes with
// `GPT2LMHeadModel.save_pretrained` (config.json + model.safetensors) holds the same network as
// frugal's GPT (pre-LayerNorm blocks, learned positions, a head tied to the token embedding), with
// other tensor names, Conv1D weights stored as (in, out) where a Linear keeps (out, in), and GPT-2's
// tanh GELU. docs/library.md ("Hugging Face GPT-2") lists the mapping and what is refused.
//
//   model.init_from = "hf:DIR"   starts a run from DIR (adopt_hf_shape + load_hf_model)
//   frugal export RUN --out DIR  writes a run's weights for GPT2LMHeadModel.from_pretrained
#pragma once

#include <c10/core/ScalarType.h>

#include <map>
#include <string>

#include "frugal/ckpt/safetensors.h"
#include "frugal/core/config.h"
#include "frugal/core/config_loader.h"
#include "frugal/model/hf_checkpoint.h"

namespace frugal {

// The model keys DIR/config.json determines: layers, heads, embd, block (n_positions), vocab,
// activation and norm_eps; the other fields keep their defaults. Throws ConfigError naming the
// file and key for anything frugal's GPT cannot represent (another model_type, an untied head, a
// separate n_inner, cross-attention, unscaled or layer-scaled attention, an unknown activation).
ModelConfig read_hf_gpt2_config(const std::string& dir);

// Copies DIR's weights (model.safetensors or its shards) into `params` (the GPT's
// named_parameter_list(), shaped by `m`), in place. m.block may be below n_positions: the first block position
// embeddings are taken. Throws CheckpointError naming the file and tensor on a missing, unexpected or mis-shaped
// tensor.
void load_hf_gpt2(const NamedTensors& params, const ModelConfig& m, const std::string& dir);

// Tensors named as GPT2LMHeadModel's state dict ("transformer.h.0.attn.c_attn.weight", ...; the
// tied lm_head left out, as save_pretrained does), in `dtype`, from the GPT's named parameters.
NamedTensors to_hf_gpt2_tensors(const NamedTensors& params, const ModelConfig& m, c10::ScalarType dtype);

// config.json's text for `m` (model_type gpt2, GPT2LMHeadModel).
std::string hf_gpt2_config_json(const ModelConfig& m);

// Writes `out_dir` (which must not exist) with config.json, model.safetensors and `extra_files`
// (name -> bytes: the tokenizer's files), all at once: into a temporary sibling folder, fsynced,
// then renamed. Throws ConfigError when out_dir exists.
void write_hf_gpt2(const NamedTensors& params, const ModelConfig& m, const std::string& out_dir, c10::ScalarType dtype,
                   const std::map<std::string, std::string>& extra_files = {});

}  // namespace frugal
