// The Task that model.source names (task.h): the reference GPT ("gpt", gpt_task.h) or a module
// written in Python and scripted ("torchscript:FILE", model/scripted_module.h). `frugal train` and
// Trainer(config) train this.
#pragma once

#include "frugal/core/config.h"
#include "frugal/train/task.h"

namespace frugal {

Task make_model_task(const Config& config);

// model.source = "torchscript:FILE" as a Task: the script's forward(x, y) is the training and
// validation loss; tokens per sample are model.block for token data (builtin:arith, text:,
// shards:) and 1 for records:; training FLOPs per item are estimated as 6 x parameters (the
// dense-network rule; attention's own products are not counted). Activation checkpointing and
// the GPT's answer accuracy do not apply.
Task scripted_task(const Config& config);

}  // namespace frugal
