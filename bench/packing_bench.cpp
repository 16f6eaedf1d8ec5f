// packing_bench: training on a documents dataset (what `frugal prepare --format chat` writes) with
// data.packing = "pad" (one document a row) against "pack" (several a row, attention kept within
// each document and positions restarted: the model reads Batch::pos), and "pack" against the very
// same packed rows without positions (attention across documents, positions running on: what
// packing costs without the document mask). Batches come from DocumentSource, the model from
// make_causal_lm: the code `frugal train` runs. Per mode: steps of forward, backward (loss over the
// loss mask's targets) and AdamW, the first untimed; prints JSON with each mode's target tokens
// (the tokens the loss trains on), positions computed and target tokens per second.
//
//   packing_bench --data DIR [--arch llama|gpt (llama)] [--block T (256)] [--rows B (8)] [--steps N (12)]
//                 [--order pad,pack,pack_unmasked]
#include <fmt/format.h>

#include <torch/torch.h>

#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "frugal/core/omp_env.h"
#include "frugal/core/threads.h"
#include "frugal/data/document_dataset.h"
#include "frugal/model/model_family.h"

using namespace frugal;
using Clock = std::chrono::steady_clock;

namespace {

nlohmann::json measure(const std::string& mode, const std::shared_ptr<const DocumentDataset>& ds, const ModelConfig& mc,
                       int64_t rows, int64_t steps) {
  const auto packing = mode == "pad" ? DataConfig::Packing::kPad : DataConfig::Packing::kPack;
  DocumentSource src(ds, rows, mc.block, /*seed=*/1, 0, 1, false, packing);
  std::vector<Batch> batches;
  for (int64_t i = 0; i <= steps; ++i) {
    batches.push_back(src.train_batch(i));
    if (mode == "pack_unmasked") batches.back().pos = at::Tensor();
  }
  torch::manual_seed(1);
  CausalLm model = make_causal_lm(mc);
  torch::optim::AdamW opt(model->parameters(), torch::optim::AdamWOptions(1e-3));
  model->loss(batches[0].x, batches[0].y, batches[0].pos).backward();  // untimed: first-touch allocation
  opt.zero_grad();
  int64_t targets = 0;
  double loss_sum = 0;
  const auto t0 = Clock::now();
  for (int64_t i = 1; i <= steps; ++i) {
    const Batch& b = batches[static_cast<size_t>(i)];
    opt.zero_grad();
    at::Tensor loss = model->loss(b.x, b.y, b.pos);
    loss.backward();
    opt.step();
    loss_sum += loss.item<double>();
    targets += count_targets(b.y);
  }
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  const int64_t positions = steps * rows * mc.block;
  return {{"mode", mode},
          {"steps", steps},
          {"positions", positions},
          {"target_tokens", targets},
          {"target_fraction", static_cast<double>(targets) / static_cast<double>(positions)},
          {"seconds", s},
          {"step_ms", 1e3 * s / static_cast<double>(steps)},
          {"target_tokens_per_s", static_cast<double>(targets) / s},
          {"mean_loss", loss_sum / static_cast<double>(steps)}};
}

}  // namespace

int main(int argc, char** argv) {
  choose_openmp_wait_policy(argv);  // as frugal itself runs (core/omp_env.h)
  std::string data, arch = "llama", order = "pad,pack,pack_unmasked";
  int64_t block = 256, rows = 8, steps = 12;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--data") {
      data = v;
    } else if (a == "--arch") {
      arch = v;
    } else if (a == "--block") {
      block = std::stoll(v);
    } else if (a == "--rows") {
      rows = std::stoll(v);
    } else if (a == "--steps") {
      steps = std::stoll(v);
    } else if (a == "--order") {
      order = v;
    } else {
      fmt::print(stderr, "packing_bench: unknown option {}\n", a);
      return 2;
    }
  }
  if (data.empty()) {
    fmt::print(stderr, "packing_bench: --data DIR (a documents dataset) is required\n");
    return 2;
  }
  const ThreadSettings threads = apply_thread_settings(0);
  auto ds = std::make_shared<const DocumentDataset>(data);
  ModelConfig mc;
  mc.arch = arch == "gpt" ? ModelConfig::Arch::kGpt : ModelConfig::Arch::kLlama;
  mc.layers = 2;
  mc.heads = 4;
  mc.kv_heads = mc.arch == ModelConfig::Arch::kLlama ? 2 : 4;
  mc.embd = 128;
  mc.block = block;
  mc.vocab = ds->vocab();
  nlohmann::json out;
  out["documents"] = ds->size("train");
  out["document_tokens"] = ds->tokens("train");
  out["block"] = block;
  out["rows_per_batch"] = rows;
  out["threads"] = threads.intra_op;
  out["model"] = make_causal_lm(mc)->describe();
  out["results"] = nlohmann::json::array();
  std::stringstream modes(order);
  for (std::string mode; std::getline(modes, mode, ',');) out["results"].push_back(measure(mode, ds, mc, rows, steps));
  fmt::print("{}\n", out.dump(2));
  return 0;
}
