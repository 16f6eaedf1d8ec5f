// The GPU step's MLP and optimizer pass (CTest label `cuda`): the bias + GELU kernels against
// their ATen body and a double-precision reference (both GELU forms, fp32 and bf16, the vector
// and the scalar path, the bias gradient's bits run to run); ATen's fused AdamW on the flat
// buffers, with host scalars and with the rate and step count kept on the GPU, against the CPU's
// update; the step as a CUDA graph (train.cuda_graphs) against the eager step, bitwise in
// deterministic mode, through evaluations and a stop and resume, and the run stopped with the
// reason when the step cannot be captured. Skipped without a GPU.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <string>
#include <vector>

#include "frugal/core/compat.h"
#include "frugal/core/errors.h"
#include "frugal/dist/env.h"
#include "frugal/dist/zero_adamw.h"
#include "frugal/model/working_weights.h"
#include "frugal/model/fused_gelu.h"
#include "frugal/model/gpt.h"
#include "frugal/model/kernel_ops.h"
#include "frugal/train/fused_adamw.h"
#include "frugal/train/grad_clip.h"
#include "frugal/train/train_step.h"
#include "frugal/data/batch_source.h"
#include "cuda_util.h"
#include "signal_at.h"

namespace frugal::cuda_step_test {
namespace {

// u (rows, C) on the GPU in `dtype`, offset by `offset` elements inside its buffer (1: no row
// starts on 16 bytes, so the kernels take their scalar path).
at::Tensor gpu_rows(int64_t rows, int64_t C, at::ScalarType dtype, int64_t offset, double scale) {
  const auto opts = torch::TensorOptions().device(torch::kCUDA).dtype(dtype);
  return (torch::randn({rows * C + offset}, opts.dtype(torch::kFloat)) * scale)
      .to(dtype)
      .narrow(0, offset, rows * C)
      .view({rows, C});
}

TEST(Cuda, BiasGeluKernelsGiveTheReferenceValuesAndGradients) {
  FRUGAL_REQUIRE_GPU();
  if (const std::string why = cuda_kernels_unavailable(torch::Device(torch::kCUDA, 0)); !why.empty())
    GTEST_SKIP() << why;
  torch::manual_seed(5);
  struct Shape {
    int64_t rows, C, offset;
  };
  // GPT-2's width with more rows than row groups; an odd width; misaligned rows; one row.
  for (const Shape sh : {Shape{700, 3072, 0}, Shape{37, 37, 0}, Shape{64, 3072, 1}, Shape{1, 8, 0}})
    for (const auto dtype : {torch::kFloat, torch::kBFloat16})
      for (const bool tanh_form : {true, false}) {
        SCOPED_TRACE(::testing::Message()
                     << sh.rows << "x" << sh.C << " +" << sh.offset << " " << dtype << (tanh_form ? " tanh" : " erf"));
        const at::Tensor u0 = gpu_rows(sh.rows, sh.C, dtype, sh.offset, 2.0);
        const at::Tensor dy = gpu_rows(sh.rows, sh.C, dtype, sh.offset, 1.0);
        const at::Tensor b0 = torch::randn({sh.C}, torch::TensorOptions().device(torch::kCUDA)) * 0.5;
        auto run = [&](bool kernels) {
          at::Tensor u = u0.detach().clone().requires_grad_(), b = b0.detach().clone().requires_grad_();
          if (sh.offset) u = u0.detach().requires_grad_();  // keep the misaligned view
          const at::Tensor y = bias_gelu(u, b, tanh_form, kernels);
          y.backward(dy);
          return std::vector<at::Tensor>{y.detach(), u.grad(), b.grad()};
        };
        const auto got = run(true), want = run(false), again = run(true);
        const double tol = dtype == torch::kFloat ? 1e-5 : 8e-3;
        for (int i = 0; i < 2; ++i)
          EXPECT_TRUE(torch::allclose(got[i].to(torch::kFloat), want[i].to(torch::kFloat), tol, tol)) << i;
        // The bias gradient against the double-precision sum of the float derivatives.
        const at::Tensor x = u0.to(torch::kDouble) + b0.to(torch::kDouble);
        const at::Tensor db = at::gelu_backward(dy.to(torch::kDouble), x, tanh_form ? "tanh" : "none").sum(0);
        ASSERT_EQ(got[2].scalar_type(), torch::kFloat);
        EXPECT_TRUE(torch::allclose(got[2].to(torch::kDouble), db, 1e-4, 1e-4 * std::sqrt(sh.rows)));
        EXPECT_TRUE(torch::equal(got[2], again[2])) << "the bias gradient's bits changed between runs";
        EXPECT_TRUE(torch::equal(got[1], again[1]));
      }
}

TEST(CudaStep, FusedAdamWOnTheGpuMatchesTheCpuUpdate) {
  FRUGAL_REQUIRE_GPU();
  torch::manual_seed(0);
  auto p = torch::randn({4099}), g = torch::randn({4099}), m = torch::zeros({4099}), v = torch::zeros({4099});
  auto pc = p.cuda(), gc = g.cuda(), mc = m.cuda(), vc = v.cuda();
  AdamWHyper h;
  h.lr = 1e-3;
  for (int64_t step = 1; step <= 5; ++step) {
    adamw_update(p, g, m, v, torch::empty_like(p), h, 0.1, step);
    adamw_update(pc, gc, mc, vc, torch::empty_like(pc), h, 0.1, step);
  }
  EXPECT_TRUE(torch::allclose(pc.cpu(), p, 1e-6, 1e-6));
  // ATen's CUDA kernel forms the second moment as fma(b2, v, fma(-b2, g*g, g*g)) with b2 rounded
  // to float: its (1 - b2) is 1 - 0.999f, 1.3e-5 away (relative) from the CPU's float(1 - 0.999).
  // Both moments must still agree to well within that; a wrong update (a missing bias
  // correction, decay on the moments, scaled gradients) is off by far more.
  EXPECT_TRUE(torch::allclose(mc.cpu(), m, 1e-5, 1e-9));
  EXPECT_TRUE(torch::allclose(vc.cpu(), v, 5e-5, 1e-12));
}

// dist.offload = "optimizer" on a GPU: the parameters and gradients copied to pinned host buffers
// chunk by chunk (two whole chunks and a tail here), each chunk updated by the CPU pass as soon as it
// has arrived and copied back: the bits of the same CPU pass over host tensors.
TEST(CudaStep, AnOffloadedAdamWOnTheGpuGivesTheCpuPassesBitsChunkByChunk) {
  FRUGAL_REQUIRE_GPU();
  torch::manual_seed(8);
  std::vector<at::Tensor> cpu = {torch::randn({(int64_t{1} << 23) + 1000003}).requires_grad_(),
                                 torch::randn({7, 5}).requires_grad_()};
  std::vector<at::Tensor> gpu;
  for (const auto& t : cpu) gpu.push_back(t.detach().cuda().requires_grad_());
  const AdamWHyper h{1e-3, 0.9, 0.95, 1e-8};
  FusedAdamW on_host({{cpu, 0.1}}, h), offloaded({{gpu, 0.1}}, h, /*offload=*/true);
  EXPECT_FALSE(offloaded.device_scalars().on());
  EXPECT_EQ(offloaded.host_state_bytes(), offloaded.state_bytes());
  const at::Tensor scale = torch::full({}, 0.75);
  for (int step = 0; step < 3; ++step) {
    for (size_t i = 0; i < cpu.size(); ++i) {
      const at::Tensor g = torch::randn(cpu[i].sizes()) * 3;
      cpu[i].mutable_grad().copy_(g);
      gpu[i].mutable_grad().copy_(g);
    }
    on_host.step(scale);
    offloaded.step(scale.cuda());
    for (size_t i = 0; i < cpu.size(); ++i)
      ASSERT_TRUE(torch::equal(gpu[i].detach().cpu(), cpu[i].detach())) << "parameter " << i << " step " << step;
  }
  const auto want = on_host.state_tensors(), got = offloaded.state_tensors();
  for (size_t i = 0; i < want.size(); ++i) EXPECT_TRUE(torch::equal(got[i].second, want[i].second)) << want[i].first;
}

// dist.zero = 3 with dist.offload on a GPU (one NCCL rank): the fp32 master shard in pinned host
// memory, the GPU's shard bf16 (two whole 4M-element chunks and a tail, each cast on the host and
// copied back while the next is updated). The master is the CPU pass's bits; the bf16 copy the
// model reads under autocast is that master rounded on the host; a gather_parameters() sends the
// master from the host; the GPU holds 2 bytes a parameter.
TEST(CudaStep, AnOffloadedZero3ShardKeepsItsMasterOnTheHostAndBf16OnTheGpu) {
  FRUGAL_REQUIRE_GPU();
  if (!device::build_info().nccl_compiled) GTEST_SKIP() << "this build has no NCCL process group";
  DistConfig dc;
  dc.backend = DistBackend::kNccl;
  dist::DistEnv env;
  env.master_port = 29704;
  auto pg = dist::connect(env, dc, c10::Device(c10::kCUDA, 0));
  torch::manual_seed(9);
  const int64_t n = (int64_t{1} << 23) + 1000003;
  at::Tensor cpu = torch::randn({n}).requires_grad_();
  at::Tensor gpu = cpu.detach().cuda().requires_grad_();
  const AdamWHyper h{1e-3, 0.9, 0.95, 1e-8};
  FusedAdamW on_host({{{cpu}, 0.1}}, h);
  dist::ZeroAdamW offloaded({{{gpu}, 0.1}}, h, pg, false, /*offload=*/true,
                            {dist::GroupPlace{0, -1, {}, at::kBFloat16}});
  EXPECT_EQ(offloaded.parameter_bytes(), 2 * n) << "the GPU's shard is not bf16";
  EXPECT_EQ(offloaded.host_state_bytes(), 3 * 4 * n) << "the moments and the master";
  for (int step = 0; step < 3; ++step) {
    const at::Tensor g = torch::randn({n});
    cpu.mutable_grad().copy_(g);
    on_host.step();
    offloaded.zero_grad();
    offloaded.accumulate_shard(0, 0, g.cuda());
    offloaded.step();
  }
  {
    compat::AutocastGuard bf16(c10::DeviceType::CUDA, at::kBFloat16, true);
    offloaded.gather_unit(0);
    ASSERT_TRUE(torch::equal(working_weight(gpu).cpu(), cpu.detach().to(at::kBFloat16)));
    offloaded.release_unit(0);
  }
  offloaded.gather_parameters();
  EXPECT_TRUE(torch::equal(gpu.detach().cpu(), cpu.detach())) << "the fp32 master is not the CPU pass's";
  offloaded.release_parameters(/*keep_writes=*/false);
}

TEST(CudaStep, FusedAdamWKeepsItsRateAndCountOnTheGpu) {
  // On a GPU the rate and the step count live in device tensors that ATen's fused kernel reads,
  // and the clip coefficient goes into the kernel: the same updates as the CPU's host scalars.
  FRUGAL_REQUIRE_GPU();
  torch::manual_seed(1);
  std::vector<torch::Tensor> cpu, gpu;
  for (auto shape : std::vector<std::vector<int64_t>>{{64, 33}, {33}}) {
    torch::Tensor t = torch::randn(shape);
    cpu.push_back(t.clone().requires_grad_());
    gpu.push_back(t.cuda().requires_grad_());
  }
  const AdamWHyper h{1e-2, 0.9, 0.95, 1e-8};
  FusedAdamW a({{cpu, 0.1}}, h), b({{gpu, 0.1}}, h);
  ASSERT_TRUE(b.device_scalars().on());
  EXPECT_TRUE(b.device_scalars().lr.is_cuda());
  for (int step = 0; step < 6; ++step) {
    const double lr = 1e-3 * (step + 1);
    a.set_lr(lr);
    b.set_lr(lr);
    for (size_t i = 0; i < cpu.size(); ++i) {
      const torch::Tensor g = torch::randn(cpu[i].sizes()) * 4;
      cpu[i].mutable_grad().copy_(g);
      gpu[i].mutable_grad().copy_(g);
    }
    a.step(clip_coefficient(global_grad_norm(a.flat_grads()), 2.0));
    b.step(clip_coefficient(global_grad_norm(b.flat_grads()), 2.0));
    for (size_t i = 0; i < cpu.size(); ++i)
      ASSERT_TRUE(torch::allclose(gpu[i].cpu(), cpu[i], 0, 2e-6)) << "param " << i << " step " << step;
  }
  EXPECT_EQ(b.device_scalars().step.item<float>(), 6.0f);
}

TEST(CudaStep, AStepReplayedAsACudaGraphTrainsTheEagerStepsWeightsBitwise) {
  FRUGAL_REQUIRE_GPU();
  test::TempDir a, b;
  // 30 steps with evaluations at 15 and 30 between the replays; deterministic kernels. Without the
  // gradient-noise probe, whose log steps (accumulation 2) run eagerly, every step after the
  // capture is a replay.
  const std::vector<std::string> x = {"run.deterministic=true", "precision.mode=bf16", "data.micro_batch=4",
                                      "train.global_batch=8", "monitor.grad_noise=false"};
  std::vector<std::string> g = x;
  g.push_back("train.cuda_graphs=true");
  const auto eager = test::train_on_gpu(a.path(), x);
  const auto graphed = test::train_on_gpu(b.path(), g);
  EXPECT_EQ(eager["cuda_graph_steps"], 0);
  EXPECT_EQ(graphed["cuda_graph_steps"], 30 - TrainStep::kEagerStepsBeforeCapture);
  EXPECT_EQ(graphed["optimizer_steps"], 30);
  EXPECT_EQ(test::step_losses(a.path() + "/demo/metrics.jsonl"), test::step_losses(b.path() + "/demo/metrics.jsonl"));
  EXPECT_EQ(test::read_text(a.path() + "/demo/final/model.safetensors"),
            test::read_text(b.path() + "/demo/final/model.safetensors"))
      << "final weights differ";
}

// fp16 with dynamic loss scaling: the replayed step reads the scale from device memory and skips
// an overflowing step on the device. The scale starts where the fp16 gradients overflow and grows
// after every second finite step, so steps are skipped throughout, graphed and eager alike.
TEST(CudaStep, AnFp16StepReplayedAsACudaGraphSkipsWhatTheEagerStepSkipsBitwise) {
  FRUGAL_REQUIRE_GPU();
  test::TempDir a, b;
  // As above, no gradient-noise probe: every step after the capture is a replay.
  const std::vector<std::string> x = {"run.deterministic=true",      "precision.mode=fp16", "precision.init_scale=1e9",
                                      "precision.growth_interval=2", "data.micro_batch=4",  "train.global_batch=8",
                                      "monitor.grad_noise=false"};
  std::vector<std::string> g = x;
  g.push_back("train.cuda_graphs=true");
  const auto eager = test::train_on_gpu(a.path(), x);
  const auto graphed = test::train_on_gpu(b.path(), g);
  EXPECT_EQ(graphed["cuda_graph_steps"], 30 - TrainStep::kEagerStepsBeforeCapture);
  EXPECT_GE(eager["skipped_steps"].get<int64_t>(), 6);  // the first four, then about one in three
  EXPECT_EQ(graphed["skipped_steps"], eager["skipped_steps"]);
  EXPECT_EQ(graphed["optimizer_steps"], eager["optimizer_steps"]);
  EXPECT_EQ(test::step_losses(a.path() + "/demo/metrics.jsonl"), test::step_losses(b.path() + "/demo/metrics.jsonl"));
  EXPECT_EQ(test::read_text(a.path() + "/demo/final/model.safetensors"),
            test::read_text(b.path() + "/demo/final/model.safetensors"))
      << "final weights differ";
}

// A run with `sets` stopped at step 14 (checkpoints every 7) and resumed ends with the weights of
// the same run uninterrupted, bitwise; returns the uninterrupted run's summary.
nlohmann::json expect_resume_matches_uninterrupted(std::vector<std::string> sets) {
  sets.insert(sets.end(), {"checkpoint.every_steps=7", "checkpoint.keep_last=5"});
  test::TempDir a, b;
  nlohmann::json whole = test::train_on_gpu(a.path(), sets);
  TrainerOptions o;
  o.handle_signals = true;
  o.callbacks = {std::make_shared<test::SignalAt>(14)};
  EXPECT_EQ(test::train_on_gpu(b.path(), sets, o)["stop_kind"], "preempted");
  TrainerOptions r;
  r.resume = "auto";
  r.overwrite = false;
  EXPECT_EQ(test::train_on_gpu(b.path(), sets, r)["stop_kind"], "completed");
  EXPECT_EQ(test::read_text(a.path() + "/demo/final/model.safetensors"),
            test::read_text(b.path() + "/demo/final/model.safetensors"))
      << "final weights differ";
  return whole;
}

TEST(CudaStep, AGraphedRunStoppedAndResumedMatchesTheUninterruptedOneBitwise) {
  FRUGAL_REQUIRE_GPU();
  expect_resume_matches_uninterrupted({"run.deterministic=true", "precision.mode=bf16", "train.cuda_graphs=true"});
}

// model.kernels = "frugal" in bf16 reads the bf16 working weights (model/working_weights.h): the
// graph's AdamW rewrites them, a resume restores the fp32 weights under them.
TEST(CudaStep, ARunOnBf16WorkingWeightsStoppedAndResumedMatchesTheUninterruptedOneBitwise) {
  FRUGAL_REQUIRE_GPU();
  if (const std::string why = cuda_kernels_unavailable(torch::Device(torch::kCUDA, 0)); !why.empty())
    GTEST_SKIP() << why;
  const nlohmann::json whole = expect_resume_matches_uninterrupted(
      {"run.deterministic=true", "precision.mode=bf16", "model.kernels=frugal", "train.cuda_graphs=true"});
  const auto& bytes = whole["state_bytes_per_rank"];
  EXPECT_EQ(bytes["working_weights"].get<int64_t>() * 2, bytes["parameters"].get<int64_t>());
}

TEST(CudaStep, AStepThatWaitsForTheGpuIsNotCapturedAndTheRunStopsWithTheReason) {
  FRUGAL_REQUIRE_GPU();
  test::TempDir d;
  auto sets = test::tiny_overrides(d.path());
  sets.insert(sets.end(), {"run.device=cuda", "precision.mode=bf16", "train.cuda_graphs=true"});
  const Config c = resolve_config("", sets, {}).config;
  torch::manual_seed(5);
  Gpt model(c.model);
  model->to(torch::kCUDA);
  auto data = make_batch_source(c, 0, 1);
  // A loss that reads its value on the host: not permitted while a stream is captured.
  LossFn loss = [m = model.get()](torch::nn::Module&, const Batch& b) {
    at::Tensor l = m->loss(b.x, b.y);
    EXPECT_TRUE(std::isfinite(l.item<double>()));
    return l;
  };
  TrainStep step(c, model.ptr(), loss, *data, torch::Device(torch::kCUDA, 0), c.model.block);
  for (int64_t i = 0; i < TrainStep::kEagerStepsBeforeCapture; ++i)
    EXPECT_TRUE(std::isfinite(step.run(i, 1e-3).loss.item<double>()));
  try {
    step.run(TrainStep::kEagerStepsBeforeCapture, 1e-3);
    ADD_FAILURE() << "a step that reads the loss on the host was captured";
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("could not be captured as a CUDA graph"), std::string::npos) << what;
    EXPECT_NE(what.find("set train.cuda_graphs = false"), std::string::npos) << what;
  }
  EXPECT_FALSE(step.graph_captured());
  EXPECT_EQ(step.graphed_steps(), 0);
}

}  // namespace
}  // namespace frugal::cuda_step_test
