// The step's maths: accumulation equals the large batch (precision and activation checkpointing
// have their own files: precision_test.cpp, model/activation_checkpointing_test.cpp); the step as
// a CUDA graph (train.cuda_graphs), emulated on the CPU, trains what the eager step trains.
#include "frugal/train/train_step.h"

#include "frugal/model/gpt.h"

#include <gtest/gtest.h>

#include <cmath>

#include <fstream>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "frugal/core/cuda_graph.h"
#include "frugal/core/device.h"
#include "frugal/core/errors.h"
#include "frugal/data/packing.h"
#include "frugal/train/fused_adamw.h"
#include "frugal/train/trainer.h"
#include "test_util.h"

namespace frugal::train_step_test {
namespace {

// Micro-batch i of size B is rows [i*B, (i+1)*B) of a fixed table, so 4 x 4 and 1 x 16 see the
// same sequences in each optimizer step.
class TableSource : public BatchSource {
 public:
  TableSource(int64_t micro, int64_t block) : micro_(micro) {
    torch::manual_seed(11);
    table_ = torch::randint(0, 256, {4096, block + 1}, torch::kLong);
  }
  Batch train_batch(int64_t i) override {
    auto rows = table_.narrow(0, i * micro_, micro_);
    return {rows.narrow(1, 0, rows.size(1) - 1).contiguous(), rows.narrow(1, 1, rows.size(1) - 1).contiguous()};
  }
  Batch val_batch(int64_t i) override { return train_batch(i); }
  std::string describe() const override { return "table"; }
  int64_t train_tokens() const override { return table_.numel(); }
  int64_t val_tokens() const override { return table_.numel(); }

 private:
  int64_t micro_;
  at::Tensor table_;
};

// The same table with ragged targets: row r keeps its first 1 + (7 r mod block) targets (the rest
// kIgnoreIndex), so micro-batches hold very different numbers of targets.
class RaggedSource : public TableSource {
 public:
  RaggedSource(int64_t micro, int64_t block, bool weighted)
      : TableSource(micro, block), rows_(micro), weighted_(weighted) {}
  Batch train_batch(int64_t i) override {
    Batch b = TableSource::train_batch(i);
    const int64_t T = b.y.size(1);
    for (int64_t r = 0; r < b.y.size(0); ++r) {
      const int64_t keep = 1 + (7 * (i * rows_ + r)) % T;
      b.y[r].narrow(0, keep, T - keep).fill_(kIgnoreIndex);
    }
    return b;
  }
  bool ragged_targets() const override { return weighted_; }

 private:
  int64_t rows_;
  bool weighted_;
};

struct Trained {
  std::vector<at::Tensor> weights, grads;  // after the last step; grads as the optimizer saw them
};

Trained train_tiny(Config c, int64_t steps, std::unique_ptr<BatchSource> source = nullptr) {
  torch::manual_seed(5);
  Gpt model(c.model);
  std::unique_ptr<BatchSource> table = std::make_unique<TableSource>(c.data.micro_batch, c.model.block);
  BatchSource& data = source ? *source : *table;
  TrainStep step(c, as_causal_lm(model), data, torch::kCPU);
  for (int64_t i = 0; i < steps; ++i) step.run(i, c.train.lr);
  Trained t;
  for (auto& p : model->parameters()) t.weights.push_back(p.detach().clone());
  for (const auto& g : step.optimizer().grads()) t.grads.push_back(g.detach().clone());
  return t;
}

// Gradients are compared, not weights: AdamW is nearly blind to a gradient's scale, so weights
// would agree even with a missing or wrong division by accum. Compared at the first step (same
// weights) and the third (after two updates, so the weights agree as well).
TEST(TrainStep, AccumulatingFourMicroBatchesOfFourGivesTheGradientOfOneBatchOfSixteen) {
  Config a = test::tiny_config(), b = test::tiny_config();
  a.data.micro_batch = 4;
  a.train.global_batch = 16;
  b.data.micro_batch = 16;
  ASSERT_EQ(accumulation_steps(a), 4);
  ASSERT_EQ(accumulation_steps(b), 1);
  a.train.grad_clip = b.train.grad_clip = 0;  // clipping would rescale a wrong gradient to the same norm
  for (int64_t steps : {1, 3}) {
    auto ga = train_tiny(a, steps).grads, gb = train_tiny(b, steps).grads;
    ASSERT_EQ(ga.size(), gb.size());
    double norm_a = 0, norm_b = 0;
    for (size_t i = 0; i < ga.size(); ++i) {
      norm_a += ga[i].pow(2).sum().item<double>();
      norm_b += gb[i].pow(2).sum().item<double>();
      // The two sum the same per-sequence gradients in another order (fp32 re-association).
      EXPECT_TRUE(torch::allclose(ga[i], gb[i], /*rtol=*/1e-3, /*atol=*/1e-6))
          << "step " << steps << " tensor " << i << " max diff " << (ga[i] - gb[i]).abs().max().item<double>();
    }
    EXPECT_GT(norm_b, 0);
    EXPECT_NEAR(std::sqrt(norm_a / norm_b), 1.0, 1e-4) << "step " << steps;
  }
  // The weights, what users see, agree too.
  auto wa = train_tiny(a, 5).weights, wb = train_tiny(b, 5).weights;
  for (size_t i = 0; i < wa.size(); ++i) EXPECT_TRUE(torch::allclose(wa[i], wb[i], /*rtol=*/1e-4, /*atol=*/1e-4)) << i;
}

// Token-weighted loss (data/batch_source.h, ragged_targets): with micro-batches of very different
// target counts, the step's gradient is the mean over all its targets, so 4 x 4 accumulated equals
// one batch of 16; a mean of the four micro-batches' means (the unweighted step) does not.
TEST(TrainStep, RaggedTargetsAccumulatedGiveTheGradientOfOneBatchOverAllTargets) {
  Config a = test::tiny_config(), b = test::tiny_config();
  a.data.micro_batch = 4;
  a.train.global_batch = 16;
  b.data.micro_batch = 16;
  a.train.grad_clip = b.train.grad_clip = 0;
  const auto run = [](const Config& c, bool weighted) {
    return train_tiny(c, 1, std::make_unique<RaggedSource>(c.data.micro_batch, c.model.block, weighted)).grads;
  };
  const auto ga = run(a, true), gb = run(b, true), unweighted = run(a, false);
  double worst = 0, unweighted_gap = 0;
  for (size_t i = 0; i < ga.size(); ++i) {
    worst = std::max(worst, (ga[i] - gb[i]).abs().max().item<double>());
    unweighted_gap = std::max(unweighted_gap, (unweighted[i] - gb[i]).abs().max().item<double>());
  }
  EXPECT_LT(worst, 1e-6);
  EXPECT_GT(unweighted_gap, 1e-4) << "the ragged table does not tell a token-weighted step from a mean of means";
}

TEST(TrainStep, GlobalBatchMustBeAMultipleOfMicroBatch) {
  test::TempDir dir;
  try {
    resolve_config("", {"data.micro_batch=6", "train.global_batch=16"}, {});
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("not a multiple of data.micro_batch = 6"), std::string::npos);
  }
}

// Device-time settling, on the CPU through EventTimer's fake clock (event i at i ms): a step that
// does not settle neither waits nor reports device times, and the settled sums count every step's
// device time once, whichever steps settle.
struct FakeEventClock {
  FakeEventClock() { device::EventTimer::fake_clock_for_tests(true); }
  ~FakeEventClock() { device::EventTimer::fake_clock_for_tests(false); }
};

TEST(TrainStep, OnlySettlingStepsWaitForTheDeviceAndEveryStepsDeviceTimeCountsOnce) {
  FakeEventClock fake;
  Config c = test::tiny_config();
  c.data.micro_batch = 4;
  c.train.global_batch = 8;  // two micro-batches: more spans per step
  torch::manual_seed(5);
  Gpt ma(c.model), mb(c.model);
  TableSource da(c.data.micro_batch, c.model.block), db(c.data.micro_batch, c.model.block);
  TrainStep every(c, as_causal_lm(ma), da, torch::kCPU), some(c, as_causal_lm(mb), db, torch::kCPU);
  some.set_settle_each_step(false);
  PhaseTimes all_every, all_some;
  const auto add = [](PhaseTimes& to, const PhaseTimes& p) {
    to.forward_s += p.forward_s;
    to.backward_s += p.backward_s;
    to.optimizer_s += p.optimizer_s;
  };
  for (int64_t i = 0; i < 12; ++i) {
    const bool settles = i == 4 || i == 9;
    some.set_settle_each_step(settles);
    StepResult a = every.run(i, c.train.lr), b = some.run(i, c.train.lr);
    ASSERT_TRUE(a.device_timed && b.device_timed);
    ASSERT_TRUE(a.phases_on_device);
    EXPECT_GT(a.phases.forward_s, 0.0);
    EXPECT_GT(a.phases.backward_s, 0.0);
    EXPECT_GT(a.phases.optimizer_s, 0.0);
    add(all_every, a.phases);
    add(all_some, b.settled);
    EXPECT_EQ(b.phases_on_device, settles) << "step " << i;
    if (settles) {
      // This step's own device times, not the window's.
      EXPECT_DOUBLE_EQ(b.phases.forward_s, a.phases.forward_s) << "step " << i;
      EXPECT_DOUBLE_EQ(b.phases.backward_s, a.phases.backward_s) << "step " << i;
      EXPECT_DOUBLE_EQ(b.phases.optimizer_s, a.phases.optimizer_s) << "step " << i;
    } else {
      EXPECT_EQ(b.settled.forward_s + b.settled.backward_s + b.settled.optimizer_s, 0.0) << "step " << i;
    }
  }
  EXPECT_EQ(every.device_waits(), 12);
  EXPECT_EQ(some.device_waits(), 2);
  add(all_some, some.settle_pending());  // steps 11 and 12
  EXPECT_EQ(some.device_waits(), 3);
  EXPECT_NEAR(all_some.forward_s, all_every.forward_s, 1e-9);
  EXPECT_NEAR(all_some.backward_s, all_every.backward_s, 1e-9);
  EXPECT_NEAR(all_some.optimizer_s, all_every.optimizer_s, 1e-9);
  const PhaseTimes none = some.settle_pending();  // nothing left: no wait, nothing counted
  EXPECT_EQ(none.forward_s + none.backward_s + none.optimizer_s, 0.0);
  EXPECT_EQ(some.device_waits(), 3);
}

TEST(TrainStep, PendingEventsPastTheLimitSettleWithoutBeingAsked) {
  FakeEventClock fake;
  Config c = test::tiny_config();
  torch::manual_seed(5);
  Gpt ma(c.model), mb(c.model);
  TableSource da(c.data.micro_batch, c.model.block), db(c.data.micro_batch, c.model.block);
  TrainStep every(c, as_causal_lm(ma), da, torch::kCPU), capped(c, as_causal_lm(mb), db, torch::kCPU);
  capped.set_settle_each_step(false);
  int64_t settled_steps = 0, steps = 0;
  PhaseTimes want, got;
  while (capped.device_waits() == 0 && steps < 10 * TrainStep::kMaxPendingEvents) {
    want += every.run(steps, c.train.lr).phases;
    StepResult r = capped.run(steps++, c.train.lr);
    settled_steps += r.phases_on_device ? 1 : 0;
    got += r.settled;
  }
  ASSERT_EQ(capped.device_waits(), 1) << "never settled in " << steps << " steps";
  EXPECT_EQ(settled_steps, 1);
  EXPECT_GT(steps, 10);  // a few events per step: many steps before the limit
  // The capped settle holds every step's device time so far.
  EXPECT_NEAR(got.forward_s, want.forward_s, 1e-9);
  EXPECT_NEAR(got.backward_s, want.backward_s, 1e-9);
  EXPECT_NEAR(got.optimizer_s, want.optimizer_s, 1e-9);
}

TEST(TrainStep, AStepThatFailsLeavesNoDeviceTimeBehind) {
  FakeEventClock fake;
  Config c = test::tiny_config();
  torch::manual_seed(5);
  Gpt m(c.model);
  TableSource d(c.data.micro_batch, c.model.block);
  bool fail = false;
  LossFn loss = [g = m.get(), &fail](torch::nn::Module&, const Batch& b) {
    if (fail) throw std::runtime_error("a failing forward");
    return g->loss(b.x, b.y);
  };
  TrainStep step(c, m.ptr(), loss, d, torch::kCPU, c.model.block);  // settles every step
  step.run(0, c.train.lr);
  fail = true;
  EXPECT_THROW(step.run(1, c.train.lr), std::runtime_error);  // after its first laps were recorded
  fail = false;
  const StepResult r = step.run(1, c.train.lr);
  // What this run settled is its own device time only: nothing of the attempt that threw.
  ASSERT_TRUE(r.phases_on_device);
  EXPECT_GT(r.phases.optimizer_s, 0.0);
  EXPECT_DOUBLE_EQ(r.settled.forward_s, r.phases.forward_s);
  EXPECT_DOUBLE_EQ(r.settled.backward_s, r.phases.backward_s);
  EXPECT_DOUBLE_EQ(r.settled.optimizer_s, r.phases.optimizer_s);
}
// train.cuda_graphs on the CPU: device::CudaGraph keeps the captured function and replays it on
// the host, and AdamW takes its GPU path (rate and count in tensors). What this checks is the
// graph's plumbing: each step's data copied into the static buffers, the rate written outside the
// graph, the host's step count, the outputs read after the replay, the eager steps around it.
struct EmulatedGraphs {
  EmulatedGraphs() {
    device::CudaGraph::emulate_for_tests(true);
    test_hooks::adamw_device_scalars_on_cpu(true);
  }
  ~EmulatedGraphs() {
    device::CudaGraph::emulate_for_tests(false);
    test_hooks::adamw_device_scalars_on_cpu(false);
  }
};

// The table, but micro-batch `short_at` has half its rows (a partial batch).
class ShortOnce : public TableSource {
 public:
  ShortOnce(int64_t micro, int64_t block, int64_t short_at) : TableSource(micro, block), short_at_(short_at) {}
  Batch train_batch(int64_t i) override {
    Batch b = TableSource::train_batch(i);
    if (i != short_at_) return b;
    return {b.x.narrow(0, 0, b.x.size(0) / 2).contiguous(), b.y.narrow(0, 0, b.y.size(0) / 2).contiguous()};
  }

 private:
  int64_t short_at_;
};

struct GraphRun {
  std::vector<at::Tensor> weights;
  std::vector<double> losses, norms;
  std::vector<int64_t> skipped;  // the steps the loss scaler skipped
  int64_t graphed = 0, optimizer_steps = 0;
};

// `spiky`: a micro-batch whose first token is below 24 has its loss multiplied by 1e12 (on the
// device, from the batch: a graph captures it), so that its scaled gradients overflow.
GraphRun run_graph_steps(const Config& c, int64_t steps, BatchSource& data, bool spiky = false) {
  torch::manual_seed(5);
  Gpt model(c.model);
  Gpt* m = &model;
  LossFn loss = [m, spiky](torch::nn::Module&, const Batch& b) {
    const at::Tensor l = (*m)->loss(b.x, b.y, b.pos);
    return spiky ? l * (1 + 1e12 * b.x.select(1, 0).select(0, 0).lt(24).to(at::kFloat)) : l;
  };
  TrainStep step(c, model.ptr(), loss, data, torch::kCPU, c.model.block);
  GraphRun out;
  for (int64_t i = 0; i < steps; ++i) {
    const StepResult r = step.run(i, c.train.lr * static_cast<double>(i + 1) / static_cast<double>(steps));
    out.losses.push_back(r.loss.item<double>());
    out.norms.push_back(r.grad_norm.item<double>());
    if (r.skipped) out.skipped.push_back(i);
  }
  for (auto& p : model->parameters()) out.weights.push_back(p.detach().clone());
  out.graphed = step.graphed_steps();
  out.optimizer_steps = step.optimizer().step_count();
  return out;
}

void expect_same_training(const GraphRun& a, const GraphRun& b) {
  EXPECT_EQ(a.losses, b.losses);
  ASSERT_EQ(a.norms.size(), b.norms.size());
  for (size_t i = 0; i < a.norms.size(); ++i)  // an overflowing step's norm may be NaN
    EXPECT_TRUE(a.norms[i] == b.norms[i] || (std::isnan(a.norms[i]) && std::isnan(b.norms[i])))
        << "step " << i << ": " << a.norms[i] << " vs " << b.norms[i];
  EXPECT_EQ(a.skipped, b.skipped);
  ASSERT_EQ(a.weights.size(), b.weights.size());
  for (size_t i = 0; i < a.weights.size(); ++i) EXPECT_TRUE(torch::equal(a.weights[i], b.weights[i])) << i;
}

// `working`: in bf16 on model.kernels = "frugal", so the step reads bf16 working weights
// (model/working_weights.h) that the graph's AdamW rewrites and the eager steps read after it.
Config graph_config(bool graphs, bool working = false) {
  Config c = test::tiny_config();
  if (working) {
    c.precision.mode = PrecisionMode::kBf16;
    c.model.kernels = ModelConfig::Kernels::kFrugal;
  }
  c.data.micro_batch = 4;
  c.train.global_batch = 8;  // two micro-batches a step
  c.train.cuda_graphs = graphs;
  return c;
}

TEST(TrainStep, AStepReplayedAsAGraphTrainsWhatTheEagerStepTrainsBitwise) {
  EmulatedGraphs on;
  TableSource d1(4, 16), d2(4, 16);
  const GraphRun eager = run_graph_steps(graph_config(false), 7, d1);
  const GraphRun graphed = run_graph_steps(graph_config(true), 7, d2);
  EXPECT_EQ(eager.graphed, 0);
  EXPECT_EQ(graphed.graphed, 7 - TrainStep::kEagerStepsBeforeCapture);
  EXPECT_EQ(graphed.optimizer_steps, 7);  // the host counts the replayed steps too
  expect_same_training(eager, graphed);
}

// Dynamic loss scaling inside the graph: the scale read from device memory (written before each
// replay), an overflowing step skipped on the device (weights, moments and the device's count as
// they were), the host's verdict read after the replay. The spiky loss overflows some steps'
// gradients before and after the capture; the scale (1e30) grows after every second finite step.
TEST(TrainStep, ALossScaledStepReplayedAsAGraphSkipsWhatTheEagerStepSkipsBitwise) {
  EmulatedGraphs on;
  auto scaled = [](bool graphs) {
    Config c = graph_config(graphs);
    c.precision.loss_scaling = LossScaling::kDynamic;
    c.precision.init_scale = 1e30;
    c.precision.growth_interval = 2;
    return c;
  };
  constexpr int64_t kSteps = 14;
  TableSource d1(4, 16), d2(4, 16);
  const GraphRun eager = run_graph_steps(scaled(false), kSteps, d1, /*spiky=*/true);
  const GraphRun graphed = run_graph_steps(scaled(true), kSteps, d2, /*spiky=*/true);
  EXPECT_EQ(graphed.graphed, kSteps - TrainStep::kEagerStepsBeforeCapture);
  // Skips among the replayed steps (after the capture step), and steps taken after them.
  ASSERT_FALSE(graphed.skipped.empty());
  EXPECT_GT(graphed.skipped.back(), TrainStep::kEagerStepsBeforeCapture)
      << testing::PrintToString(graphed.skipped) << testing::PrintToString(graphed.norms)
      << testing::PrintToString(graphed.losses);
  EXPECT_LT(graphed.skipped.back(), kSteps - 1);
  EXPECT_EQ(graphed.optimizer_steps, kSteps - static_cast<int64_t>(graphed.skipped.size()));
  expect_same_training(eager, graphed);
  for (const at::Tensor& w : graphed.weights) EXPECT_TRUE(torch::isfinite(w).all().item<bool>());
}

TEST(TrainStep, APartialBatchRunsEagerlyAndTheGraphServesTheStepsAfterIt) {
  EmulatedGraphs on;
  // Micro-batch 8 is the first of step 4 (after the capture); 4 the first of step 2 (the step the
  // capture would take: it waits for the next full one).
  for (const bool working : {false, true})
    for (const int64_t short_at : {8, 4}) {
      SCOPED_TRACE(testing::Message() << "short at " << short_at << (working ? ", bf16 working weights" : ""));
      ShortOnce d1(4, 16, short_at), d2(4, 16, short_at);
      const GraphRun eager = run_graph_steps(graph_config(false, working), 7, d1);
      const GraphRun graphed = run_graph_steps(graph_config(true, working), 7, d2);
      EXPECT_EQ(graphed.graphed, 7 - TrainStep::kEagerStepsBeforeCapture - 1);
      EXPECT_EQ(graphed.optimizer_steps, 7);
      expect_same_training(eager, graphed);
    }
}

TEST(TrainStep, AStepThatProbesEachMicroBatchsGradientRunsEagerly) {
  EmulatedGraphs on;
  TableSource d(4, 16);
  const Config c = graph_config(true);
  torch::manual_seed(5);
  Gpt model(c.model);
  TrainStep step(c, as_causal_lm(model), d, torch::kCPU);
  for (int64_t i = 0; i < 4; ++i) step.run(i, c.train.lr);
  ASSERT_EQ(step.graphed_steps(), 2);
  step.set_grad_noise_probe(true);  // a log step
  const StepResult r = step.run(4, c.train.lr);
  EXPECT_FALSE(r.graphed);
  EXPECT_TRUE(r.micro_grad_sq_sum.defined());
  step.set_grad_noise_probe(false);
  EXPECT_TRUE(step.run(5, c.train.lr).graphed);
  EXPECT_EQ(step.optimizer().step_count(), 6);
}

void expect_refused(const Config& c, int64_t world, const std::string& says) {
  try {
    check_cuda_graphs(c, torch::kCPU, world);
    ADD_FAILURE() << "not refused: " << says;
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("set train.cuda_graphs = false"), std::string::npos) << e.what();
  }
}

TEST(TrainStep, CudaGraphsAreRefusedByNameWhereTheStepCannotBeOneGraph) {
  Config c = graph_config(true);
  expect_refused(c, 1, "run.device is cpu");
  EXPECT_NO_THROW(check_cuda_graphs(graph_config(false), torch::kCPU, 1));
  EmulatedGraphs on;  // the CPU stands in for a GPU from here
  EXPECT_NO_THROW(check_cuda_graphs(c, torch::kCPU, 1));
  expect_refused(c, 2, "data-parallel run (2 processes)");
  Config muon = c;
  muon.train.optimizer = OptimizerKind::kMuon;
  expect_refused(muon, 1, "train.optimizer");
  Config ac = c;
  ac.memory.activation_checkpointing = *parse_activation_checkpointing("blocks");
  expect_refused(ac, 1, "activation checkpointing");
  Config qlora = c;
  qlora.lora.rank = 8;
  qlora.lora.base_dtype = LoraConfig::BaseDtype::kNf4;
  expect_refused(qlora, 1, "QLoRA's nf4 base");
  Config offload = c;
  offload.dist.offload = Offload::kOptimizer;
  expect_refused(offload, 1, "dist.offload");
  qlora.lora.base_dtype = LoraConfig::BaseDtype::kBf16;  // plain LoRA is captured
  EXPECT_NO_THROW(check_cuda_graphs(qlora, torch::kCPU, 1));
  // Data that weighs its micro-batches on the host (chat, prompt-completion) is refused by the step.
  RaggedSource ragged(4, 16, /*weighted=*/true);
  torch::manual_seed(5);
  Gpt model(c.model);
  try {
    TrainStep step(c, as_causal_lm(model), ragged, torch::kCPU);
    ADD_FAILURE() << "ragged targets not refused";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("target counts on the host"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace frugal::train_step_test
