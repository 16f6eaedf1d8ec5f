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
// W A^T and A A^T, r columns each). With lora.base_dtype = "nf4" (QLoRA) the adapted products'
// weights are held in NF4 (model/nf4.h), each Hugging Face module's rows quantised on their own as
// PEFT + torchao would quantise that module: the weight parameter holds the codes (uint8, two a
// byte, the modules' in row order) and the site the block scales ("<short>_nf4_scalers",
// "_nf4_factors", "_nf4_mean", frozen); W is dequantised per product, forward and backward.
//
// Targets are the module names PEFT writes (q_proj, ..., down_proj; c_attn, c_proj, c_fc); where
// frugal holds several in one matrix (a Llama block's q, k, v), each has its own pair over its
// rows, so PEFT's adapters load and save one to one (model/peft.h).
#pragma once

#include <torch/nn/module.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "frugal/ckpt/safetensors.h"
#include "frugal/core/config.h"
#include "frugal/model/causal_lm.h"
#include "frugal/model/nf4.h"

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

  // x W^T + b with the adapters, x (..., in); `weight` the product's weight as held (NF4 codes
  // after hold_in_nf4).
  at::Tensor forward(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias);
  // W with the adapters folded in (W + s B A; DoRA's rescaled rows), in fp32: what a merged export
  // writes.
  at::Tensor merged(const at::Tensor& weight) const;

  // Replaces `weight`'s values by their NF4 codes, quantising the rows of each of `modules` (every
  // Hugging Face module the product holds) on their own; the scales become frozen parameters here.
  void hold_in_nf4(at::Tensor& weight, const std::vector<Spec>& modules);
  // Rows [row0, row0 + rows) of the product's weight as `weight` holds it, in fp32 (dequantised
  // from NF4 where it is held so); `rows` must cover whole modules when it is.
  at::Tensor dense_rows(const at::Tensor& weight, int64_t row0, int64_t rows) const;
  bool nf4() const { return !nf4_.empty(); }

  std::vector<Part>& parts() { return parts_; }
  const std::vector<Part>& parts() const { return parts_; }
  int64_t rank() const { return rank_; }

 private:
  struct Nf4Slice {
    int64_t row0 = 0, rows = 0, code0 = 0, codes = 0;  // its rows, and its codes' span in the weight
    at::Tensor scalers, factors, mean;
  };
  // The product over the rows [row0, row0 + rows) of an NF4 weight (whole modules).
  at::Tensor nf4_product(const at::Tensor& x, const at::Tensor& weight, int64_t row0, int64_t rows,
                         const at::Tensor& bias) const;
  std::vector<Nf4> nf4_slices(const at::Tensor& weight, int64_t row0, int64_t rows, std::vector<int64_t>* counts) const;

  // The rows of the product's weight (held dense or in NF4).
  int64_t total_rows(const at::Tensor& weight) const {
    return nf4() ? nf4_.back().row0 + nf4_.back().rows : weight.size(0);
  }

  std::vector<Part> parts_;
  std::vector<Nf4Slice> nf4_;
  int64_t in_ = 0;  // the product's input width
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
  std::vector<std::string> targets;  // as PEFT's target_modules names them in a list
  // lora.init_from's target_modules when it is a string: PEFT's regular expression, matched against
  // whole module names ("model.layers.0.self_attn.q_proj"); `targets` is then empty.
  std::string targets_pattern;
  int64_t adapted_modules = 0;  // Hugging Face modules with an adapter
  int64_t trainable_elements = 0, frozen_elements = 0;
  std::string init_from;   // the PEFT adapter directory loaded, or ""
  std::string base_dtype;  // "bf16", "fp32" or "nf4": how the adapted products' weights are held
  // The bytes the adapted products' frozen weights take as held (NF4: with their scales), and as
  // they would in bf16.
  int64_t base_bytes = 0, base_bytes_bf16 = 0;
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

// The modules `model`'s adapters adapt, as PEFT's target_modules list names exactly them: a last
// name ("q_proj") where every module of that name is adapted, else the full names of those that
// are ("transformer.h.0.attn.c_proj"). Concrete names, never "all-linear": PEFT takes that keyword
// as a plain string only.
std::vector<std::string> peft_target_modules(CausalLmImpl& model);

// Whether `model` carries adapters.
bool has_lora(CausalLmImpl& model);

// Whether the parameter `name` is a trained adapter tensor (A, B or DoRA's magnitude), not part of
// the frozen base (NF4's scales included).
bool is_adapter_parameter(const std::string& name);
// The weights the parameter `p` stands for: two a byte for NF4 codes (the only uint8 parameters),
// none for NF4's scales, else its elements.
int64_t weight_elements(const std::string& name, const at::Tensor& p);

// The model's parameters as a model without adapters has them, each adapted weight merged (W + s B
// A, DoRA's rows rescaled): what `frugal export RUN --out DIR` writes for a LoRA run.
// `base`, where given, holds an adapted weight's values to merge into in place of the model's
// (the base as stored, where training held it rounded to bf16).
NamedTensors merged_parameter_list(CausalLmImpl& model, const std::map<std::string, at::Tensor>& base = {});

}  // namespace frugal
