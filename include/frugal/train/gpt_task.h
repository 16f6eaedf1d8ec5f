// The reference GPT as a Task (task.h): the model sized by [model], the data of data.source, the
// next-token cross-entropy, and the GPT's hooks: tokens per sample (model.block), training FLOPs per
// token, activation checkpointing of its blocks and, on builtin:arith, answer accuracy in the
// summary. `Trainer(config)` trains this task; the CLI's `frugal train` is that call.
#pragma once

#include "frugal/core/config.h"
#include "frugal/model/gpt.h"
#include "frugal/train/task.h"

namespace frugal {

// Builds the model (initialised from the current torch seed). The task's data is left null: the
// Trainer builds data.source for its data-parallel rank (make_batch_source).
Task make_gpt_task(const Config& config);

// The GPT's task around an existing model and data source.
Task gpt_task(Gpt model, std::shared_ptr<BatchSource> data, const Config& config);

}  // namespace frugal
