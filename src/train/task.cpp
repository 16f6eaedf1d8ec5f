// Task helpers and the task of frugal's own decoders; see task.h and lm_task.h.
#include "frugal/train/task.h"

#include <torch/torch.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "frugal/model/freeze.h"
#include "frugal/model/lora.h"
#include "frugal/model/hf_checkpoint.h"
#include "frugal/model/model_family.h"
#include "frugal/model/scripted_module.h"
#include "frugal/train/answer_accuracy.h"
#include "frugal/train/lm_task.h"
#include "frugal/train/model_task.h"
#include "frugal/train/train_step.h"

#include "frugal/core/errors.h"
#include "frugal/data/document_dataset.h"

namespace frugal {

std::vector<std::pair<std::string, at::Tensor>> module_tensors(const torch::nn::Module& module) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& p : module.named_parameters(/*recurse=*/true)) out.emplace_back(p.key(), p.value());
  for (const auto& b : module.named_buffers(/*recurse=*/true)) out.emplace_back(b.key(), b.value());
  return out;
}

int64_t parameter_count(const torch::nn::Module& module) {
  int64_t n = 0;
  for (const auto& p : module.named_parameters()) n += weight_elements(p.key(), p.value());  // an NF4 base: its weights
  return n;
}

int64_t trainable_parameter_count(const torch::nn::Module& module) {
  int64_t n = 0;
  for (const auto& p : module.parameters())
    if (p.requires_grad()) n += p.numel();
  return n;
}

Task lm_task(CausalLm model, std::shared_ptr<BatchSource> data, const Config& config) {
  Task t;
  t.module = model.ptr();
  CausalLmImpl* raw = model.get();
  t.loss = [raw](torch::nn::Module&, const Batch& b) { return raw->loss(b.x, b.y, b.pos); };
  t.data = std::move(data);
  t.hooks.describe = model->describe();
  t.hooks.tokens_per_sample = config.model.block;
  t.hooks.item = "token";
  t.hooks.flops_per_token = model->flops_per_token();
  t.hooks.activation_checkpointing = [model](const ActivationCheckpointing& spec) mutable {
    install_activation_checkpointing(model, spec);
  };
  t.hooks.gather_blocks = [raw](std::shared_ptr<BlockGathering> gathering) -> BlockParameters {
    raw->set_block_gathering(std::move(gathering));
    return raw->block_parameters();
  };
  t.hooks.frugal_kernels = config.model.kernels == ModelConfig::Kernels::kFrugal;
  if (config.data.source.kind == DataSource::Kind::kArith && config.train.answer_samples > 0) {
    const Config c = config;
    t.hooks.extend_summary = [model, c](nlohmann::ordered_json& summary) mutable {
      AnswerAccuracy acc = arith_answer_accuracy(model, c, c.train.answer_samples);
      summary["answer_accuracy"] = acc.fraction();
      summary["answer_samples"] = acc.total;
    };
  }
  return t;
}

Task make_lm_task(const Config& config) {
  // Before the model and the run directory: labelled samples have no tokens for a language model.
  // (A documents dataset named records:DIR is refused by the record source, with the way to read it.)
  FRUGAL_CHECK(config.data.source.kind != DataSource::Kind::kRecords || is_document_dataset(config.data.source.path),
               ConfigError,
               fmt::format("data.source = \"{}\" holds labelled samples (images, table rows), and frugal's built-in "
                           "models are language models that train on tokens: train them with a model of your own, "
                           "through the library (examples/cnn_images, examples/mlp_csv) or model.source = "
                           "\"torchscript:FILE\" (docs/library.md)",
                           to_string(config.data.source)));
  CausalLm model = make_causal_lm(config.model);
  // Pretrained weights replace the random ones (a resumed run's checkpoint replaces both).
  const std::string hf = hf_init_dir(config.model);
  if (!hf.empty())
    reading_named_input("model.init_from = \"" + config.model.init_from + "\"",
                        [&] { load_hf_model(model->named_parameter_list(), config.model, hf); });
  // The data stays null: the Trainer builds data.source for this process's data-parallel rank.
  FRUGAL_CHECK(!lora_enabled(config.lora) || config.train.freeze.empty(), ConfigError,
               fmt::format("train.freeze = \"{}\" with lora.rank = {}: adapters freeze the whole base model (set "
                           "train.freeze = \"\")",
                           config.train.freeze, config.lora.rank));
  FRUGAL_CHECK(!lora_enabled(config.lora) || config.precision.mode != PrecisionMode::kFp8, ConfigError,
               fmt::format("precision.mode = \"fp8\" with lora.rank = {}: fp8 linears train full weights, and "
                           "adapters leave the base frozen (set precision.mode = \"bf16\" for LoRA)",
                           config.lora.rank));
  const FrozenParameters frozen = freeze_parameters(*model, config.train.freeze);
  const LoraSetup lora = install_lora(*model, config.lora);  // after the base weights: DoRA reads their norms
  Task t = lm_task(model, nullptr, config);
  if (!hf.empty()) t.hooks.describe += ", from " + config.model.init_from;
  if (lora.rank > 0)
    t.hooks.describe += fmt::format(", {} r={} alpha={:g} on {} modules{} ({:.2f}% of the parameters train)",
                                    lora.dora ? "DoRA" : "LoRA", lora.rank, lora.alpha, lora.adapted_modules,
                                    lora.init_from.empty() ? "" : " from " + lora.init_from,
                                    100.0 * static_cast<double>(lora.trainable_elements) /
                                        static_cast<double>(lora.trainable_elements + lora.frozen_elements));
  if (lora.base_dtype == "nf4")
    t.hooks.describe +=
        fmt::format(", an NF4 base ({:.1f} MB, {:.2f}x bf16's)", static_cast<double>(lora.base_bytes) / 1e6,
                    static_cast<double>(lora.base_bytes) / static_cast<double>(lora.base_bytes_bf16));
  if (lora.rank > 0) {
    t.hooks.extend_summary = [prev = t.hooks.extend_summary, lora](nlohmann::ordered_json& summary) {
      if (prev) prev(summary);
      summary["lora"] = {{"rank", lora.rank},
                         {"alpha", lora.alpha},
                         {"dora", lora.dora},
                         {"adapted_modules", lora.adapted_modules},
                         {"base_dtype", lora.base_dtype},
                         {"base_mb", static_cast<double>(lora.base_bytes) / 1e6},
                         {"base_mb_bf16", static_cast<double>(lora.base_bytes_bf16) / 1e6}};
    };
  }
  if (frozen.tensors > 0)
    t.hooks.describe += fmt::format(", {} tensors frozen ({:.1f}% of the parameters train)", frozen.tensors,
                                    100.0 * static_cast<double>(frozen.trainable_elements) /
                                        static_cast<double>(frozen.trainable_elements + frozen.frozen_elements));
  return t;
}

Task scripted_task(const Config& config) {
  const std::string path = torchscript_path(config.model.source);
  FRUGAL_CHECK(
      config.model.init_from.empty(), ConfigError,
      fmt::format("model.init_from = \"{}\" loads Hugging Face weights into frugal's own decoder, but model.source = "
                  "\"{}\"; a scripted module brings its own weights (set model.init_from = \"\")",
                  config.model.init_from, config.model.source));
  FRUGAL_CHECK(!lora_enabled(config.lora), ConfigError,
               fmt::format("lora.rank = {} adapts frugal's own decoders, but model.source = \"{}\" is a scripted "
                           "module (set lora.rank = 0 and lora.init_from = \"\")",
                           config.lora.rank, config.model.source));
  FRUGAL_CHECK(config.train.freeze.empty(), ConfigError,
               fmt::format("train.freeze = \"{}\" names parameters of frugal's own decoders, but model.source = \"{}\" "
                           "is a scripted module (set train.freeze = \"\", or freeze inside the module)",
                           config.train.freeze, config.model.source));
  FRUGAL_CHECK(config.precision.mode != PrecisionMode::kFp8, ConfigError,
               fmt::format("precision.mode = \"fp8\" runs the linear layers of frugal's own decoders in fp8, but "
                           "model.source = \"{}\" is a scripted module (set precision.mode = \"bf16\")",
                           config.model.source));
  ScriptedModule module(path);
  Task t;
  t.module = module.ptr();
  ScriptedModuleImpl* raw = module.get();
  t.loss = [raw](torch::nn::Module&, const Batch& b) { return raw->forward(b.x, b.y); };
  const bool records = config.data.source.kind == DataSource::Kind::kRecords;
  t.hooks.describe = fmt::format("TorchScript {} ({} parameters)", path, parameter_count(*raw));
  t.hooks.tokens_per_sample = records ? 1 : config.model.block;
  t.hooks.item = records ? "sample" : "token";
  t.hooks.flops_per_token = 6.0 * static_cast<double>(parameter_count(*raw));
  return t;
}

Task make_model_task(const Config& config) {
  return torchscript_path(config.model.source).empty() ? make_lm_task(config) : scripted_task(config);
}

}  // namespace frugal
