// A run read back from its directory alone, for the commands that use what it trained (sample,
// export): its resolved config, the weights to use and the tokenizer it was trained with. The
// directory holds all three (ckpt/run_dir.h: config.toml, final/ or checkpoints/, tokenizer/), so
// it works from any working directory and after the dataset has moved.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "frugal/ckpt/run_dir.h"
#include "frugal/core/config.h"
#include "frugal/data/tokenizer.h"
#include "frugal/model/causal_lm.h"

namespace frugal {

struct OpenedRun {
  RunDir dir;
  Config config;  // from config.toml; the environment does not change it
  std::string config_file;
};

// ConfigError (exit 2) naming the directory when it holds no config.toml.
OpenedRun open_run(const std::string& run_dir);

// RUN_DIR/final/model.safetensors, else the newest sound checkpoint's weights (a run that stopped
// early; `command` names the caller in the note printed on stderr then, with each newer checkpoint
// skipped and why): its model.safetensors, or the checkpoint's directory when several processes
// wrote the weights in shards. ConfigError when neither exists, naming each checkpoint's problem.
std::string run_weights(const std::string& run_dir, const char* command);

// Where the run's tokenizer is: its name ("bytes", "sentencepiece", "hf"), the folder holding it
// (the run's tokenizer/ or the dataset; "" for bytes) and its model file ("" for bytes).
struct TokenizerFiles {
  std::string name;
  std::string dir;
  std::string model_file;
  std::string chat_template_file;  // chat documents: the template they were rendered with, or ""
};
TokenizerFiles run_tokenizer_files(const OpenedRun& run);

// The weights file `--weights PATH` names: PATH itself when it is a file, PATH/model.safetensors when
// PATH is a checkpoint or final/ directory, PATH when it is a checkpoint whose weights are in
// shards. A checkpoint directory (one with a state.json) must verify (verify_checkpoint: every
// file's size and checksum). ConfigError (exit 2) saying which was expected, or why the checkpoint
// is not sound, otherwise.
std::string named_weights(const std::string& path);

// Loads `weights` (final/'s or a checkpoint's file, or a checkpoint directory whose shards are
// assembled) into `model`, a model of the run's config `c`. A
// checkpoint of a fine-tune with frozen tensors names them in its state.json instead of storing
// them (model/freeze.h): they are loaded from model.init_from first, and checked against the
// digests the checkpoint recorded.
void load_run_weights(CausalLmImpl& model, const Config& c, const std::string& weights);

// What a merged export of a LoRA run whose adapted weights were held in bf16 (lora.base_dtype,
// its default) merges the adapters onto.
struct StoredBase {
  // The adapted weights as model.init_from stores them, in fp32, by frugal name: a merge onto the
  // base itself (what PEFT's merge_and_unload() gives over the base as loaded). Empty for any other
  // run, and when the base is gone.
  std::map<std::string, at::Tensor> weights;
  // model.init_from's directory when it holds no weights any more (moved, deleted): the merge is
  // then onto the bf16 copies the run's weights file holds, which differ from the base's by
  // rounding. "" else.
  std::string gone;
};
// REQUIRES: load_run_weights has loaded `model` from `weights`. Every frozen tensor the run holds
// must be the base's as it stores it now, cast as the run holds it: ConfigError (exit 2) naming
// `weights`, the first tensor that differs and the base otherwise (the base changed since).
StoredBase stored_base_weights(CausalLmImpl& model, const Config& c, const std::string& weights);

// The tokenizer the run's data was tokenised with: bytes for text and the built-in data; for
// shards the run's own copy (tokenizer/), else the dataset's. ConfigError naming the file and
// what to do when it cannot be had (an image dataset, a dataset without a manifest, a missing
// model file, a tokenizer frugal does not know).
std::unique_ptr<Tokenizer> run_tokenizer(const OpenedRun& run);

}  // namespace frugal
