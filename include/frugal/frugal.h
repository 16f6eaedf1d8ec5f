// frugal's public API in one include. A program that trains its own torch::nn::Module:
//
//   #include <torch/torch.h>
//   #include <frugal/frugal.h>
//
//   frugal::ResolvedConfig rc = frugal::resolve_config("run.toml", {"train.steps=200"},
//                                                      frugal::process_environment());
//   frugal::Task task = frugal::make_task(net, [](Net& m, const frugal::Batch& b) { ... });
//   task.data = std::make_shared<frugal::DatasetSource>(...);
//   nlohmann::json summary = frugal::Trainer(rc, task).fit();
//
// docs/library.md is the guide; each header states its own contract. Build against the installed
// CMake package: find_package(frugal) and target_link_libraries(app frugal::frugal).
#pragma once

#include "frugal/core/callback.h"       // the event list and Callback
#include "frugal/core/config.h"         // the config structs: every lever, with its default
#include "frugal/core/config_loader.h"  // TOML + FRUGAL_* env + --set -> ResolvedConfig
#include "frugal/core/errors.h"         // ConfigError, DataError, CheckpointError, IoError
#include "frugal/core/exit_code.h"      // the exit-code table: exit_code_for(trainer.stop_kind())

#include "frugal/data/batch_source.h"    // Batch, BatchSource, make_batch_source(config)
#include "frugal/data/dataset_source.h"  // torch::data datasets and sample functions as a source
#include "frugal/data/image.h"           // decode/resize/augment images, encode_png
#include "frugal/data/prepare.h"         // `frugal prepare` as a function
#include "frugal/data/record_source.h"   // records:DIR datasets (images, tables): open_record_dataset
#include "frugal/data/tokenizer.h"

#include "frugal/ckpt/checkpoint.h"  // checkpoint directories: list, verify, load
#include "frugal/ckpt/run_dir.h"     // every path of runs/<name>/
#include "frugal/ckpt/safetensors.h"

#include "frugal/model/gpt.h"           // the reference GPT decoder
#include "frugal/model/llama.h"         // the Llama family
#include "frugal/model/model_family.h"  // make_causal_lm: either by model.arch
#include "frugal/model/weights.h"

#include "frugal/train/lm_task.h"
#include "frugal/train/open_run.h"    // a run read back: config, weights, tokenizer
#include "frugal/train/run_config.h"  // complete_config, reconcile_resume_config
#include "frugal/tune/smoke.h"
#include "frugal/train/task.h"  // Task: module + loss + data + hooks
#include "frugal/train/trainer.h"

#include "frugal/monitor/report.h"  // report.html from a run directory

// Programs built against the installed package find that installation's SentencePiece helper.
#ifdef FRUGAL_SPM_INSTALLED_PATH
namespace frugal::detail {
inline const bool kSpmHelperRegistered = set_spm_helper_path(FRUGAL_SPM_INSTALLED_PATH);
}  // namespace frugal::detail
#endif
