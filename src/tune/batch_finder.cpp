// The batch-size finder; see batch_finder.h.
#include "frugal/tune/batch_finder.h"

#include <torch/torch.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <optional>
#include <tuple>

#include "frugal/ckpt/checkpoint_writer.h"
#include "frugal/core/atomic_file.h"
#include "frugal/core/compat.h"
#include "frugal/core/config_loader.h"
#include "frugal/core/console.h"
#include "frugal/core/device.h"
#include "frugal/core/errors.h"
#include "frugal/core/memory.h"
#include "frugal/core/wall_clock.h"
#include "frugal/data/batch_source.h"
#include "frugal/model/freeze.h"
#include "frugal/model/lora.h"
#include "frugal/model/model_family.h"
#include "frugal/train/train_step.h"

namespace frugal {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;

// Random tokens of the probe's shape: memory does not depend on which tokens they are.
class RandomTokens final : public BatchSource {
 public:
  RandomTokens(int64_t rows, int64_t block, int64_t vocab) : rows_(rows), block_(block), vocab_(vocab) {}
  Batch train_batch(int64_t) override { return make(); }
  Batch val_batch(int64_t) override { return make(); }
  std::string describe() const override { return "random tokens (batch-size probe)"; }
  int64_t train_tokens() const override { return rows_ * block_; }
  int64_t val_tokens() const override { return rows_ * block_; }

 private:
  Batch make() const {
    at::Tensor t = torch::randint(vocab_, {rows_, block_ + 1}, torch::kLong);
    return {t.narrow(1, 0, block_).contiguous(), t.narrow(1, 1, block_).contiguous()};
  }
  int64_t rows_, block_, vocab_;
};

std::string option_name(const Config& c, const std::string& key) { return format_value(find_key(key)->get(c)); }

}  // namespace

BatchSearch search_largest_batch(const BatchProbe& probe, int64_t max) {
  BatchSearch s;
  auto fits = [&](int64_t n) {
    ProbeOutcome o = probe(n);
    s.probes.push_back({n, o});
    return o.fits;
  };
  int64_t lo = 0;   // largest size known to fit
  int64_t hi = -1;  // smallest size known not to fit
  for (int64_t n = 1;; n = std::min(2 * n, max)) {
    if (!fits(n)) {
      hi = n;
      break;
    }
    lo = n;
    if (n >= max) break;
  }
  if (hi > 0) {
    while (hi - lo > 1) {
      const int64_t mid = lo + (hi - lo) / 2;
      if (fits(mid)) {
        lo = mid;
      } else {
        hi = mid;
      }
    }
  }
  s.largest = lo;
  return s;
}

std::pair<int64_t, int64_t> split_global_batch(int64_t global_batch, int64_t max_micro) {
  for (int64_t m = std::min(global_batch, std::max<int64_t>(1, max_micro)); m > 1; --m)
    if (global_batch % m == 0) return {m, global_batch / m};
  return {1, global_batch};
}

MemoryBudget memory_budget(const Config& c) {
  MemoryBudget b;
  if (c10::Device(c.run.device).is_cuda()) {
    b.source = "free device memory (probed by out-of-memory errors)";
    return b;
  }
  if (c.memory.limit_mb > 0) {
    b.bytes = c.memory.limit_mb * 1024 * 1024;
    b.source = fmt::format("memory.limit_mb = {}", c.memory.limit_mb);
  } else if (const int64_t cg = cgroup_memory_limit_bytes(); cg > 0) {
    b.bytes = resolve_tensor_bytes_limit(0);
    b.source =
        fmt::format("cgroup limit {:.0f} MiB less the process's non-tensor memory", static_cast<double>(cg) / kMiB);
  }
  return b;
}

ProbeOutcome probe_training_memory(const Config& config, int64_t micro_batch, int64_t budget_bytes) {
  const c10::Device device(config.run.device);
  const bool cpu = !device.is_cuda();
  Config c = config;
  c.data.micro_batch = micro_batch;
  c.train.global_batch = 0;
  c.train.accum = 0;
  at::Generator gen = at::detail::getDefaultCPUGenerator();
  at::Tensor rng;
  {
    std::lock_guard<std::mutex> lock(gen.mutex());
    rng = gen.get_state();
  }
  if (cpu) install_counting_allocator();
  const int64_t base = tensor_bytes_now();
  std::optional<TensorBytesLimitGuard> limit;
  if (cpu && budget_bytes > 0) limit.emplace(base + budget_bytes);
  reset_tensor_bytes_peak();
  // On a GPU the caching allocator is the judge (its out-of-memory error) and keeps the peak.
  device::reset_cuda_peak(device);
  const int64_t gpu_base = device::cuda_memory(device).allocated_now;
  ProbeOutcome out;
  try {
    RandomTokens data(micro_batch, c.model.block, c.model.vocab);
    CausalLm model = make_causal_lm(c.model);
    freeze_parameters(*model, c.train.freeze);
    install_lora(*model, c.lora);  // a LoRA run holds no gradients or moments for the base
    model->to(device);
    TrainStep step(c, model, data, device);
    {
      // A size that does not fit is an answer here, not an event of a run: the step's own
      // out-of-memory back-off (its "micro-batch N -> N/2" line, for a micro-batch the user never
      // configured) stays quiet, and a back-off means the size does not fit.
      auto& con = Console::get();
      const bool was_quiet = con.quiet();
      con.set_quiet(true);
      try {
        step.run(0, c.train.lr);  // forward, backward, optimizer (moments allocated)
      } catch (...) {
        con.set_quiet(was_quiet);
        throw;
      }
      con.set_quiet(was_quiet);
    }
    out.out_of_memory = step.oom_backoffs() > 0;  // it ran only in halves
    if (!out.out_of_memory) {
      {
        torch::NoGradGuard no_grad;  // the evaluation pass, gradients still held
        model->eval();
        const Batch b = to_device(data.val_batch(0), device);
        at::Tensor l = model->loss(b.x, b.y, b.pos);
        model->train();
      }
      // A checkpoint snapshot (checkpoint.async), again with the gradients alive.
      NamedTensors snap_model = snapshot_tensors(model->named_parameter_list());
      NamedTensors snap_opt = snapshot_tensors(step.optimizer().state_tensors());
      out.fits = true;
    }
  } catch (const std::exception& e) {
    if (!compat::is_out_of_memory(e)) throw;
    out.out_of_memory = true;
    if (!cpu) device::cuda_empty_cache();  // the failed probe's blocks back to the driver
  }
  {
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_state(rng);
  }
  if (!cpu) out.peak_bytes = device::cuda_memory(device).allocated_peak - gpu_base;
  if (cpu) {
    out.peak_bytes = tensor_bytes_peak() - base;
    if (budget_bytes > 0 &&
        static_cast<double>(out.peak_bytes) > (1.0 - c.tune.memory_margin) * static_cast<double>(budget_bytes))
      out.fits = false;
  }
  return out;
}

std::string batch_finder_cache_path() {
  namespace fs = std::filesystem;
  if (const char* d = std::getenv("FRUGAL_CACHE_DIR"); d && *d) return (fs::path(d) / "batch_finder.json").string();
  if (const char* d = std::getenv("XDG_CACHE_HOME"); d && *d)
    return (fs::path(d) / "frugal" / "batch_finder.json").string();
  const char* home = std::getenv("HOME");
  return (fs::path(home && *home ? home : ".") / ".cache" / "frugal" / "batch_finder.json").string();
}

std::string FinderResult::describe() const {
  std::string peak = peak_bytes > 0 && budget.bytes > 0
                         ? fmt::format(", peak {:.1f} MiB of a {:.1f} MiB budget",
                                       static_cast<double>(peak_bytes) / kMiB, static_cast<double>(budget.bytes) / kMiB)
                         : "";
  return fmt::format(
      "micro_batch {} x accum {} = global batch {} (largest micro-batch that fits: {}{}; "
      "budget: {}; {})",
      micro_batch, accum, global_batch, largest, peak, budget.source,
      from_cache ? "from the cache " + batch_finder_cache_path()
                 : fmt::format("{} probes in {:.1f} s", probes.size(), seconds));
}

FinderResult find_batch_size(const Config& config, const std::function<void(const std::string&)>& progress) {
  const auto t0 = std::chrono::steady_clock::now();
  const c10::Device device(config.run.device);
  FinderResult r;
  r.budget = memory_budget(config);
  if (!device.is_cuda() && r.budget.bytes <= 0)
    throw ConfigError(
        "batch-size finder: no memory budget on CPU; set memory.limit_mb (MiB of tensor "
        "memory the run may use), or run inside a cgroup with a memory limit");
  Config c = config;
  c.precision.mode = PrecisionPolicy(config.precision.mode, device).mode();  // auto measures once, here
  r.global_batch = c.data.micro_batch * accumulation_steps(c);
  r.cache_key = fmt::format(
      "gpt layers={} heads={} embd={} vocab={} block={} | device={} | precision={} | recompute={} | "
      "optimizer={} | budget={} | margin={} | torch={}",
      c.model.layers, c.model.heads, c.model.embd, c.model.vocab, c.model.block, device.str(),
      precision_name(c.precision.mode), to_string(c.memory.activation_checkpointing), option_name(c, "train.optimizer"),
      r.budget.bytes, c.tune.memory_margin, TORCH_VERSION);
  const std::string cache_path = batch_finder_cache_path();
  nlohmann::json cache = nlohmann::json::object();
  if (c.tune.cache && std::filesystem::exists(cache_path)) {
    cache = nlohmann::json::parse(read_small_file(cache_path), nullptr, /*allow_exceptions=*/false);
    if (!cache.is_object()) cache = nlohmann::json::object();  // unreadable: recomputed and rewritten
  }
  if (c.tune.cache && cache.contains(r.cache_key)) {
    const auto& e = cache[r.cache_key];
    r.largest = e.value("largest", int64_t{0});
    r.peak_bytes = e.value("peak_bytes", int64_t{0});
    r.from_cache = r.largest > 0;
  }
  if (!r.from_cache) {
    BatchSearch s = search_largest_batch(
        [&](int64_t n) {
          ProbeOutcome o = probe_training_memory(c, n, r.budget.bytes);
          if (progress)
            progress(fmt::format("batch finder: micro_batch {:>5} {}{}", n, o.fits ? "fits" : "does not fit",
                                 o.out_of_memory ? " (out of memory)"
                                 : o.peak_bytes > 0
                                     ? fmt::format(" (peak {:.1f} MiB)", static_cast<double>(o.peak_bytes) / kMiB)
                                     : ""));
          return o;
        },
        c.tune.max_micro_batch);
    r.probes = s.probes;
    r.largest = s.largest;
    if (device.is_cuda() && r.largest > 1)  // no exact peak on CUDA: keep the margin in batch size
      r.largest =
          std::max<int64_t>(1, static_cast<int64_t>(static_cast<double>(r.largest) * (1.0 - c.tune.memory_margin)));
    for (const auto& p : s.probes)
      if (p.micro_batch == r.largest) r.peak_bytes = p.outcome.peak_bytes;
    if (r.largest < 1)
      throw ConfigError(
          fmt::format("batch-size finder: not even one sequence of model.block = {} fits the "
                      "budget ({}, {:.0f}% margin); raise memory.limit_mb, lower model.block, "
                      "or set memory.activation_checkpointing = \"blocks\"",
                      c.model.block, r.budget.source, 100 * c.tune.memory_margin));
    if (c.tune.cache) {
      cache[r.cache_key] = {{"largest", r.largest}, {"peak_bytes", r.peak_bytes}};
      write_file_atomic(cache_path, cache.dump(2) + "\n");
    }
  }
  std::tie(r.micro_batch, r.accum) = split_global_batch(r.global_batch, r.largest);
  r.seconds = seconds_since(t0);
  return r;
}

}  // namespace frugal
