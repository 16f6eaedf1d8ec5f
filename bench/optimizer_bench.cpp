// optimizer_bench: one AdamW step of frugal's FusedAdamW against torch::optim::AdamW on the
// parameter shapes of a GPT (default: the "wide" bench model, 4 layers, embd 512, 12.7M
// parameters), the optimizer step alone (gradients already in place; no zero_grad, no clipping).
// The two alternate for R rounds of S steps each; prints one JSON object with the medians.
//
//   optimizer_bench [--layers L] [--embd C] [--vocab V] [--block T] [--rounds R] [--steps S]
//                   [--threads N]   (intra-op threads for both; default 2, as frugal train here)
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "frugal/train/fused_adamw.h"

namespace {

using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// The GPT's parameter shapes: token and position embeddings, then per layer two LayerNorms
// (weight, bias), qkv and proj, fc and fc_proj (weight, bias), then the final LayerNorm.
std::vector<std::vector<int64_t>> gpt_shapes(int64_t layers, int64_t c, int64_t vocab, int64_t block) {
  std::vector<std::vector<int64_t>> s = {{vocab, c}, {block, c}};
  for (int64_t l = 0; l < layers; ++l)
    for (auto shape : std::vector<std::vector<int64_t>>{
             {c}, {c}, {3 * c, c}, {3 * c}, {c, c}, {c}, {c}, {c}, {4 * c, c}, {4 * c}, {c, 4 * c}, {c}})
      s.push_back(shape);
  s.push_back({c});
  s.push_back({c});
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t layers = 4, embd = 512, vocab = 256, block = 64;
  int rounds = 5, steps = 10, threads = 2;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    const long long v = std::stoll(argv[i + 1]);
    if (a == "--layers")
      layers = v;
    else if (a == "--embd")
      embd = v;
    else if (a == "--vocab")
      vocab = v;
    else if (a == "--block")
      block = v;
    else if (a == "--rounds")
      rounds = static_cast<int>(v);
    else if (a == "--steps")
      steps = static_cast<int>(v);
    else if (a == "--threads")
      threads = static_cast<int>(v);
    else {
      std::fprintf(stderr, "optimizer_bench: unknown argument '%s'\n", a.c_str());
      return 2;
    }
  }
  torch::set_num_threads(threads);
  torch::manual_seed(1);
  std::vector<torch::Tensor> ours, ref;
  int64_t params = 0;
  for (const auto& shape : gpt_shapes(layers, embd, vocab, block)) {
    torch::Tensor t = torch::randn(shape) * 0.02;
    ours.push_back(t.clone().requires_grad_());
    ref.push_back(t.clone().requires_grad_());
    params += t.numel();
  }
  // Decayed matrices and undecayed vectors, as the trainer groups them.
  std::vector<torch::Tensor> ours_decay, ours_plain, ref_decay, ref_plain;
  for (size_t i = 0; i < ours.size(); ++i) {
    (ours[i].dim() >= 2 ? ours_decay : ours_plain).push_back(ours[i]);
    (ref[i].dim() >= 2 ? ref_decay : ref_plain).push_back(ref[i]);
  }
  frugal::FusedAdamW fused({{ours_decay, 0.1}, {ours_plain, 0.0}}, frugal::AdamWHyper{3e-4, 0.9, 0.99, 1e-8});
  auto opts = [](double wd) {
    return std::make_unique<torch::optim::AdamWOptions>(
        torch::optim::AdamWOptions(3e-4).betas({0.9, 0.99}).eps(1e-8).weight_decay(wd));
  };
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(ref_decay, opts(0.1));
  groups.emplace_back(ref_plain, opts(0.0));
  torch::optim::AdamW torch_adamw(groups, *opts(0.1));
  {
    torch::NoGradGuard ng;
    for (size_t i = 0; i < ours.size(); ++i) {
      torch::Tensor g = torch::randn(ours[i].sizes()) * 0.01;
      ours[i].mutable_grad().copy_(g);  // FusedAdamW's flat gradient view
      ref[i].mutable_grad() = g.clone();
    }
  }
  auto time_steps = [&](auto&& step) {
    const auto t0 = Clock::now();
    for (int s = 0; s < steps; ++s) step();
    return std::chrono::duration<double, std::milli>(Clock::now() - t0).count() / steps;
  };
  fused.step();  // warm-up: first-touch of the moments
  torch_adamw.step();
  std::vector<double> f_ms, t_ms;
  for (int r = 0; r < rounds; ++r) {
    f_ms.push_back(time_steps([&] { fused.step(); }));
    t_ms.push_back(time_steps([&] { torch_adamw.step(); }));
  }
  nlohmann::ordered_json j;
  j["params"] = params;
  j["tensors"] = ours.size();
  j["threads"] = torch::get_num_threads();
  j["rounds"] = rounds;
  j["steps_per_round"] = steps;
  j["fused_adamw_ms_per_step_median"] = median(f_ms);
  j["torch_adamw_ms_per_step_median"] = median(t_ms);
  j["fused_adamw_ms_per_step"] = f_ms;
  j["torch_adamw_ms_per_step"] = t_ms;
  j["speedup"] = median(t_ms) / median(f_ms);
  j["fused_gb_per_s"] = 28.0 * static_cast<double>(params) / (median(f_ms) * 1e6);
  std::printf("%s\n", j.dump(2).c_str());
  return 0;
}
