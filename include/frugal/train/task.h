// What a Trainer trains: any torch::nn::Module, the loss of one micro-batch, a BatchSource, and
// optional model-specific hooks. The reference GPT is one such task (train/gpt_task.h); a user
// brings their own:
//
//   auto net = std::make_shared<MyNet>();
//   frugal::Task task;
//   task.module = net;
//   task.loss = [net](torch::nn::Module&, const frugal::Batch& b) {
//     return torch::nn::functional::cross_entropy(net->forward(b.x), b.y);
//   };
//   task.data = std::make_shared<frugal::DatasetSource>(...);   // or leave null: data.source
//   frugal::Trainer trainer(rc, task);
//
// Every lever of the config then applies to the user module unchanged: precision (autocast around
// `loss`, loss scaling), accumulation, the optimizer over module->parameters(), checkpoints of
// module_tensors() (parameters and buffers by name), resume, early stopping, the divergence guard,
// cost, metrics, the report and stop signals. Levers that need the model's help are hooks.
//
// Contracts: `loss` returns a 0-dim floating tensor, the mean over the micro-batch (the step
// divides it by the accumulation count). It runs on the trainer thread, inside autocast, with the
// batch already on run.device. `eval_loss` (default: `loss`) runs under NoGradGuard with the module
// in eval() mode. The module's parameter and buffer names must be stable across processes (they
// are the checkpoint's keys).
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "frugal/core/config.h"
#include "frugal/data/batch_source.h"
#include "frugal/model/block_gathering.h"
#include "frugal/train/optimizer.h"  // ParamGroup

namespace frugal {

// The loss of one micro-batch (see the contracts above). The module is Task::module.
using LossFn = std::function<at::Tensor(torch::nn::Module&, const Batch&)>;

// Named figures of one validation batch, e.g. {{"accuracy", 0.93}} (TaskHooks::eval_metrics).
using EvalMetricsFn = std::function<std::vector<std::pair<std::string, double>>(torch::nn::Module&, const Batch&)>;

// Optional model-specific extras. Every field may be left empty.
struct TaskHooks {
  // Shown on the banner's "model:" line; "" = the module's name().
  std::string describe;
  // Items the metrics count per sample (tokens_per_s, summary "tokens"): the context length for a
  // sequence model, 1 (each sample is one item) otherwise.
  int64_t tokens_per_sample = 1;
  // What those items are called on the console ("token": the banner's "N training tokens" and
  // the progress line's "tok/s"; "sample": "samples", "samples/s"). metrics.jsonl and
  // summary.json keep their key names (tokens, tokens_per_s) whatever the item.
  std::string item = "sample";
  // Training FLOPs (forward + backward) per counted item, for throughput and MFU figures; 0 =
  // unknown (the summary reports 0).
  double flops_per_token = 0;
  // Installs activation checkpointing for memory.activation_checkpointing (none, every block, or
  // every N-th). Without this hook any setting other than "none" is a ConfigError.
  std::function<void(const ActivationCheckpointing& spec)> activation_checkpointing;
  // Adds model-specific figures to summary.json after the final evaluation (e.g. the reference
  // GPT's answer_accuracy on builtin:arith). Not called when the run stopped unhealthy.
  std::function<void(nlohmann::ordered_json& summary)> extend_summary;
  // The task's own evaluation figures: called for every validation batch (module in eval mode,
  // under NoGradGuard, the batch on run.device); each name's mean over the evaluation's batches
  // lands in EvalMetrics::task (metrics.jsonl "metrics", the report, summary "final_metrics") and
  // early_stop.task_metric may watch one. Every batch must return the same names.
  EvalMetricsFn eval_metrics;
  // The optimizer's parameter groups, e.g. no weight decay on norms and biases; empty = decay
  // (train.weight_decay) on tensors of rank >= 2 and none on the rest. Together they must hold
  // every parameter that requires a gradient, each once (checked when the run starts).
  std::function<std::vector<ParamGroup>(torch::nn::Module&)> param_groups;
  // The learning rate of optimizer step `step` (0-based) of `total` (train.steps); empty = linear
  // warm-up and cosine decay from train.lr (lr_schedule.h). Must be finite and >= 0.
  std::function<double(int64_t step, int64_t total)> lr_schedule;
  // dist.zero = 3 (docs/distributed.md): installs `gathering` around each block's forward and
  // backward (CausalLmImpl::set_block_gathering) and returns each block's parameters, the units
  // ZeRO-3 shards and gathers; parameters in no block stay whole on every rank. Without it,
  // dist.zero = 3 is a ConfigError.
  GatherBlocksFn gather_blocks;
  // The model runs frugal's CUDA kernels (frugal's own decoder, built with model.kernels =
  // "frugal"): what model.kernels = "auto" resolved to holds only where it is set (confirm_kernels).
  bool frugal_kernels = false;
};

struct Task {
  std::shared_ptr<torch::nn::Module> module;  // moved to run.device by the Trainer
  LossFn loss;                                // training loss of one micro-batch
  LossFn eval_loss;                           // validation loss; empty = `loss`
  // Training and validation batches; null = the source named by data.source (make_batch_source).
  std::shared_ptr<BatchSource> data;
  TaskHooks hooks;
};

// A Task for `module` with a loss written against its concrete type:
//   auto task = frugal::make_task(net, [](MyNet& m, const frugal::Batch& b) { ... });
template <typename ModuleT, typename F>
Task make_task(std::shared_ptr<ModuleT> module, F loss) {
  Task t;
  t.module = module;
  ModuleT* raw = module.get();  // the Task keeps the module alive
  t.loss = [raw, loss](torch::nn::Module&, const Batch& b) { return loss(*raw, b); };
  return t;
}

// The tensors a checkpoint stores for `module`: its parameters, then its buffers (BatchNorm
// running statistics and the like), by their dotted names, in registration order.
std::vector<std::pair<std::string, at::Tensor>> module_tensors(const torch::nn::Module& module);
// The number of parameter elements.
int64_t parameter_count(const torch::nn::Module& module);
// The number of parameter elements that train (train.freeze leaves the others as they are).
int64_t trainable_parameter_count(const torch::nn::Module& module);

}  // namespace frugal
