// The logits frugal's GPT gives for a token sequence, for the interop tests to compare with the
// reference library's (tests/interop/hf_gpt2_check.py):
//
//   frugal_gpt_logits --hf DIR   --tokens 5,17,3 --out logits.safetensors   (model.init_from's path)
//   frugal_gpt_logits --run RUN  --tokens 5,17,3 --out logits.safetensors   (a run's final weights)
//
// Writes one fp32 tensor "logits" of shape (T, vocab), computed in eval mode without a KV cache
// (the training forward). Exits 2 with the message on bad input.
#include <torch/torch.h>

#include <cstdio>
#include <string>
#include <vector>

#include "frugal/ckpt/safetensors.h"
#include "frugal/core/config_loader.h"
#include "frugal/core/errors.h"
#include "frugal/model/gpt.h"
#include "frugal/model/hf_gpt2.h"
#include "frugal/model/weights.h"

int main(int argc, char** argv) {
  std::string hf, run, tokens, out;
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
  }
  if (hf.empty() == run.empty() || tokens.empty() || out.empty()) {
    std::fprintf(stderr, "usage: frugal_gpt_logits (--hf DIR | --run RUN_DIR) --tokens 1,2,3 --out FILE\n");
    return 2;
  }
  try {
    torch::set_num_threads(1);
    std::vector<int64_t> ids;
    size_t start = 0;
    while (start < tokens.size()) {
      const size_t comma = tokens.find(',', start);
      ids.push_back(std::stoll(tokens.substr(start, comma - start)));
      start = comma == std::string::npos ? tokens.size() : comma + 1;
    }
    frugal::ModelConfig m;
    frugal::Gpt model{nullptr};
    if (!hf.empty()) {
      m = frugal::read_hf_gpt2_config(hf);
      model = frugal::Gpt(m);
      frugal::load_hf_gpt2(model->named_parameter_list(), m, hf);
    } else {
      m = frugal::resolve_config(run + "/config.toml", {}, {}).config.model;
      model = frugal::Gpt(m);
      const std::string w = run + "/final/model.safetensors";
      frugal::load_parameters(model->named_parameter_list(), frugal::load_safetensors(w), w);
    }
    model->eval();
    torch::NoGradGuard no_grad;
    const at::Tensor idx = torch::tensor(ids, torch::kLong).view({1, -1});
    const at::Tensor logits = model->forward(idx).squeeze(0).to(torch::kFloat).contiguous();
    frugal::save_safetensors(out, {{"logits", logits}});
    return 0;
  } catch (const frugal::Error& e) {
    std::fprintf(stderr, "frugal_gpt_logits: %s\n", e.what());
    return 2;
  }
}
