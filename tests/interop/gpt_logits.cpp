// What frugal's own decoders (either family) compute for a token sequence, for the interop tests
// to compare with the reference library's (tests/interop/hf_gpt2_check.py, hf_llama_check.py):
//
//   frugal_gpt_logits --hf DIR   --tokens 5,17,3 --out out.safetensors   (model.init_from's path)
//   frugal_gpt_logits --run RUN  --tokens 5,17,3 --out out.safetensors   (a run's final weights)
//     [--lora DIR]                     with --hf: PEFT's adapter DIR over the model (lora.init_from)
//     [--base-dtype nf4]               with --lora: the adapted products held in NF4 (default fp32)
//   frugal_gpt_logits --nf4 IN.safetensors --out out.safetensors
//     each tensor T of IN in NF4 (model/nf4.h): "T.codes", "T.scalers", "T.factors", "T.mean" and
//     "T.dequantized" (bf16, T's shape)
//     [--targets 17,3,9 --grad NAME]   also the loss against these targets and the gradient of the
//                                      parameter NAME (frugal's name, e.g. h0.attn.qkv.weight)
//     [--generate N]                   also N greedy tokens after the sequence (KV cache)
//
// Writes fp32 "logits" of shape (T, vocab), computed in eval mode without a KV cache (the training
// forward); with --targets, "loss" (0-dim) and "grad" (the parameter's shape) from the training
// loss (model.loss, the chunked head + cross-entropy for the Llama family); with --generate,
// "generated" (int64, N). Exits 2 with the message on bad input.
#include <torch/torch.h>

#include <cstdio>
#include <string>
#include <vector>

#include "frugal/ckpt/safetensors.h"
#include "frugal/core/config_loader.h"
#include "frugal/core/errors.h"
#include "frugal/model/hf_checkpoint.h"
#include "frugal/model/lora.h"
#include "frugal/model/model_family.h"
#include "frugal/model/nf4.h"
#include "frugal/model/weights.h"
#include "frugal/train/open_run.h"

namespace {
std::vector<int64_t> parse_ids(const std::string& text) {
  std::vector<int64_t> ids;
  size_t start = 0;
  while (start < text.size()) {
    const size_t comma = text.find(',', start);
    ids.push_back(std::stoll(text.substr(start, comma - start)));
    start = comma == std::string::npos ? text.size() : comma + 1;
  }
  return ids;
}
}  // namespace

int main(int argc, char** argv) {
  std::string hf, run, tokens, out, targets, grad_name, lora, nf4, base_dtype = "fp32";
  int64_t generate = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--hf")
      hf = v;
    else if (k == "--run")
      run = v;
    else if (k == "--tokens")
      tokens = v;
    else if (k == "--out")
      out = v;
    else if (k == "--targets")
      targets = v;
    else if (k == "--grad")
      grad_name = v;
    else if (k == "--lora")
      lora = v;
    else if (k == "--nf4")
      nf4 = v;
    else if (k == "--base-dtype")
      base_dtype = v;
    else if (k == "--generate")
      generate = std::stoll(v);
  }
  if (!nf4.empty() && !out.empty()) {
    try {
      torch::set_num_threads(1);
      frugal::NamedTensors result;
      for (const auto& [name, t] : frugal::load_safetensors(nf4).tensors) {
        const frugal::Nf4 q = frugal::nf4_quantize(t);
        result.emplace_back(name + ".codes", q.codes);
        result.emplace_back(name + ".scalers", q.scalers);
        result.emplace_back(name + ".factors", q.factors);
        result.emplace_back(name + ".mean", q.mean);
        result.emplace_back(name + ".dequantized", frugal::nf4_dequantize(q, t.sizes()));
      }
      frugal::save_safetensors(out, result);
      return 0;
    } catch (const frugal::Error& e) {
      std::fprintf(stderr, "frugal_gpt_logits: %s\n", e.what());
      return 2;
    }
  }
  if (hf.empty() == run.empty() || tokens.empty() || out.empty()) {
    std::fprintf(stderr,
                 "usage: frugal_gpt_logits (--hf DIR | --run RUN_DIR) --tokens 1,2,3 --out FILE "
                 "[--lora DIR [--base-dtype nf4]] [--targets 2,3,4 --grad NAME] [--generate N]\n"
                 "       frugal_gpt_logits --nf4 IN.safetensors --out FILE\n");
    return 2;
  }
  try {
    torch::set_num_threads(1);
    const std::vector<int64_t> ids = parse_ids(tokens);
    frugal::ModelConfig m;
    frugal::CausalLm model{nullptr};
    if (!hf.empty()) {
      m = frugal::read_hf_model_config(hf);
      model = frugal::make_causal_lm(m);
      frugal::load_hf_model(model->named_parameter_list(), m, hf);
      frugal::LoraConfig l;
      l.init_from = lora;
      l.base_dtype = base_dtype == "nf4" ? frugal::LoraConfig::BaseDtype::kNf4
                                         : frugal::LoraConfig::BaseDtype::kFp32;  // exact, for the comparisons
      frugal::install_lora(*model, l);
    } else {
      const frugal::Config c = frugal::resolve_config(run + "/config.toml", {}, {}).config;
      m = c.model;
      model = frugal::make_causal_lm(m);
      frugal::load_run_weights(*model, c, run + "/final/model.safetensors");
    }
    frugal::NamedTensors result;
    const at::Tensor idx = torch::tensor(ids, torch::kLong).view({1, -1});
    model->eval();
    {
      torch::NoGradGuard no_grad;
      result.emplace_back("logits", model->forward(idx).squeeze(0).to(torch::kFloat).contiguous());
    }
    if (!targets.empty()) {
      const at::Tensor y = torch::tensor(parse_ids(targets), torch::kLong).view({1, -1});
      const at::Tensor loss = model->loss(idx, y);
      loss.backward();
      result.emplace_back("loss", loss.detach().to(torch::kFloat));
      for (const auto& [name, p] : model->named_parameter_list())
        if (name == grad_name) result.emplace_back("grad", p.grad().to(torch::kFloat).contiguous());
      if (result.back().first != "grad") throw frugal::ConfigError("--grad " + grad_name + ": no such parameter");
    }
    if (generate > 0) {
      const std::vector<int64_t> g = model->generate(ids, generate, 0.0, 0);
      result.emplace_back("generated", torch::tensor(g, torch::kLong));
    }
    frugal::save_safetensors(out, result);
    return 0;
  } catch (const frugal::Error& e) {
    std::fprintf(stderr, "frugal_gpt_logits: %s\n", e.what());
    return 2;
  }
}
