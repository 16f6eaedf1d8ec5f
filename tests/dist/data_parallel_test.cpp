// DataParallel inside one test process: two ranks on two threads, talking through a real c10d Gloo
// group on localhost (two_ranks.h). (tests/dist/dist_train_test.cpp runs whole processes;
// zero_adamw_test.cpp tests ZeRO's sharded AdamW.)
#include "frugal/dist/data_parallel.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <future>
#include <thread>

#include "frugal/core/compat.h"
#include "frugal/core/errors.h"
#include "frugal/dist/zero_adamw.h"
#include "frugal/model/working_weights.h"
#include "frugal/train/fused_adamw.h"
#include "frugal/train/grad_clip.h"
#include "frugal/train/muon.h"
#include "two_ranks.h"

namespace frugal::dist::data_parallel_test {
namespace {
using two_threads::give_same_gradients;
using two_threads::make_params;
using two_threads::on_both;
using two_threads::two_ranks;

// One step of two micro-batches through `dp` (each loss halved, the second backward the last);
// the step's loss as finish() leaves it.
template <class Loss>
double two_micro_batches(DataParallel& dp, Loss loss_of_micro) {
  at::Tensor total = torch::zeros({});
  for (int micro = 0; micro < 2; ++micro) {
    at::Tensor l = loss_of_micro(micro) / 2;
    dp.before_backward(micro == 1);
    l.backward();
    total += l.detach();
  }
  dp.finish(total);
  return total.item<double>();
}

TEST(DataParallel, BucketsAverageGradientsOncePerStep) {
  auto groups = two_ranks(29651);
  Config c;
  c.dist.bucket_mb = 1e-6;  // 1 byte: every parameter is a bucket of its own
  // Rank r's loss on its input; the reference: one model, the mean of both ranks' losses.
  // Inputs drawn up front: the global generator is not for two threads at once.
  torch::manual_seed(1000);
  const std::vector<std::vector<at::Tensor>> xs = {{torch::randn({4, 7}), torch::randn({4, 7})},
                                                   {torch::randn({4, 7}), torch::randn({4, 7})}};
  auto loss_of = [&xs](const std::vector<at::Tensor>& p, int64_t r, int micro) {
    const at::Tensor& x = xs[r][micro];
    return ((torch::matmul(x, p[0]) + p[1]).sum(1).tanh() * p[2].sum()).pow(2).mean();
  };
  std::vector<std::vector<at::Tensor>> params = {make_params(3), make_params(3)};
  std::vector<std::unique_ptr<DataParallel>> dps(2);
  std::vector<std::unique_ptr<FusedAdamW>> opts(2);
  std::vector<double> losses(2);
  on_both([&](int64_t r) {
    dps[r] = std::make_unique<DataParallel>(groups[r], c);
    opts[r] = std::make_unique<FusedAdamW>(
        std::vector<FusedAdamW::Group>{{{params[r][0]}, 0.1}, {{params[r][1], params[r][2]}, 0.0}}, AdamWHyper{});
    dps[r]->attach(params[r]);
    // Two micro-batches: only the second backward reduces.
    losses[r] = two_micro_batches(*dps[r], [&](int micro) { return loss_of(params[r], r, micro); });
  });
  EXPECT_EQ(dps[0]->bucket_count(), 3);
  auto ref = make_params(3);
  at::Tensor ref_loss = torch::zeros({});
  for (int64_t r = 0; r < 2; ++r)
    for (int micro = 0; micro < 2; ++micro) ref_loss = ref_loss + loss_of(ref, r, micro) / 4;
  ref_loss.backward();
  for (int r = 0; r < 2; ++r) {
    EXPECT_NEAR(losses[r], ref_loss.item<double>(), 1e-6);
    for (size_t i = 0; i < ref.size(); ++i)
      // fp32 sums in another order: agreement to a few ulps of the gradient's scale.
      EXPECT_TRUE(torch::allclose(params[r][i].grad(), ref[i].grad(), 1e-5, 1e-6)) << "rank " << r << " param " << i;
  }
  // Both ranks hold bitwise the same averaged gradients.
  for (size_t i = 0; i < ref.size(); ++i) EXPECT_TRUE(torch::equal(params[0][i].grad(), params[1][i].grad()));
}

// dist.zero = 2: every bucket's gradients reduced to the ranks that own its range, and freed.
// 1-byte buckets (one per parameter); the 7x5 matrix spans both ranks' chunks of its group (18 + 17
// of 35 elements), so its bucket goes to two owners. The third parameter gets no gradient in the
// first micro-batch. Each rank's shard must equal its slice of the mean gradient, no parameter
// may keep a gradient, and the norm over the shards must be the whole gradient's.
TEST(DataParallel, Zero2ReducesEachBucketToItsOwnersShard) {
  auto groups = two_ranks(29655);
  Config c;
  c.dist.bucket_mb = 1e-6;
  c.dist.zero = ZeroStage::kGradients;
  torch::manual_seed(2000);
  const std::vector<std::vector<at::Tensor>> xs = {{torch::randn({4, 7}), torch::randn({4, 7})},
                                                   {torch::randn({4, 7}), torch::randn({4, 7})}};
  auto loss_of = [&xs](const std::vector<at::Tensor>& p, int64_t r, int micro) {
    const at::Tensor& x = xs[r][micro];
    const at::Tensor y = (torch::matmul(x, p[0]) + p[1]).sum(1).tanh();
    return (micro == 0 ? y : y * p[2].sum()).pow(2).mean();
  };
  std::vector<std::vector<at::Tensor>> params = {make_params(3), make_params(3)};
  std::vector<std::unique_ptr<DataParallel>> dps(2);
  std::vector<std::unique_ptr<Optimizer>> opts(2);
  std::vector<std::vector<at::Tensor>> shards(2);
  std::vector<double> norms(2);
  on_both([&](int64_t r) {
    dps[r] = std::make_unique<DataParallel>(groups[r], c);
    std::vector<ParamGroup> pg(2);
    pg[0].params = {params[r][0]};
    pg[0].weight_decay = 0.1;
    pg[1].params = {params[r][1], params[r][2]};
    opts[r] = dps[r]->optimizer_sharding().adamw(pg, TrainConfig{});
    dps[r]->attach(params[r]);
    two_micro_batches(*dps[r], [&](int micro) { return loss_of(params[r], r, micro); });
    shards[r] = opts[r]->grads();
    norms[r] = dps[r]->global_norm(global_grad_norm(shards[r])).item<double>();
  });
  auto ref = make_params(3);
  at::Tensor ref_loss = torch::zeros({});
  for (int64_t r = 0; r < 2; ++r)
    for (int micro = 0; micro < 2; ++micro) ref_loss = ref_loss + loss_of(ref, r, micro) / 4;
  ref_loss.backward();
  // The reference's flat gradient per group, padded to 2 equal chunks: 35 -> 2 x 18, 8 -> 2 x 4.
  const std::vector<at::Tensor> flat = {torch::cat({ref[0].grad().reshape({-1}), torch::zeros({1})}),
                                        torch::cat({ref[1].grad().reshape({-1}), ref[2].grad().reshape({-1})})};
  for (int64_t r = 0; r < 2; ++r) {
    ASSERT_EQ(shards[r].size(), 2u);
    for (size_t g = 0; g < 2; ++g) {
      const int64_t chunk = flat[g].numel() / 2;
      EXPECT_EQ(shards[r][g].numel(), chunk) << "rank " << r << " keeps more than its shard of group " << g;
      EXPECT_TRUE(torch::allclose(shards[r][g], flat[g].narrow(0, r * chunk, chunk), 1e-5, 1e-6))
          << "rank " << r << " group " << g;
    }
    for (size_t i = 0; i < params[r].size(); ++i)
      EXPECT_FALSE(params[r][i].grad().defined()) << "rank " << r << " kept the gradient of parameter " << i;
    EXPECT_NEAR(norms[r], global_grad_norm({ref[0].grad(), ref[1].grad(), ref[2].grad()}).item<double>(), 1e-5);
  }
}

// Rank 0's parameters broadcast at the start reach what keeps a copy of them: the bf16 working
// weights (model/working_weights.h) of rank 1, made before the broadcast from its own initial values.
TEST(DataParallel, TheStartingBroadcastReachesTheWorkingWeights) {
  auto groups = two_ranks(29656);
  std::vector<std::vector<at::Tensor>> params = {make_params(3), make_params(4)};
  std::vector<std::unique_ptr<FusedAdamW>> opts(2);
  on_both([&](int64_t r) {
    opts[r] = std::make_unique<FusedAdamW>(std::vector<FusedAdamW::Group>{{params[r], 0.0}}, AdamWHyper{});
    opts[r]->keep_working_copies(at::kBFloat16, false);
    DataParallel(groups[r], Config{}).broadcast_parameters(params[r]);
  });
  compat::AutocastGuard autocast(c10::DeviceType::CPU, at::kBFloat16, true);
  c10::NoGradGuard no_grad;
  for (size_t i = 0; i < params[0].size(); ++i) {
    ASSERT_TRUE(torch::equal(params[1][i], params[0][i]));
    EXPECT_TRUE(torch::equal(working_weight(params[1][i]), params[0][i].to(at::kBFloat16))) << "param " << i;
  }
}

TEST(DataParallel, AgreeSpreadsOneRanksStopWithItsReason) {
  auto groups = two_ranks(29652);
  Config c;
  std::vector<std::unique_ptr<DataParallel>> dps(2);
  std::vector<Control> controls(2);
  controls[1].request_stop("stop signal 10 (User defined signal 1)", StopKind::kPreempted);
  controls[0].request_checkpoint();
  on_both([&](int64_t r) {
    dps[r] = std::make_unique<DataParallel>(groups[r], c);
    dps[r]->agree(controls[r]);
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(controls[r].should_stop());
    EXPECT_EQ(controls[r].stop_kind(), StopKind::kPreempted);
    EXPECT_TRUE(controls[r].checkpoint_requested());
  }
  EXPECT_EQ(controls[0].stop_reason(), "rank 1: stop signal 10 (User defined signal 1)");
  // A quiet round changes nothing.
  std::vector<Control> quiet(2);
  on_both([&](int64_t r) { dps[r]->agree(quiet[r]); });
  EXPECT_FALSE(quiet[0].should_stop() || quiet[1].should_stop() || quiet[0].checkpoint_requested());
}

// Each exchange (a checkpoint's data cursors and shard reports) reaches the writer in rank order,
// and its keys leave the store once read: a long run's exchanges do not pile up in rank 0's store.
TEST(DataParallel, GatheredStringsReachTheWriterAndLeaveNoKeyBehind) {
  auto groups = two_ranks(29697);
  Config c;
  std::vector<std::unique_ptr<DataParallel>> dps(2);
  std::vector<std::vector<std::string>> got(2);
  on_both([&](int64_t r) {
    dps[r] = std::make_unique<DataParallel>(groups[r], c);
    for (int i = 0; i < 3; ++i)
      got[r] =
          dps[r]->gather_strings("rank " + std::to_string(r) + " round " + std::to_string(i), "t/" + std::to_string(i));
  });
  EXPECT_EQ(got[0], (std::vector<std::string>{"rank 0 round 2", "rank 1 round 2"}));
  EXPECT_TRUE(got[1].empty());
  for (int i = 0; i < 3; ++i)
    for (auto& g : groups) EXPECT_FALSE(g->store_has("gather/t/" + std::to_string(i) + "/1")) << i;
}

// MASTER_PORT taken by another program that accepts connections and never answers: a rank must
// fail within dist.timeout_s (plus a few seconds), naming the cause, instead of waiting forever.
TEST(ProcessGroup, APortAnsweredByAnotherProgramFailsWithinTheTimeout) {
  const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  ASSERT_EQ(::listen(listener, 16), 0);
  socklen_t len = sizeof(a);
  ::getsockname(listener, reinterpret_cast<sockaddr*>(&a), &len);
  std::atomic<bool> quit{false};
  std::vector<int> held;
  std::thread silent([&] {  // accepts and says nothing
    while (!quit) {
      pollfd p{listener, POLLIN, 0};
      if (::poll(&p, 1, 50) > 0) held.push_back(::accept(listener, nullptr, nullptr));
    }
  });
  DistConfig c;
  c.timeout_s = 1;
  DistEnv e;
  e.rank = 1;
  e.world_size = 2;
  e.master_port = ntohs(a.sin_port);
  e.launcher = "test";
  try {
    connect(e, c, c10::Device(c10::kCPU));
    ADD_FAILURE() << "connected to a program that is not a c10d store";
  } catch (const DistError& err) {
    EXPECT_NE(std::string(err.what()).find("rank 1 of 2"), std::string::npos) << err.what();
  }
  quit = true;
  silent.join();
  for (int fd : held) ::close(fd);
  ::close(listener);
}

TEST(DataParallel, RefusesTheTorchOptimizer) {
  auto groups = two_ranks(29653);
  Config c;
  c.train.optimizer = OptimizerKind::kTorchAdamW;
  try {
    DataParallel dp(groups[0], c);
    FAIL() << "torch_adamw was accepted for data parallel";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("torch_adamw is single-process only"), std::string::npos) << e.what();
  }
  c.train.optimizer = OptimizerKind::kMuon;  // Newton-Schulz needs whole gradients
  c.dist.zero = ZeroStage::kGradients;
  try {
    DataParallel dp(groups[0], c);
    FAIL() << "Muon was accepted with dist.zero = 2";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("set dist.zero = 1"), std::string::npos) << e.what();
  }
}

// Three matrices (two of one shape) and a gain: Muon's groups as muon_param_groups makes them.
std::vector<ParamGroup> muon_groups(const std::vector<at::Tensor>& p) {
  std::vector<ParamGroup> g(2);
  g[0].muon = true;
  g[0].weight_decay = 0.1;
  g[0].params = {p[0], p[1], p[2]};
  g[1].params = {p[3]};
  return g;
}

std::vector<at::Tensor> muon_params(uint64_t seed) {
  torch::manual_seed(seed);
  return {torch::randn({6, 10}).requires_grad_(), torch::randn({12, 4}).requires_grad_(),
          torch::randn({6, 10}).requires_grad_(), torch::randn({5}).requires_grad_()};
}

// dist.zero = 1 with Muon: each rank owns whole matrices (12x4 and one 6x10 to one rank, the other
// 6x10 to the other: 48 + 60 against 60 elements), steps them, and broadcasts them; the weights
// equal unsharded Muon's, each rank keeps its own matrices' momentum only, and the gathered state
// is unsharded Muon's, name for name.
TEST(DataParallel, Zero1ShardsMuonByMatrixAndMatchesItUnsharded) {
  auto pgs = two_ranks(29654);
  Config c;
  c.train.optimizer = OptimizerKind::kMuon;
  c.train.muon_precision = MuonPrecision::kFp32;
  c.train.lr = 0.02;
  c.dist.zero = ZeroStage::kOptimizerState;
  auto ref_params = muon_params(5);
  auto ref = make_optimizer(OptimizerKind::kMuon, muon_groups(ref_params), c.train);
  std::vector<std::vector<at::Tensor>> params = {muon_params(5), muon_params(5)};
  std::vector<std::unique_ptr<DataParallel>> dps(2);
  std::vector<std::unique_ptr<Optimizer>> opts(2);
  on_both([&](int64_t r) {
    dps[r] = std::make_unique<DataParallel>(pgs[r], c);
    opts[r] = build_optimizer(muon_groups(params[r]), c.train, /*muon_bf16=*/false, dps[r]->optimizer_sharding());
  });
  for (int step = 0; step < 3; ++step) {
    give_same_gradients(200 + step, ref_params, params);
    ref->set_lr(0.02);
    ref->step();
    on_both([&](int64_t r) {
      opts[r]->set_lr(0.02);
      opts[r]->step();
    });
  }
  for (int r = 0; r < 2; ++r)
    for (size_t i = 0; i < ref_params.size(); ++i)
      EXPECT_TRUE(torch::allclose(params[r][i], ref_params[i], 1e-5, 1e-6)) << "rank " << r << " parameter " << i;
  // Momentum: 108 floats on one rank, 60 on the other (of 168); AdamW's 5-element gain in chunks of 3.
  const int64_t adamw = 2 * 3 * 4;
  EXPECT_EQ(opts[0]->state_bytes() + opts[1]->state_bytes(), 2 * adamw + 168 * 4);
  EXPECT_EQ(std::max(opts[0]->state_bytes(), opts[1]->state_bytes()), adamw + 108 * 4);
  std::vector<std::vector<std::pair<std::string, at::Tensor>>> states(2);
  on_both([&](int64_t r) { states[r] = opts[r]->state_tensors(); });
  const auto want = ref->state_tensors();
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(states[r].size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_EQ(states[r][i].first, want[i].first);
      EXPECT_TRUE(torch::allclose(states[r][i].second, want[i].second, 1e-5, 1e-6)) << want[i].first;
    }
  }
}

}  // namespace
}  // namespace frugal::dist::data_parallel_test
