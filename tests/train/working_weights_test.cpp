// bf16 working weights (model/working_weights.h): the copy is autocast's cast and its gradient
// reaches the fp32 master as the cast's does; the copies stay fresh after every kind of write; a
// training step reading them casts no weight and trains bitwise what autocast's casts train.
#include "frugal/model/working_weights.h"

#include <ATen/record_function.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <memory>
#include <unordered_set>

#include "frugal/core/compat.h"
#include "frugal/data/batch_source.h"
#include "frugal/model/fp8.h"
#include "frugal/model/gpt.h"
#include "frugal/model/model_family.h"
#include "frugal/train/fused_adamw.h"
#include "frugal/train/run_setup.h"
#include "frugal/train/task.h"
#include "frugal/train/train_step.h"
#include "test_util.h"

namespace frugal::working_weights_test {
namespace {

struct Bf16Autocast {
  compat::AutocastGuard guard{c10::DeviceType::CPU, at::kBFloat16, true};
};

// Parameters living in one flat fp32 buffer, as FusedAdamW lays them out (each re-homed by
// set_data, with a zero .grad of its own).
struct Flat {
  at::Tensor flat;
  std::vector<at::Tensor> params;
};

Flat make_flat(const std::vector<std::vector<int64_t>>& shapes, uint64_t seed) {
  torch::manual_seed(seed);
  int64_t total = 0;
  for (const auto& s : shapes) total += c10::multiply_integers(s);
  Flat f;
  f.flat = torch::randn({total});
  int64_t off = 0;
  c10::NoGradGuard no_grad;
  for (const auto& s : shapes) {
    at::Tensor p = torch::empty(s).requires_grad_();
    const int64_t n = c10::multiply_integers(s);
    p.set_data(f.flat.narrow(0, off, n).view(s));
    p.mutable_grad() = torch::zeros(s);
    f.params.push_back(p);
    off += n;
  }
  return f;
}

at::Tensor leaf_like(const at::Tensor& p) {
  at::Tensor t = p.detach().clone().requires_grad_();
  t.mutable_grad() = torch::zeros_like(t);
  return t;
}

TEST(WorkingWeights, TheCopyIsAutocastsCastAndItsGradientReachesTheMasterBitwise) {
  for (const bool add : {false, true}) {
    Flat f = make_flat({{8, 16}, {8}}, 3);
    const at::Tensor w_ref = leaf_like(f.params[0]), b_ref = leaf_like(f.params[1]);
    WorkingWeights working(at::kBFloat16, add);
    working.add(f.flat, f.params);
    const at::Tensor x = torch::randn({5, 16});
    for (int k = 1; k <= 2; ++k) {  // two backward passes: the second accumulates onto the first
      at::Tensor loss, loss_ref;
      {
        Bf16Autocast autocast;
        const at::Tensor w = working_weight(f.params[0]);
        ASSERT_EQ(w.scalar_type(), at::kBFloat16);
        EXPECT_TRUE(torch::equal(w.detach(), f.params[0].detach().to(at::kBFloat16)));
        loss = at::linear(x * k, w, working_weight(f.params[1])).to(at::kFloat).square().sum();
        loss_ref = at::linear(x * k, w_ref, b_ref).to(at::kFloat).square().sum();
      }
      EXPECT_EQ(loss.item<float>(), loss_ref.item<float>());
      loss.backward();
      loss_ref.backward();
    }
    EXPECT_GT(w_ref.grad().abs().sum().item<float>(), 0.0f);
    EXPECT_TRUE(torch::equal(f.params[0].grad(), w_ref.grad())) << "add_into_grads " << add;
    EXPECT_TRUE(torch::equal(f.params[1].grad(), b_ref.grad())) << "add_into_grads " << add;
  }
}

TEST(WorkingWeights, AreReadOnlyUnderAutocastInTheirDtypeWithoutFp8AndWhileRegistered) {
  Flat f = make_flat({{4, 4}}, 4);
  const at::Tensor& p = f.params[0];
  auto working = std::make_unique<WorkingWeights>(at::kBFloat16, false);
  working->add(f.flat, f.params);
  EXPECT_TRUE(working_weight(p).is_same(p));  // no autocast
  {
    Bf16Autocast autocast;
    EXPECT_EQ(working_weight(p).scalar_type(), at::kBFloat16);
    const at::Tensor other = torch::randn({4, 4});
    EXPECT_TRUE(working_weight(other).is_same(other));  // not registered
    {
      fp8::Scope fp8_linears(true);  // fp8 casts from the fp32 master
      EXPECT_TRUE(working_weight(p).is_same(p));
    }
    working.reset();
    EXPECT_TRUE(working_weight(p).is_same(p));  // unregistered with its owner
    working = std::make_unique<WorkingWeights>(at::kHalf, false);
    working->add(f.flat, f.params);
    EXPECT_TRUE(working_weight(p).is_same(p));  // fp16 copies under bf16 autocast
  }
  {
    compat::AutocastGuard fp16(c10::DeviceType::CPU, at::kHalf, true);
    EXPECT_EQ(working_weight(p).scalar_type(), at::kHalf);
  }
}

void expect_fresh(const Flat& f, const char* after) {
  Bf16Autocast autocast;
  c10::NoGradGuard no_grad;
  for (size_t i = 0; i < f.params.size(); ++i)
    EXPECT_TRUE(torch::equal(working_weight(f.params[i]), f.params[i].to(at::kBFloat16)))
        << "parameter " << i << " after " << after;
}

TEST(WorkingWeights, StayFreshAfterAnyWriteToTheParametersOrTheirBuffer) {
  Flat f = make_flat({{6, 4}, {4}, {3, 3}}, 5);
  WorkingWeights working(at::kBFloat16, false);
  working.add(f.flat, f.params);
  expect_fresh(f, "add");
  c10::NoGradGuard no_grad;
  f.flat.add_(1.0);  // the optimizer's in-place update of the buffer
  expect_fresh(f, "a write to the buffer");
  f.params[1].copy_(torch::full({4}, 3.25));  // a restore into one parameter (its own version)
  expect_fresh(f, "a write to one parameter");
  f.flat.data_ptr<float>()[0] = 42.0f;  // through a raw pointer: no version moves
  working.refresh();
  expect_fresh(f, "a raw write and refresh()");
}

// A restore writes each parameter through its own version counter (a resume), and the forward then
// refreshes each copy at its lookup: a write into the shared copy buffer for one parameter must not
// invalidate the copy already handed out for another in the same product (the weight's, when the
// bias is refreshed after it), and the step trains as autocast's casts train.
TEST(WorkingWeights, AForwardAfterARestoreOfSomeOrAllParametersTrainsAsTheCastsDo) {
  for (const bool add : {false, true})
    for (const bool all : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "add_into_grads " << add << ", restored " << (all ? "all" : "the bias"));
      Flat f = make_flat({{8, 16}, {8}}, 9);
      WorkingWeights working(at::kBFloat16, add);
      working.add(f.flat, f.params);
      {
        c10::NoGradGuard no_grad;
        if (all) f.params[0].copy_(torch::randn({8, 16}));
        f.params[1].copy_(torch::randn({8}));
      }
      const at::Tensor w_ref = leaf_like(f.params[0]), b_ref = leaf_like(f.params[1]);
      const at::Tensor x = torch::randn({5, 16});
      at::Tensor loss, loss_ref;
      {
        Bf16Autocast autocast;
        loss = at::linear(x, working_weight(f.params[0]), working_weight(f.params[1])).to(at::kFloat).square().sum();
        loss_ref = at::linear(x, w_ref, b_ref).to(at::kFloat).square().sum();
      }
      EXPECT_EQ(loss.item<float>(), loss_ref.item<float>());
      loss.backward();
      loss_ref.backward();
      EXPECT_TRUE(torch::equal(f.params[0].grad(), w_ref.grad()));
      EXPECT_TRUE(torch::equal(f.params[1].grad(), b_ref.grad()));
    }
}

TEST(WorkingWeights, FusedAdamWRewritesTheCopiesInEachStepOnEitherPath) {
  for (const bool device_path : {false, true}) {
    test_hooks::adamw_device_scalars_on_cpu(device_path);
    torch::manual_seed(6);
    std::vector<at::Tensor> params = {torch::randn({8, 4}).requires_grad_(), torch::randn({8}).requires_grad_()};
    FusedAdamW opt({{params, 0.1}}, AdamWHyper{1e-2});
    EXPECT_EQ(opt.keep_working_copies(at::kBFloat16, true), 40 * 2);
    for (int s = 0; s < 2; ++s) {
      for (auto& p : params) p.mutable_grad().copy_(torch::randn_like(p));
      const at::Tensor before = params[0].detach().clone();
      device_path ? opt.step_on_device() : opt.step();
      ASSERT_FALSE(torch::equal(before, params[0].detach()));
      Bf16Autocast autocast;
      c10::NoGradGuard no_grad;
      for (const auto& p : params)
        EXPECT_TRUE(torch::equal(working_weight(p), p.to(at::kBFloat16))) << "device path " << device_path;
    }
    test_hooks::adamw_device_scalars_on_cpu(false);
  }
}

// Casts of a parameter to another dtype (aten::_to_copy of a parameter), counted on this thread.
std::unordered_set<const c10::TensorImpl*> watched;
int64_t weight_casts = 0;

std::unique_ptr<at::ObserverContext> count_weight_casts(const at::RecordFunction& fn) {
  if (std::string(fn.name()) != "aten::_to_copy") return nullptr;
  const auto inputs = fn.inputs();
  if (!inputs.empty() && inputs[0].isTensor() && watched.count(inputs[0].toTensor().unsafeGetTensorImpl()))
    ++weight_casts;
  return nullptr;
}

struct Trained {
  std::vector<double> losses;
  std::vector<at::Tensor> weights;
  int64_t working_bytes = 0, params = 0, casts = 0;
};

// Three bf16 steps of two micro-batches on model.kernels = "frugal" (the GPT's kernel path run
// through its ATen bodies on the CPU), with the working weights on or off.
Trained train(ModelConfig::Arch arch, bool working, bool checkpointing) {
  Config c = test::tiny_config();
  c.model = test::tiny_model(arch);
  c.model.vocab = 256;  // the built-in arithmetic data's bytes
  c.model.kernels = ModelConfig::Kernels::kFrugal;
  c.precision.mode = PrecisionMode::kBf16;
  c.data.micro_batch = 4;
  c.train.global_batch = 8;
  if (checkpointing) c.memory.activation_checkpointing.mode = ActivationCheckpointing::Mode::kBlocks;
  test_hooks::run_kernel_path_on_cpu(true);
  torch::manual_seed(5);
  CausalLm model = make_causal_lm(c.model);
  install_activation_checkpointing(model, c.memory.activation_checkpointing);
  TaskHooks hooks;
  hooks.tokens_per_sample = c.model.block;
  RunSetup setup = set_up_run(c, hooks, 1, PrecisionPolicy(c.precision.mode, torch::kCPU));
  EXPECT_TRUE(setup.working_weights);
  setup.working_weights = working;
  const std::unique_ptr<BatchSource> data = make_batch_source(c);
  TrainStep step(
      setup, c.train, c.precision, model.ptr(),
      [m = model.get()](torch::nn::Module&, const Batch& b) { return m->loss(b.x, b.y, b.pos); }, *data, torch::kCPU,
      nullptr);
  Trained out;
  watched.clear();
  for (const auto& p : model->parameters()) {
    watched.insert(p.unsafeGetTensorImpl());
    out.params += p.numel();
  }
  weight_casts = 0;
  const auto handle = at::addThreadLocalCallback(at::RecordFunctionCallback(count_weight_casts).needsInputs(true));
  for (int64_t i = 0; i < 3; ++i) out.losses.push_back(step.run(i, c.train.lr).loss.item<double>());
  at::removeCallback(handle);
  test_hooks::run_kernel_path_on_cpu(false);
  out.casts = weight_casts;
  for (const auto& p : model->parameters()) out.weights.push_back(p.detach().clone());
  out.working_bytes = step.working_weight_bytes();
  return out;
}

TEST(WorkingWeights, AStepReadingThemCastsNoWeightAndTrainsBitwiseWhatAutocastsCastsTrain) {
  for (const auto arch : {ModelConfig::Arch::kGpt, ModelConfig::Arch::kLlama})
    for (const bool checkpointing : {false, true}) {
      const std::string what = std::string(arch == ModelConfig::Arch::kGpt ? "gpt" : "llama") +
                               (checkpointing ? " with activation checkpointing" : "");
      const Trained cast = train(arch, false, checkpointing);
      const Trained working = train(arch, true, checkpointing);
      EXPECT_EQ(cast.working_bytes, 0) << what;
      EXPECT_EQ(working.working_bytes, 2 * working.params) << what;
      EXPECT_GT(cast.casts, 0) << what;  // autocast casts the weights in every forward
      EXPECT_EQ(working.casts, 0) << what;
      EXPECT_EQ(cast.losses, working.losses) << what;
      ASSERT_EQ(cast.weights.size(), working.weights.size());
      for (size_t i = 0; i < cast.weights.size(); ++i)
        EXPECT_TRUE(torch::equal(cast.weights[i], working.weights[i])) << what << ", parameter " << i;
    }
}

TEST(WorkingWeights, AreKeptOnlyForTheUnshardedFusedAdamWInBf16OnFrugalsKernels) {
  Config c = test::tiny_config();
  c.model.kernels = ModelConfig::Kernels::kFrugal;
  const auto wanted = [](const Config& k, PrecisionMode mode) {
    return set_up_run(k, TaskHooks{}, 1, PrecisionPolicy(mode, torch::kCPU)).working_weights;
  };
  EXPECT_TRUE(wanted(c, PrecisionMode::kBf16));
  EXPECT_FALSE(wanted(c, PrecisionMode::kFp32));
  EXPECT_FALSE(wanted(c, PrecisionMode::kFp8));  // fp8 casts from the fp32 master
  Config aten = c;
  aten.model.kernels = ModelConfig::Kernels::kAten;
  EXPECT_FALSE(wanted(aten, PrecisionMode::kBf16));
  Config muon = c;
  muon.train.optimizer = OptimizerKind::kMuon;
  EXPECT_FALSE(wanted(muon, PrecisionMode::kBf16));
  Config zero = c;
  zero.dist.zero = ZeroStage::kOptimizerState;
  EXPECT_FALSE(wanted(zero, PrecisionMode::kBf16));
}

}  // namespace
}  // namespace frugal::working_weights_test
