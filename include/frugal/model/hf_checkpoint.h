// Hugging Face checkpoint directories in and out, for every family model_family.h knows: the
// directory `save_pretrained` writes (config.json + model.safetensors, or shards
// model-0000K-of-0000N.safetensors with model.safetensors.index.json) or the local hub cache's
// snapshot of a hub id. config.json's model_type picks the family; the family maps the names.
//
//   model.init_from = "hf:DIR"   starts a run from DIR (adopt_hf_shape, then load_hf_model)
//   frugal export RUN --out DIR  writes a run's weights for AutoModelForCausalLM.from_pretrained
//
// Everything a directory holds that frugal cannot represent is refused by file and field (exit
// 2): docs/library.md, "Hugging Face checkpoints", lists it.
#pragma once

#include <c10/core/ScalarType.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "frugal/ckpt/safetensors.h"
#include "frugal/core/config.h"
#include "frugal/core/config_loader.h"
#include "frugal/core/hf_hub.h"
#include "frugal/model/model_family.h"

namespace frugal {

// (hf_hub_cache() and hf_cached_snapshot(), the hub cache's lookup: core/hf_hub.h.)
// The directory `model.init_from = "hf:X"` names: X when it is a directory, else the cached
// snapshot of hub id X, else X (which then fails, saying how to get one); "" when the run starts
// from random weights.
std::string hf_init_dir(const ModelConfig& m);

// The model DIR/config.json describes: its family by model_type, the keys it sets (checked
// against the [model] keys' ranges, each error naming the file and field). `fields` receives
// (key, config.json field) for every key the file set. Throws ConfigError.
ModelConfig read_hf_model_config(const std::string& dir,
                                 std::vector<std::pair<std::string, std::string>>* fields = nullptr);

// With model.init_from = "hf:DIR": model.arch and the model keys `rc` leaves at their defaults take
// DIR/config.json's values (their origin names the file and field); a key set on purpose must agree
// (model.block may be smaller than the checkpoint's context). An unset model.block takes the
// checkpoint's context up to 4096 positions (a longer one must be asked for: each training
// sequence is model.block tokens). Throws ConfigError naming both values otherwise. Does nothing
// for a run without init_from.
void adopt_hf_shape(ResolvedConfig& rc);

// DIR's weight files: DIR/model.safetensors, or every shard model.safetensors.index.json names.
// ConfigError saying what to do when there are none (pickled weights only, nothing at all).
std::vector<std::string> hf_weight_files(const std::string& dir);

// Copies the Hugging Face tensors of DIR's weight files into `params` (named as the model's
// named_parameter_list()), shard by shard, in place and dtype-converted, through `layout`.
// Strict: every parameter row filled exactly once, nothing unexpected, shapes as the model's.
// Throws CheckpointError naming the file and tensor.
void load_hf_weights(const NamedTensors& params, const HfLayout& layout, const std::string& dir);
// load_hf_weights through model.arch's family, errors as bad input (ConfigError naming
// model.init_from and the file).
void load_hf_model(const NamedTensors& params, const ModelConfig& m, const std::string& dir);

// The small files of a checkpoint directory that describe it beside its weights (config.json,
// generation_config.json, tokenizer.json, tokenizer_config.json and its chat template, the special
// tokens map), copied from `dir` into `to` (created) where present. Returns the names copied.
std::vector<std::string> keep_hf_source_files(const std::string& dir, const std::string& to);

// The model's parameters under the layout's Hugging Face names (stacked parameters split back,
// Conv1D weights transposed), in `dtype`, in the layout's order.
NamedTensors to_hf_tensors(const NamedTensors& params, const HfLayout& layout, c10::ScalarType dtype);

// Writes `out_dir` (which must not exist) all at once (a temporary sibling folder, fsynced, then
// renamed): config.json, the tensors (one model.safetensors, or shards of at most
// max_shard_bytes each with model.safetensors.index.json where they are larger; 0 = one file)
// and `extra_files` (name -> bytes). Throws ConfigError when out_dir exists.
void write_hf_dir(const NamedTensors& tensors, const std::string& config_json, const std::string& out_dir,
                  const std::map<std::string, std::string>& extra_files, int64_t max_shard_bytes);
// Writes `out_dir` (which must not exist) all at once, as write_hf_dir does: `files` (name ->
// bytes), after `fill` (when given) has written into the temporary folder it is passed.
void write_new_dir(const std::string& out_dir, const std::map<std::string, std::string>& files,
                   const std::function<void(const std::string&)>& fill = nullptr);

}  // namespace frugal
