// FusedAdamW against LibTorch's AdamW, step for step.
#include "frugal/train/fused_adamw.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

namespace frugal {
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
  FusedAdamW ours({{{p.ours[0], p.ours[2]}, 0.1}, {{p.ours[1], p.ours[3]}, 0.0}},
                  AdamWHyper{1e-2, 0.9, 0.95, 1e-8});
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
    for (size_t i = 0; i < p.ours.size(); ++i)
      ASSERT_TRUE(torch::equal(p.ours[i], p.ref[i])) << "param " << i << " step " << step << " max diff "
                                                     << (p.ours[i] - p.ref[i]).abs().max().item<double>();
  }
  EXPECT_EQ(ours.step_count(), 20);
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
}  // namespace frugal
