// The CUDA paths, run for real on a GPU (CTest label `cuda`; `ctest -L cuda`). On a machine
// without a GPU every case here is reported as skipped with the reason, never as passed.
//
// bf16 and fp16 training track fp32; the loss scaler skips steps on real fp16 overflow; the
// trainer backs off on the CUDA caching allocator's out-of-memory error; a stopped and resumed run
// matches the uninterrupted one bitwise in deterministic mode; the loader hands over pinned host
// batches; NCCL works with world size 1; an
// async checkpoint's snapshot of GPU state is page-locked, exact and reused, and writes what a
// sync save writes; steps between log steps do not wait for the GPU; packed rows (several
// documents a row) compute on the GPU what frugal's CPU kernels compute.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <csignal>
#include <filesystem>
#include <fstream>

#include "frugal/ckpt/checkpoint_writer.h"
#include "frugal/core/device.h"
#include "frugal/data/batch_source.h"
#include "frugal/dist/process_group.h"
#include "frugal/model/gpt.h"
#include "frugal/model/model_family.h"
#include "frugal/model/nf4.h"
#include "frugal/train/preemption.h"
#include "frugal/train/train_step.h"
#include "frugal/train/trainer.h"
#include "frugal_build_config.h"
#include "signal_at.h"
#include "cuda_util.h"
#include "test_util.h"

#if FRUGAL_HAVE_CUDA
#include <ATen/cuda/Sleep.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAEvent.h>
#endif

namespace frugal::cuda_test {
namespace {
namespace fs = std::filesystem;

using test::train_on_gpu;

TEST(Cuda, DoctorFactsNameTheGpu) {
  FRUGAL_REQUIRE_GPU();
  auto gpus = device::cuda_devices();
  ASSERT_FALSE(gpus.empty());
  EXPECT_FALSE(gpus[0].name.empty());
  EXPECT_GT(gpus[0].total_bytes, 0);
  EXPECT_GE(gpus[0].major, 5);
}

// NF4 on the GPU (model/nf4.h): the tensor expressions' dequantisation gives the CPU loop's bits,
// and a QLoRA run trains there.
TEST(Cuda, Nf4OnTheGpuGivesTheCpusBitsAndAQloraRunTrains) {
  FRUGAL_REQUIRE_GPU();
  torch::manual_seed(4);
  const at::Tensor w = torch::randn({96, 70});
  const Nf4 cpu = nf4_quantize(w);
  const Nf4 gpu{cpu.codes.cuda(), cpu.scalers.cuda(), cpu.factors.cuda(), cpu.mean.cuda()};
  EXPECT_TRUE(nf4_dequantize(gpu, {96, 70}).cpu().equal(nf4_dequantize(cpu, {96, 70})));
  const Nf4 requantised = nf4_quantize(w.cuda());
  EXPECT_TRUE(requantised.codes.cpu().equal(cpu.codes)) << "the GPU quantises to other codes";
  test::TempDir dir;
  const auto s = train_on_gpu(dir.path(), {"lora.rank=4", "lora.base_dtype=nf4", "precision.mode=bf16"});
  EXPECT_EQ(s["stop_kind"], "completed");
  EXPECT_EQ(s["lora"]["base_dtype"], "nf4");
}

// Two models of `mc` with the same weights (seeded), the second on the GPU.
std::pair<CausalLm, CausalLm> on_cpu_and_gpu(const ModelConfig& mc, uint64_t seed) {
  torch::manual_seed(seed);
  CausalLm cpu = make_causal_lm(mc), gpu = make_causal_lm(mc);
  {
    torch::NoGradGuard ng;
    auto src = cpu->parameters(), dst = gpu->parameters();
    for (size_t i = 0; i < src.size(); ++i) dst[i].copy_(src[i]);
  }
  gpu->to(torch::kCUDA);
  return {cpu, gpu};
}

// The loss of (x, y) (at positions `pos` when defined) and every parameter's gradient agree
// between the two models of on_cpu_and_gpu: 1e-4 on the loss, allclose(1e-3, 1e-5) per gradient.
void expect_same_loss_and_gradients(CausalLm& cpu, CausalLm& gpu, const at::Tensor& x, const at::Tensor& y,
                                    const at::Tensor& pos, const std::string& what) {
  auto lc = pos.defined() ? cpu->loss(x, y, pos) : cpu->loss(x, y);
  auto lg = pos.defined() ? gpu->loss(x.cuda(), y.cuda(), pos.cuda()) : gpu->loss(x.cuda(), y.cuda());
  EXPECT_NEAR(lg.item<double>(), lc.item<double>(), 1e-4) << what;
  lc.backward();
  lg.backward();
  auto gc = cpu->parameters(), gg = gpu->parameters();
  for (size_t i = 0; i < gc.size(); ++i)
    EXPECT_TRUE(torch::allclose(gg[i].grad().cpu(), gc[i].grad(), 1e-3, 1e-5)) << what << ", parameter " << i;
}

TEST(Cuda, GptForwardAndGradientsOnTheGpuMatchTheCpu) {
  FRUGAL_REQUIRE_GPU();
  device::set_tf32(false);
  ModelConfig mc;
  mc.layers = 2;
  mc.heads = 4;
  mc.embd = 64;
  mc.block = 32;
  mc.vocab = 250;  // not a multiple of 64: on the GPU the head's product runs 256 wide (model.head_multiple auto)
  torch::manual_seed(3);
  Gpt cpu(mc);
  Gpt gpu(mc);
  {
    torch::NoGradGuard ng;
    auto src = cpu->parameters(), dst = gpu->parameters();
    for (size_t i = 0; i < src.size(); ++i) dst[i].copy_(src[i]);
  }
  gpu->to(torch::kCUDA);
  auto x = torch::randint(0, mc.vocab, {3, mc.block}, torch::kLong),
       y = torch::randint(0, mc.vocab, {3, mc.block}, torch::kLong);
  {
    torch::NoGradGuard ng;
    EXPECT_EQ(gpu->forward(x.cuda()).stride(1), 256);  // padded on the GPU
    EXPECT_EQ(cpu->forward(x).stride(1), 250);         // not on the CPU
  }
  auto lc = cpu->loss(x, y);
  auto lg = gpu->loss(x.cuda(), y.cuda());  // ATen's fused attention on the GPU, frugal's kernel on the CPU
  EXPECT_NEAR(lg.item<double>(), lc.item<double>(), 1e-4);
  lc.backward();
  lg.backward();
  auto gc = cpu->parameters(), gg = gpu->parameters();
  for (size_t i = 0; i < gc.size(); ++i)
    EXPECT_TRUE(torch::allclose(gg[i].grad().cpu(), gc[i].grad(), 1e-3, 1e-5)) << "parameter " << i;
}

// The Llama family on the GPU: grouped heads through SDPA's enable_gqa (and, with a window, the
// masked path), RMSNorm, SwiGLU and the chunked loss in ATen, against frugal's CPU kernels; then a
// bf16 training run on the GPU tracks fp32's.
TEST(Cuda, LlamaForwardAndGradientsOnTheGpuMatchTheCpuAndBf16TracksFp32) {
  FRUGAL_REQUIRE_GPU();
  device::set_tf32(false);
  for (int64_t window : {0, 9}) {
    ModelConfig mc;
    mc.arch = ModelConfig::Arch::kLlama;
    mc.layers = 2;
    mc.heads = 4;
    mc.kv_heads = 2;
    mc.embd = 64;
    mc.block = 32;
    mc.vocab = 250;
    mc.tie_embeddings = false;
    mc.sliding_window = window;
    auto [cpu, gpu] = on_cpu_and_gpu(mc, 4);
    auto x = torch::randint(0, mc.vocab, {3, mc.block}, torch::kLong),
         y = torch::randint(0, mc.vocab, {3, mc.block}, torch::kLong);
    expect_same_loss_and_gradients(cpu, gpu, x, y, at::Tensor(), fmt::format("window {}", window));
    EXPECT_EQ(cpu->generate({1, 2, 3}, 8, 0.0, 0), gpu->generate({1, 2, 3}, 8, 0.0, 0)) << "window " << window;
  }
  test::TempDir a, b, f;
  const std::vector<std::string> llama = {"model.arch=llama", "model.heads=4", "model.kv_heads=2"};
  auto fa = llama, fb = llama, ff = llama;
  fa.push_back("precision.mode=fp32");
  fa.push_back("precision.tf32=false");
  fb.push_back("precision.mode=bf16");
  ff.push_back("precision.mode=fp16");  // with dynamic loss scaling
  auto sa = train_on_gpu(a.path(), fa);
  auto sb = train_on_gpu(b.path(), fb);
  auto sf = train_on_gpu(f.path(), ff);
  EXPECT_NEAR(sb["final_val_loss"].get<double>(), sa["final_val_loss"].get<double>(), 0.1);
  EXPECT_NEAR(sf["final_val_loss"].get<double>(), sa["final_val_loss"].get<double>(), 0.1);
  EXPECT_EQ(sf["levers"]["precision"]["loss_scaling"], true);
}

// Packed rows (data.packing = pack) on the GPU: ATen's attention with the block-diagonal mask
// (SDPA's memory-efficient kernel) against frugal's CPU kernels, for both families (a sliding
// window too): the loss over the rows' targets and every parameter's gradient.
TEST(Cuda, PackedRowsOnTheGpuMatchTheCpuKernels) {
  FRUGAL_REQUIRE_GPU();
  device::set_tf32(false);
  for (auto arch : {ModelConfig::Arch::kGpt, ModelConfig::Arch::kLlama}) {
    for (int64_t window : {0, 7}) {
      if (arch == ModelConfig::Arch::kGpt && window > 0) continue;
      ModelConfig mc = test::tiny_model(arch);
      mc.block = 32;
      mc.sliding_window = window;
      auto [cpu, gpu] = on_cpu_and_gpu(mc, 6);
      // Row 0: documents of 9, 14 and 6 positions, then padding; row 1: 32 and 0.
      at::Tensor pos = torch::zeros({2, mc.block}, torch::kLong);
      int64_t t = 0;
      for (int64_t n : {9, 14, 6, 3})
        for (int64_t u = 0; u < n; ++u) pos[0][t++] = u;
      pos[1] = torch::arange(mc.block, torch::kLong);
      auto x = torch::randint(0, mc.vocab, {2, mc.block}, torch::kLong),
           y = torch::randint(0, mc.vocab, {2, mc.block}, torch::kLong);
      expect_same_loss_and_gradients(cpu, gpu, x, y, pos, fmt::format("window {}", window));
    }
  }
}

TEST(Cuda, Bf16AndFp16TrainingTrackFp32) {
  FRUGAL_REQUIRE_GPU();
  test::TempDir a, b, c;
  train_on_gpu(a.path(), {"precision.mode=fp32", "precision.tf32=false"});
  auto sb = train_on_gpu(b.path(), {"precision.mode=bf16"});
  auto sc = train_on_gpu(c.path(), {"precision.mode=fp16"});
  EXPECT_EQ(sb["precision"], "bf16");
  EXPECT_EQ(sc["precision"], "fp16");
  auto la = test::step_losses(a.path() + "/demo/metrics.jsonl"),
       lb = test::step_losses(b.path() + "/demo/metrics.jsonl"),
       lc = test::step_losses(c.path() + "/demo/metrics.jsonl");
  ASSERT_FALSE(la.empty());
  ASSERT_EQ(la.size(), lb.size());
  ASSERT_EQ(la.size(), lc.size());
  EXPECT_LT(la.back(), la.front()) << "fp32 did not learn";
  // Reduced precision follows the fp32 curve: within 5% at every logged step.
  for (size_t i = 0; i < la.size(); ++i) {
    EXPECT_NEAR(lb[i], la[i], 0.05 * la[i]) << "bf16, log line " << i;
    EXPECT_NEAR(lc[i], la[i], 0.05 * la[i]) << "fp16, log line " << i;
  }
}

TEST(Cuda, LossScalerSkipsStepsOnRealFp16Overflow) {
  FRUGAL_REQUIRE_GPU();
  test::TempDir d;
  // 2^40 times the loss overflows fp16 (max 65504) in backward: the first steps must be skipped
  // and the scale backed off until the gradients are finite, and training then goes on.
  auto s = train_on_gpu(d.path(),
                        {"precision.mode=fp16", "precision.init_scale=1099511627776", "precision.backoff_factor=0.5"});
  EXPECT_GT(s["skipped_steps"].get<int64_t>(), 0);
  EXPECT_LT(s["loss_scale"].get<double>(), 1099511627776.0);
  EXPECT_GT(s["optimizer_steps"].get<int64_t>(), 0);
  auto l = test::step_losses(d.path() + "/demo/metrics.jsonl");
  ASSERT_FALSE(l.empty());
  EXPECT_TRUE(std::isfinite(l.back()));
}

TEST(Cuda, OutOfMemoryOnTheCachingAllocatorBacksOffTheMicroBatch) {
  FRUGAL_REQUIRE_GPU();
#if FRUGAL_HAVE_CUDA
  // Cap this process at a sliver of the GPU: the model's weights, gradients and AdamW moments
  // take ~200 MB and each sample's activations ~40 MB, so micro-batch 64 cannot fit in 600 MB and
  // 4 can.
  const auto gpus = device::cuda_devices();
  const double cap_bytes = 600e6;
  // The caching allocator of a device exists from its first allocation on; a cap set before that
  // is refused ("Allocator not initialized for device").
  (void)torch::empty({1}, torch::TensorOptions().device(torch::kCUDA));
  c10::cuda::CUDACachingAllocator::setMemoryFraction(cap_bytes / static_cast<double>(gpus[0].total_bytes), 0);
  test::TempDir d;
  nlohmann::json s;
  try {
    s = train_on_gpu(d.path(), {"model.embd=512", "model.layers=4", "model.heads=8", "model.block=256",
                                "data.micro_batch=64", "train.steps=3", "precision.mode=fp32", "train.eval_every=0"});
  } catch (...) {
    c10::cuda::CUDACachingAllocator::setMemoryFraction(1.0, 0);
    throw;
  }
  c10::cuda::CUDACachingAllocator::setMemoryFraction(1.0, 0);
  EXPECT_GT(s["oom_backoffs"].get<int64_t>(), 0);
  EXPECT_LT(s["micro_batch_effective"].get<int64_t>(), 64);
  EXPECT_EQ(s["steps"], 3);
#endif
}

TEST(Cuda, StoppedAndResumedRunMatchesTheUninterruptedOneBitwiseInDeterministicMode) {
  FRUGAL_REQUIRE_GPU();
  test::TempDir a, b;
  // Dropout draws from the GPU's generator: its state must travel in the checkpoint.
  const std::vector<std::string> x = {"run.deterministic=true", "model.dropout=0.1", "precision.mode=bf16",
                                      "checkpoint.every_steps=7", "checkpoint.keep_last=5"};
  train_on_gpu(a.path(), x);
  TrainerOptions o;
  o.handle_signals = true;
  o.callbacks = {std::make_shared<test::SignalAt>(14)};
  auto stopped = train_on_gpu(b.path(), x, o);
  ASSERT_EQ(stopped["stop_kind"], "preempted");
  TrainerOptions r;
  r.resume = "auto";
  r.overwrite = false;
  auto done = train_on_gpu(b.path(), x, r);
  EXPECT_EQ(done["stop_kind"], "completed");
  EXPECT_EQ(test::read_text(a.path() + "/demo/final/model.safetensors"),
            test::read_text(b.path() + "/demo/final/model.safetensors"))
      << "final weights differ";
}

TEST(Cuda, LoaderHandsOverPinnedBatchesAndCopiesThemWithoutBlocking) {
  FRUGAL_REQUIRE_GPU();
  test::TempDir d;
  auto sets = test::tiny_overrides(d.path());
  sets.push_back("run.device=cuda");
  Config c = resolve_config("", sets, {}).config;
  auto src = make_batch_source(c, 0, 1);
  Batch b = src->train_batch(0);
  EXPECT_TRUE(b.x.is_pinned());
  Batch g = to_device(b, c10::Device(c10::kCUDA, 0));
  EXPECT_TRUE(g.x.is_cuda());
  EXPECT_TRUE(torch::equal(g.x.cpu(), b.x));
}

// An async checkpoint's snapshot of GPU state: page-locked, exact, complete when copy() returns
// (the copies are queued without blocking and waited for once), and the buffer kept for the next
// save.
TEST(Cuda, CheckpointSnapshotOfGpuStateIsPageLockedExactAndReused) {
  FRUGAL_REQUIRE_GPU();
  torch::manual_seed(5);
  const auto g = torch::TensorOptions().device(torch::kCUDA);
  NamedTensors model = {{"w", torch::randn({256, 384}, g)},
                        {"wt", torch::randn({384, 96}, g).t()},
                        {"h", torch::randn({1001}, g.dtype(torch::kBFloat16))}};
  NamedTensors optim = {{"m", torch::randn({4097}, g)}, {"step", torch::tensor(int64_t{7}, g)}};
  std::vector<at::Tensor> want;
  for (const NamedTensors* l : {&model, &optim})
    for (const auto& [n, t] : *l) want.push_back(t.cpu());
  SnapshotBuffer buf;
  auto c = buf.copy({&model, &optim});
  EXPECT_TRUE(buf.pinned());
  for (NamedTensors* l : {&model, &optim})
    for (auto& [n, t] : *l) t.fill_(0);  // queued right behind the copies
  device::synchronize(c10::Device(c10::kCUDA, 0));
  size_t i = 0;
  for (const auto& l : c)
    for (const auto& [n, t] : l) {
      EXPECT_TRUE(t.is_pinned()) << n;
      EXPECT_TRUE(torch::equal(t, want[i++])) << n;
    }
  const void* where = c[0][0].second.data_ptr();
  c.clear();
  auto again = buf.copy({&model, &optim});
  EXPECT_EQ(buf.allocations(), 1);
  EXPECT_EQ(again[0][0].second.data_ptr(), where);
  EXPECT_TRUE(torch::equal(again[0][0].second, torch::zeros({256, 384})));
}

// The async save's page-locked snapshot holds what a sync save writes: every checkpoint's weights
// and optimizer state are byte-identical (deterministic mode, same seed).
TEST(Cuda, AsyncCheckpointsOnTheGpuWriteTheSameFilesAsSync) {
  FRUGAL_REQUIRE_GPU();
  test::TempDir a, b;
  std::vector<std::string> x = {"run.deterministic=true", "precision.mode=bf16", "checkpoint.every_steps=4",
                                "checkpoint.keep_last=20"};
  auto xs = x, xa = x;
  xs.push_back("checkpoint.async=false");
  xa.push_back("checkpoint.async=true");
  train_on_gpu(a.path(), xs);
  train_on_gpu(b.path(), xa);
  int compared = 0;
  for (const auto& e : fs::directory_iterator(a.path() + "/demo/checkpoints")) {
    if (!e.is_directory()) continue;
    const std::string step = e.path().filename().string();
    for (const char* f : {"model.safetensors", "master.safetensors", "optimizer.safetensors"}) {
      const std::string pa = e.path().string() + "/" + f, pb = b.path() + "/demo/checkpoints/" + step + "/" + f;
      if (!fs::exists(pa)) continue;
      EXPECT_EQ(test::read_text(pa), test::read_text(pb)) << step << "/" << f;
      ++compared;
    }
  }
  EXPECT_GE(compared, 4);
}

TEST(Cuda, NcclProcessGroupWithWorldSizeOneReducesOnTheGpu) {
  FRUGAL_REQUIRE_GPU();
  if (!device::build_info().nccl_compiled) GTEST_SKIP() << "this build has no NCCL process group";
  DistConfig dc;
  dc.backend = DistBackend::kNccl;
  dist::DistEnv env;
  env.master_port = 29631;
  auto pg = dist::connect(env, dc, c10::Device(c10::kCUDA, 0));
  EXPECT_EQ(pg->backend(), "nccl");
  at::Tensor t = torch::full({4}, 3.0, torch::TensorOptions().device(torch::kCUDA));
  pg->allreduce_sum(t)->wait();
  EXPECT_TRUE(torch::equal(t.cpu(), torch::full({4}, 3.0)));
}

TEST(Cuda, SummaryReportsTheCachingAllocatorsPeakAndDevicePhaseTimes) {
  FRUGAL_REQUIRE_GPU();
  test::TempDir d;
  auto s = train_on_gpu(d.path(), {});
  EXPECT_GT(s["peak_tensor_mb"].get<double>(), 0.0);
  EXPECT_GE(s["peak_reserved_mb"].get<double>(), s["peak_tensor_mb"].get<double>());
  // Device time per step (log_every = 5: most steps were settled at a later log step).
  for (const char* k : {"forward_ms_per_step", "backward_ms_per_step", "optimizer_ms_per_step"})
    EXPECT_GT(s[k].get<double>(), 0.0) << k;
}

// Random token windows, made on the host (pageable memory, as a plain BatchSource hands them).
class RandomTokens : public BatchSource {
 public:
  RandomTokens(int64_t rows, int64_t block) : rows_(rows), block_(block) {}
  Batch train_batch(int64_t i) override {
    auto g = at::make_generator<at::CPUGeneratorImpl>(static_cast<uint64_t>(i + 1));
    at::Tensor t = at::randint(0, 256, {rows_, block_ + 1}, g, torch::TensorOptions().dtype(torch::kLong));
    return {t.narrow(1, 0, block_).contiguous(), t.narrow(1, 1, block_).contiguous()};
  }
  Batch val_batch(int64_t i) override { return train_batch(i); }
  std::string describe() const override { return "random tokens"; }
  int64_t train_tokens() const override { return rows_ * block_; }
  int64_t val_tokens() const override { return rows_ * block_; }

 private:
  int64_t rows_, block_;
};

// Between log steps the host queues the next steps while the GPU still runs earlier ones: a
// non-settling step returns before a long kernel queued ahead of it has finished (an event
// recorded after that kernel still pending: any wait for the device inside the step would have
// waited for it), only a settling step waits for the device's events and reports its own device
// times, and the settled sums hold every step's device time.
TEST(Cuda, OnlySettlingStepsWaitForTheGpu) {
  FRUGAL_REQUIRE_GPU();
#if FRUGAL_HAVE_CUDA
  Config c = test::tiny_config();
  c.data.micro_batch = 8;
  torch::manual_seed(2);
  Gpt model(c.model);
  model->to(torch::kCUDA);
  RandomTokens data(c.data.micro_batch, c.model.block);
  TrainStep step(c, as_causal_lm(model), data, torch::kCUDA);
  // Two settled steps first: the first steps create cuBLAS handles, load modules and allocate.
  for (int64_t i = 0; i < 2; ++i) step.run(i, c.train.lr);
  const int64_t waits0 = step.device_waits();
  PhaseTimes settled;
  for (int64_t i = 0; i < 10; ++i) {
    step.set_settle_each_step(i == 9);
    at::cuda::sleep(int64_t{200} * 1000 * 1000);  // about 0.1 s of GPU clock cycles
    c10::cuda::CUDAEvent after_sleep;
    after_sleep.record();
    StepResult r = step.run(2 + i, c.train.lr);
    ASSERT_TRUE(r.device_timed);
    EXPECT_EQ(r.phases_on_device, i == 9) << "step " << i;
    settled += r.settled;
    if (i < 9) {
      EXPECT_EQ(step.device_waits(), waits0) << "step " << i << " waited for the device's events";
      EXPECT_FALSE(after_sleep.query())
          << "step " << i << " returned after the kernel queued before it had finished: something in the "
          << "step waited for the device (an .item(), a copy to the host, or a synchronising ATen operation)";
    }
  }
  EXPECT_EQ(step.device_waits(), waits0 + 1);
  // Ten steps' forward device time, each step's at least a kernel's.
  EXPECT_GT(settled.forward_s, 0.0);
  EXPECT_GT(settled.backward_s, 0.0);
  EXPECT_GT(settled.optimizer_s, 0.0);
  const PhaseTimes rest = step.settle_pending();
  EXPECT_EQ(rest.forward_s + rest.backward_s + rest.optimizer_s, 0.0);
#endif
}

}  // namespace
}  // namespace frugal::cuda_test
