// Low-rank adapters (LoRA, and DoRA) over a frozen base, for every family (docs/lora.md). With
// lora.rank > 0 (or lora.init_from), each targeted projection W of the blocks gains a pair A (r x
// in), B (out x r); its product becomes
//
//   y = x W^T + b + s * dropout(x) A^T B^T,            s = alpha / r (alpha / sqrt(r): rslora)
//
// and with DoRA (lora.dora) the rows of the adapted product are rescaled by a trained magnitude m
// over the row norms of W + s B A, held constant in the backward (PEFT's DoRA):
//
//   y = m / ||W + s B A||_row * (x W^T + s x A^T B^T) + b.
//
// Every other parameter is frozen. W + s B A is never formed in training (the norms come from
// W A^T and A A^T, r columns each). Targets are the module names PEFT writes (q_proj, ..., down_proj;
// c_attn, c_proj, c_fc); where frugal holds several in one matrix (a Llama block's q, k, v), each
// has its own pair over its rows, so PEFT's adapters load and save one to one (model/peft.h).
#pragma once

#include <torch/nn/module.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "frugal/ckpt/safetensors.h"
#include "frugal/core/config.h"
#include "frugal/model/causal_lm.h"

namespace frugal {

// The adapters of one product: one part per Hugging Face module it holds that is targeted.
class LoraSiteImpl : public torch::nn::Module {
 public:
  struct Part {
    std::string hf_module;  // "model.layers.0.self_attn.q_proj"
    int64_t row0 = 0, rows = 0;
    at::Tensor a, b, magnitude;  // (r, in), (rows, r); magnitude (rows) with DoRA
  };
  struct Spec {
    std::string hf_module;
    int64_t row0 = 0, rows = 0;
  };
  // Parameters registered as "<short>_A", "<short>_B" (and "<short>_m"), <short> the module's last
  // name ("q_proj"); A uniform in +-1/sqrt(in) (PEFT's default, from the torch seed), B zero, m the
  // row norms of `weight`.
  LoraSiteImpl(const std::vector<Spec>& parts, const at::Tensor& weight, int64_t rank, double scale, double dropout,
               bool dora);

  // x W^T + b with the adapters, x (..., in).
  at::Tensor forward(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias);
  // W with the adapters folded in (W + s B A; DoRA's rescaled rows), in fp32: what a merged export
  // writes.
  at::Tensor merged(const at::Tensor& weight) const;

  std::vector<Part>& parts() { return parts_; }
  const std::vector<Part>& parts() const { return parts_; }
  int64_t rank() const { return rank_; }

 private:
  std::vector<Part> parts_;
  int64_t rank_;
  double scale_, dropout_;
  bool dora_;
};

// x W^T + b through `adapters` where the product has any, else at::linear.
at::Tensor lora_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                       const std::shared_ptr<LoraSiteImpl>& adapters);

// What install_lora did, for the banner and summary.
struct LoraSetup {
  int64_t rank = 0;
  double alpha = 0, scale = 0, dropout = 0;
  bool dora = false, rslora = false;
  std::vector<std::string> targets;  // as PEFT's target_modules names them
  int64_t adapted_modules = 0;       // Hugging Face modules with an adapter
  int64_t trainable_elements = 0, frozen_elements = 0;
  std::string init_from;  // the PEFT adapter directory loaded, or ""
};

// The rank, alpha, targets and DoRA setting `l` asks for, or lora.init_from's adapter_config.json's
// (ConfigError naming the file and field for what frugal cannot represent, and naming both values
// where [lora] sets one differently).
LoraSetup lora_setup(const LoraConfig& l);

// Adds adapters to `model` per `l` (nothing when lora_enabled(l) is false) and freezes every other
// parameter, the adapted products' weights held in lora.base_dtype; loads lora.init_from's tensors
// (peft.h). ConfigError for a target no product of the
// model has (naming those it has). Call after the base weights are loaded.
LoraSetup install_lora(CausalLmImpl& model, const LoraConfig& l);

// Whether `model` carries adapters.
bool has_lora(CausalLmImpl& model);

// The model's parameters as a model without adapters has them, each adapted weight merged (W + s B
// A, DoRA's rows rescaled): what `frugal export RUN --out DIR` writes for a LoRA run.
NamedTensors merged_parameter_list(CausalLmImpl& model);

}  // namespace frugal
