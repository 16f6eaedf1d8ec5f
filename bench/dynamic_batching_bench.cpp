// dynamic_batching_bench: naive padding vs length bucketing vs sequence packing on
// variable-length documents. Prints JSON: per strategy the padding fraction, the positions
// computed, the target tokens trained on, and target tokens per second of GPT training
// (forward, backward with padding ignored in the loss, AdamW step).
//
//   dynamic_batching_bench [--jsonl FILE] [--field text] [--docs N (300)] [--block T (128)] [--rows B (16)]
//
// Without --jsonl the documents are synthetic: N byte-token documents whose lengths follow a
// seeded log-normal distribution (median about block/4, a long tail past block), the shape of
// typical web or chat corpora. With --jsonl, the documents are that file's field, byte tokens.
#include <fmt/format.h>

#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "frugal/core/atomic_file.h"
#include "frugal/core/omp_env.h"
#include "frugal/core/threads.h"
#include "frugal/data/document_reader.h"
#include "frugal/data/packing.h"
#include "frugal/model/gpt.h"

using namespace frugal;
using Clock = std::chrono::steady_clock;

namespace {

constexpr int32_t kSeparator = 0;  // NUL: byte-level text practically never contains it
constexpr int32_t kPad = 0;

std::vector<std::vector<int32_t>> synthetic_docs(int n, int64_t block) {
  std::mt19937_64 rng(1234);
  std::lognormal_distribution<double> len(std::log(static_cast<double>(block) / 4.0), 0.9);
  std::uniform_int_distribution<int32_t> byte(32, 126);
  std::vector<std::vector<int32_t>> docs;
  for (int i = 0; i < n; ++i) {
    std::vector<int32_t> d(static_cast<size_t>(std::max(2.0, std::min(4.0 * static_cast<double>(block), len(rng)))));
    for (auto& t : d) t = byte(rng);
    docs.push_back(std::move(d));
  }
  return docs;
}

nlohmann::json measure(const std::string& name, const std::vector<TokenRows>& batches, const ModelConfig& mc) {
  torch::manual_seed(1);
  Gpt model(mc);
  torch::optim::AdamW opt(model->parameters(), torch::optim::AdamWOptions(1e-3));
  auto tensors = [](const TokenRows& b) {
    auto x = torch::tensor(b.x, torch::kLong).view({b.rows, b.width});
    auto y = torch::tensor(b.y, torch::kLong).view({b.rows, b.width});
    return std::make_pair(x, y);
  };
  // One untimed step so that first-touch allocation is not charged to the strategy.
  auto [wx, wy] = tensors(batches.front());
  model->loss(wx, wy).backward();
  opt.zero_grad();
  const auto t0 = Clock::now();
  double loss_sum = 0;
  for (const auto& b : batches) {
    auto [x, y] = tensors(b);
    opt.zero_grad();
    auto loss = model->loss(x, y);
    loss.backward();
    opt.step();
    loss_sum += loss.item<double>();
  }
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  const BatchingStats st = batching_stats(batches);
  return {{"strategy", name},
          {"batches", st.batches},
          {"positions", st.positions},
          {"padding_positions", st.padding},
          {"padding_fraction", st.padding_fraction()},
          {"target_tokens", st.targets},
          {"seconds", s},
          {"target_tokens_per_s", static_cast<double>(st.targets) / s},
          {"positions_per_s", static_cast<double>(st.positions) / s},
          {"mean_loss", loss_sum / static_cast<double>(batches.size())}};
}

}  // namespace

int main(int argc, char** argv) {
  choose_openmp_wait_policy(argv);  // as frugal itself runs (core/omp_env.h)
  std::string jsonl, field = "text";
  int docs_n = 300;
  int64_t block = 128, rows = 16;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--jsonl")
      jsonl = v;
    else if (a == "--field")
      field = v;
    else if (a == "--docs")
      docs_n = std::stoi(v);
    else if (a == "--block")
      block = std::stoll(v);
    else if (a == "--rows")
      rows = std::stoll(v);
  }
  const ThreadSettings threads = apply_thread_settings(0);
  std::vector<std::vector<int32_t>> docs;
  if (jsonl.empty()) {
    docs = synthetic_docs(docs_n, block);
  } else {
    std::vector<std::string> texts;
    split_documents(read_file(jsonl), jsonl, InputFormat::kJsonl, field, &texts);
    for (const auto& t : texts) {
      std::vector<int32_t> d;
      for (unsigned char ch : t) d.push_back(ch);
      docs.push_back(std::move(d));
    }
  }
  int64_t tokens = 0;
  for (const auto& d : docs) tokens += static_cast<int64_t>(d.size());
  ModelConfig mc;
  mc.layers = 2;
  mc.heads = 4;
  mc.embd = 128;
  mc.block = block;
  mc.vocab = 256;
  nlohmann::json out;
  out["documents"] = docs.size();
  out["document_tokens"] = tokens;
  out["block"] = block;
  out["rows_per_batch"] = rows;
  out["threads"] = threads.intra_op;
  out["model"] = fmt::format("GPT {} layers, embd {}, vocab {}", mc.layers, mc.embd, mc.vocab);
  out["source"] = jsonl.empty() ? "synthetic log-normal lengths, median block/4" : jsonl;
  out["results"] = {measure("pad", pad_batches(docs, block, rows, kPad), mc),
                    measure("bucket", bucket_batches(docs, block, rows, kPad, 7), mc),
                    measure("pack", pack_batches(docs, block, rows, kSeparator, kPad), mc)};
  fmt::print("{}\n", out.dump(2));
  return 0;
}
