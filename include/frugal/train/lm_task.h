// frugal's own decoders as a Task (task.h): the model of model.arch's family sized by [model]
// (model/model_family.h: the GPT or the Llama family), optionally started from a Hugging Face
// checkpoint (model.init_from), the data of data.source, the next-token cross-entropy, and the
// family's hooks: tokens per sample (model.block), training FLOPs per token, activation
// checkpointing of its blocks and, on builtin:arith, answer accuracy in the summary.
// `Trainer(config)` trains this task; the CLI's `frugal train` is that call.
#pragma once

#include <memory>

#include "frugal/core/config.h"
#include "frugal/model/causal_lm.h"
#include "frugal/train/task.h"

namespace frugal {

// Builds the model (initialised from the current torch seed, then from model.init_from where
// set). The task's data is left null: the Trainer builds data.source for its data-parallel rank
// (make_batch_source).
Task make_lm_task(const Config& config);

// The task around an existing model and data source.
Task lm_task(CausalLm model, std::shared_ptr<BatchSource> data, const Config& config);

}  // namespace frugal
