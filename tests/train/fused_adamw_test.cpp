// FusedAdamW against LibTorch's AdamW, step for step.
#include "frugal/train/fused_adamw.h"
#include "frugal/train/grad_clip.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

namespace frugal::fused_adamw_test {
namespace {

struct Pair {
  std::vector<torch::Tensor> ours, ref;
};

Pair make_params() {
  torch::manual_seed(3);
  Pair p;
  for (auto shape : std::vector<std::vector<int64_t>>{{16, 8}, {8}, {3, 5, 7}, {1}}) {
    auto t = torch::randn(shape);
    p.ours.push_back(t.clone().requires_grad_());
    p.ref.push_back(t.clone().requires_grad_());
  }
  return p;
}

TEST(FusedAdamW, MatchesTorchAdamWStepForStep) {
  auto p = make_params();
  // Two groups, as the trainer uses: matrices decayed, vectors not.
  FusedAdamW ours({{{p.ours[0], p.ours[2]}, 0.1}, {{p.ours[1], p.ours[3]}, 0.0}}, AdamWHyper{1e-2, 0.9, 0.95, 1e-8});
  auto opts = [](double wd) {
    return std::make_unique<torch::optim::AdamWOptions>(
        torch::optim::AdamWOptions(1e-2).betas({0.9, 0.95}).eps(1e-8).weight_decay(wd));
  };
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(std::vector<torch::Tensor>{p.ref[0], p.ref[2]}, opts(0.1));
  groups.emplace_back(std::vector<torch::Tensor>{p.ref[1], p.ref[3]}, opts(0.0));
  torch::optim::AdamW ref(groups, *opts(0.1));
  for (int step = 0; step < 20; ++step) {
    const double lr = 1e-2 * (1.0 - step / 40.0);  // a changing LR, as under a schedule
    ours.set_lr(lr);
    for (auto& g : ref.param_groups()) static_cast<torch::optim::AdamWOptions&>(g.options()).lr(lr);
    ours.zero_grad();
    ref.zero_grad();
    torch::manual_seed(100 + step);
    auto gen = [](const torch::Tensor& t) { return torch::randn(t.sizes()); };
    std::vector<torch::Tensor> grads;
    for (auto& t : p.ours) grads.push_back(gen(t));
    for (size_t i = 0; i < grads.size(); ++i) {
      (p.ours[i] * grads[i]).sum().backward();
      (p.ref[i] * grads[i]).sum().backward();
    }
    ours.step();
    ref.step();
    // Within float rounding of LibTorch's op sequence (the fused loop rounds m * b1 + (1 - b1) * g
    // twice where ATen may use one fused multiply-add): 20 steps of lr 1e-2 move each parameter
    // by up to ~0.2, and the two agree to 2e-6.
    for (size_t i = 0; i < p.ours.size(); ++i)
      ASSERT_TRUE(torch::allclose(p.ours[i], p.ref[i], /*rtol=*/0, /*atol=*/2e-6))
          << "param " << i << " step " << step << " max diff " << (p.ours[i] - p.ref[i]).abs().max().item<double>();
  }
  EXPECT_EQ(ours.step_count(), 20);
}

TEST(FusedAdamW, UpdateOfABufferEqualsTheUpdateOfItsSlicesBitwise) {
  // 100003 elements: several threads' chunks, vector lanes and a scalar tail. Updating the whole
  // buffer and updating it as two slices split at an odd offset (as ZeRO-1 ranks do) must agree
  // to the last bit, step after step.
  torch::manual_seed(5);
  const int64_t n = 100003, cut = 33331;
  at::Tensor p = torch::randn({n}), p2 = p.clone(), p0 = p.clone();
  at::Tensor m = torch::zeros({n}), v = torch::zeros({n}), m2 = m.clone(), v2 = v.clone();
  at::Tensor scratch = torch::empty({n});
  const AdamWHyper h{3e-3, 0.9, 0.95, 1e-8};
  for (int64_t step = 1; step <= 5; ++step) {
    at::Tensor g = torch::randn({n});
    adamw_update(p, g, m, v, scratch, h, 0.1, step);
    for (auto [lo, hi] : {std::pair<int64_t, int64_t>{0, cut}, {cut, n}})
      adamw_update(p2.slice(0, lo, hi), g.slice(0, lo, hi), m2.slice(0, lo, hi), v2.slice(0, lo, hi),
                   scratch.slice(0, lo, hi), h, 0.1, step);
    ASSERT_TRUE(torch::equal(p, p2)) << "step " << step;
    ASSERT_TRUE(torch::equal(m, m2) && torch::equal(v, v2)) << "step " << step;
  }
  // And it moved: with random gradients AdamW's first steps move a parameter by up to lr each.
  const double moved = (p - p0).abs().mean().item<double>();
  EXPECT_GT(moved, 1e-3);
  EXPECT_LT(moved, 5 * 3e-3 + 1e-3);
}

TEST(FusedAdamW, AGradScaleInsideTheUpdateEqualsScalingTheGradientsFirstBitwise) {
  // The clip coefficient folded into the update pass must give the bits of clip-then-update
  // (mul_ in place, then the plain update), step after step, and leave the gradients untouched.
  torch::manual_seed(6);
  const int64_t n = 100003;
  at::Tensor p = torch::randn({n}), p2 = p.clone();
  at::Tensor m = torch::zeros({n}), v = torch::zeros({n}), m2 = m.clone(), v2 = v.clone();
  at::Tensor scratch = torch::empty({n});
  const AdamWHyper h{3e-3, 0.9, 0.95, 1e-8};
  for (int64_t step = 1; step <= 4; ++step) {
    at::Tensor g = torch::randn({n}) * 3;
    // As the training step makes it: min(1, max_norm / (norm + 1e-6)), a 0-dim float tensor.
    const at::Tensor coef = clip_coefficient(global_grad_norm({g}), 100.0);
    ASSERT_LT(coef.item<float>(), 1.0f);
    const at::Tensor g_before = g.clone();
    adamw_update(p, g, m, v, scratch, h, 0.1, step, coef);
    EXPECT_TRUE(torch::equal(g, g_before)) << "step " << step;
    at::Tensor g2 = g.clone();
    clip_to_norm({g2}, global_grad_norm({g2}), 100.0);
    adamw_update(p2, g2, m2, v2, scratch, h, 0.1, step);
    ASSERT_TRUE(torch::equal(p, p2)) << "step " << step;
    ASSERT_TRUE(torch::equal(m, m2) && torch::equal(v, v2)) << "step " << step;
  }
}

TEST(FusedAdamW, ScalarsOnTheDeviceGiveTheHostScalarsUpdate) {
  // The GPU's path (rate and step count in device tensors, the clip coefficient inside ATen's
  // fused kernel), run here through ATen's CPU fused kernel, against the host path: a changing
  // rate, clipping, and a resume in the middle that sets the count. A rate written to the host
  // only, a count that does not advance or is not restored, or a coefficient left out each move
  // the parameters by far more than the tolerance (1e-6 against steps of ~1e-2).
  auto host = make_params(), dev = make_params();
  const AdamWHyper h{1e-2, 0.9, 0.95, 1e-8};
  FusedAdamW a({{host.ours, 0.1}}, h);
  test_hooks::adamw_device_scalars_on_cpu(true);
  auto b = std::make_unique<FusedAdamW>(std::vector<FusedAdamW::Group>{{dev.ours, 0.1}}, h);
  test_hooks::adamw_device_scalars_on_cpu(false);
  ASSERT_TRUE(b->device_scalars().on());
  ASSERT_FALSE(a.device_scalars().on());
  for (int step = 0; step < 8; ++step) {
    if (step == 4) {  // a resume: a fresh optimizer from the saved state and count
      std::vector<std::pair<std::string, torch::Tensor>> saved;
      for (auto& [n, t] : b->state_tensors()) saved.emplace_back(n, t.clone());
      const int64_t count = b->step_count();
      std::vector<torch::Tensor> values;
      for (auto& t : dev.ours) values.push_back(t.detach().clone());
      test_hooks::adamw_device_scalars_on_cpu(true);
      b = std::make_unique<FusedAdamW>(std::vector<FusedAdamW::Group>{{dev.ours, 0.1}}, h);
      test_hooks::adamw_device_scalars_on_cpu(false);
      b->load_state(saved, count);
      for (size_t i = 0; i < values.size(); ++i) dev.ours[i].detach().copy_(values[i]);
      ASSERT_EQ(b->device_scalars().step.item<float>(), 4.0f);
    }
    const double lr = step < 2 ? 1e-2 : 1e-3 * (step + 1);
    a.set_lr(lr);
    b->set_lr(lr);
    a.zero_grad();
    b->zero_grad();
    torch::manual_seed(200 + step);
    for (size_t i = 0; i < host.ours.size(); ++i) {
      const torch::Tensor g = torch::randn(host.ours[i].sizes()) * 4;
      host.ours[i].mutable_grad().copy_(g);
      dev.ours[i].mutable_grad().copy_(g);
    }
    const torch::Tensor coef = clip_coefficient(global_grad_norm(a.flat_grads()), 2.0);
    ASSERT_LT(coef.item<float>(), 0.5f);
    a.step(coef);
    b->step(coef);
    for (size_t i = 0; i < host.ours.size(); ++i)
      ASSERT_TRUE(torch::allclose(dev.ours[i], host.ours[i], /*rtol=*/0, /*atol=*/1e-6))
          << "param " << i << " step " << step << " max diff "
          << (dev.ours[i] - host.ours[i]).abs().max().item<double>();
  }
  EXPECT_EQ(b->device_scalars().step.item<float>(), 8.0f);
  EXPECT_FLOAT_EQ(b->device_scalars().lr.item<float>(), 8e-3f);
}

TEST(FusedAdamW, ParametersBecomeViewsOfOneBufferAndKeepTheirValues) {
  auto p = make_params();
  auto before = p.ours[2].detach().clone();
  FusedAdamW opt({{p.ours, 0.0}}, AdamWHyper{});
  EXPECT_TRUE(torch::equal(p.ours[2], before));
  EXPECT_EQ(p.ours[0].data_ptr<float>() + 16 * 8, p.ours[1].data_ptr<float>());
  EXPECT_TRUE(p.ours[0].grad().defined());
  EXPECT_EQ(opt.state_bytes(), 2 * 4 * (128 + 8 + 105 + 1));
}

// dist.offload = "optimizer": the moments in host memory, each update on host copies of the
// parameters and gradients. Here the device is the CPU too, so what this checks is the plumbing:
// the staging of both buffers every step (a parameter written between steps, as a restore writes
// it, is seen), the copy back, the clip coefficient, the state's accounting and round trip.
TEST(FusedAdamW, AnOffloadedStepGivesTheOnDeviceStepsBitsWithItsStateInHostMemory) {
  auto a = make_params(), b = make_params();
  const AdamWHyper h{1e-2, 0.9, 0.95, 1e-8};
  FusedAdamW on_device({{a.ours, 0.1}}, h), offloaded({{b.ours, 0.1}}, h, /*offload=*/true);
  EXPECT_EQ(on_device.host_state_bytes(), 0);
  EXPECT_EQ(offloaded.host_state_bytes(), offloaded.state_bytes());
  EXPECT_EQ(offloaded.state_bytes(), on_device.state_bytes());
  EXPECT_FALSE(offloaded.device_scalars().on());
  for (int step = 1; step <= 4; ++step) {
    torch::manual_seed(40 + step);
    for (size_t i = 0; i < a.ours.size(); ++i) {
      const at::Tensor g = torch::randn(a.ours[i].sizes()) * 5;
      a.ours[i].mutable_grad().copy_(g);
      b.ours[i].mutable_grad().copy_(g);
    }
    if (step == 3) {  // a write into a parameter between steps
      a.ours[2].detach().mul_(0.5);
      b.ours[2].detach().mul_(0.5);
    }
    on_device.step(clip_coefficient(global_grad_norm(on_device.flat_grads()), 1.0));
    offloaded.step(clip_coefficient(global_grad_norm(offloaded.flat_grads()), 1.0));
    for (size_t i = 0; i < a.ours.size(); ++i)
      ASSERT_TRUE(torch::equal(a.ours[i], b.ours[i])) << "parameter " << i << " step " << step;
  }
  const auto want = on_device.state_tensors(), got = offloaded.state_tensors();
  ASSERT_EQ(want.size(), got.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_TRUE(torch::equal(want[i].second, got[i].second)) << want[i].first;
  auto c = make_params();
  FusedAdamW reloaded({{c.ours, 0.1}}, h, /*offload=*/true);
  reloaded.load_state(want, on_device.step_count());
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_TRUE(torch::equal(reloaded.state_tensors()[i].second, want[i].second)) << want[i].first;
}

TEST(FusedAdamW, StateRoundTripsThroughStateTensors) {
  auto a = make_params(), b = make_params();
  FusedAdamW oa({{a.ours, 0.1}}, AdamWHyper{}), ob({{b.ours, 0.1}}, AdamWHyper{});
  for (auto& t : a.ours) t.mutable_grad().fill_(0.5);
  oa.step();
  std::vector<std::pair<std::string, torch::Tensor>> saved;
  for (auto& [n, t] : oa.state_tensors()) saved.emplace_back(n, t.clone());
  ob.load_state(saved, oa.step_count());
  for (size_t i = 0; i < a.ours.size(); ++i) b.ours[i].detach().copy_(a.ours[i].detach());
  for (auto* o : {&oa, &ob}) {
    o->zero_grad();
  }
  for (auto& t : a.ours) t.mutable_grad().fill_(-0.25);
  for (auto& t : b.ours) t.mutable_grad().fill_(-0.25);
  oa.step();
  ob.step();
  for (size_t i = 0; i < a.ours.size(); ++i) EXPECT_TRUE(torch::equal(a.ours[i], b.ours[i]));
}

}  // namespace
}  // namespace frugal::fused_adamw_test
