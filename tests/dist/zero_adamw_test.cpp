// ZeroAdamW (ZeRO stages 1-3) inside one test process: two ranks on two threads, talking through a
// real c10d Gloo group on localhost (two_ranks.h).
#include "frugal/dist/zero_adamw.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "frugal/ckpt/checkpoint.h"
#include "frugal/core/compat.h"
#include "frugal/core/errors.h"
#include "frugal/model/working_weights.h"
#include "frugal/train/fused_adamw.h"
#include "test_util.h"
#include "two_ranks.h"

namespace frugal::dist::zero_adamw_test {
namespace {
using two_threads::give_same_gradients;
using two_threads::make_params;
using two_threads::on_both;
using two_threads::two_ranks;

// Every rank's state_shard() (no communication: called on one thread after the other) pieced
// together as a checkpoint assembles it; each element comes from exactly one rank.
void expect_shards_piece_together(const std::vector<std::unique_ptr<ZeroAdamW>>& opts,
                                  const std::vector<std::pair<std::string, at::Tensor>>& want) {
  std::vector<std::pair<std::string, at::Tensor>> whole;
  std::map<std::string, int64_t> held;
  for (const auto& opt : opts) {
    ASSERT_TRUE(opt->shards_state());
    for (const StateShard::Entry& e : opt->state_shard().entries) {
      auto it = std::find_if(whole.begin(), whole.end(), [&](const auto& w) { return w.first == e.name; });
      if (it == whole.end()) it = whole.insert(whole.end(), {e.name, torch::zeros({e.numel})});
      for (size_t k = 0; k < e.pieces.size(); ++k) {
        it->second.narrow(0, e.pieces[k].first, e.pieces[k].second).copy_(e.values[k]);
        held[e.name] += e.pieces[k].second;
      }
    }
  }
  ASSERT_EQ(whole.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(whole[i].first, want[i].first);
    EXPECT_TRUE(torch::equal(whole[i].second, want[i].second)) << want[i].first;
    EXPECT_EQ(held[want[i].first], want[i].second.numel()) << want[i].first << ": elements held by the ranks";
  }
}

// Every rank's weights_shard() of its parameters (and of a tensor outside the optimizer's buffers,
// rank 0's whole) pieced together as a checkpoint assembles them: `want`, each element from exactly
// one rank, in the parameters' shapes. At stage 3 the pieces come from the master shards (the
// buffers have no memory between gathers).
void expect_weight_shards_piece_together(const std::vector<std::unique_ptr<ZeroAdamW>>& opts,
                                         const std::vector<std::vector<at::Tensor>>& params,
                                         const std::vector<at::Tensor>& want) {
  const at::Tensor outside = torch::arange(4.0);
  std::vector<at::Tensor> whole;
  for (const auto& w : want) whole.push_back(torch::zeros_like(w));
  whole.push_back(torch::zeros({4}));
  std::vector<int64_t> held(whole.size(), 0);
  for (size_t r = 0; r < opts.size(); ++r) {
    std::vector<std::pair<std::string, at::Tensor>> named;
    for (size_t i = 0; i < params[r].size(); ++i) named.emplace_back(fmt::format("p{}", i), params[r][i]);
    named.emplace_back("outside", outside);
    const StateShard shard = opts[r]->weights_shard(named);
    ASSERT_EQ(shard.entries.size(), named.size());
    for (size_t i = 0; i < named.size(); ++i) {
      const StateShard::Entry& e = shard.entries[i];
      EXPECT_EQ(e.name, named[i].first);
      EXPECT_EQ(e.shape, named[i].second.sizes().vec());
      for (size_t k = 0; k < e.pieces.size(); ++k) {
        whole[i].view({-1}).narrow(0, e.pieces[k].first, e.pieces[k].second).copy_(e.values[k]);
        held[i] += e.pieces[k].second;
      }
    }
    EXPECT_EQ(shard.entries.back().pieces.size(), r == 0 ? 1u : 0u) << "rank " << r;
  }
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_TRUE(torch::equal(whole[i], want[i])) << "parameter " << i;
    EXPECT_EQ(held[i], want[i].numel()) << "parameter " << i << ": elements held by the ranks";
  }
  EXPECT_TRUE(torch::equal(whole.back(), outside));
}

// `offload` (dist.offload = "optimizer"): each rank's moments in host memory and its chunk updated
// there, against FusedAdamW on the device (here the CPU: what this checks is the staging, the update
// of the chunk on the host buffers, the copy back and the state's gather).
void expect_sharded_steps_match_fused_adamw(const std::vector<std::shared_ptr<ProcessGroup>>& groups, bool offload) {
  SCOPED_TRACE(offload ? "offloaded" : "on the device");
  const AdamWHyper h{1e-2, 0.9, 0.99, 1e-8};
  auto ref_params = make_params(7);
  FusedAdamW ref({{{ref_params[0]}, 0.1}, {{ref_params[1], ref_params[2]}, 0.0}}, h);
  std::vector<std::vector<at::Tensor>> params = {make_params(7), make_params(7)};
  std::vector<std::unique_ptr<ZeroAdamW>> opts(2);
  for (int r = 0; r < 2; ++r)
    opts[r] = std::make_unique<ZeroAdamW>(
        std::vector<FusedAdamW::Group>{{{params[r][0]}, 0.1}, {{params[r][1], params[r][2]}, 0.0}}, h, groups[r], false,
        offload);
  for (int step = 0; step < 4; ++step) {
    give_same_gradients(100 + step, ref_params, params);
    torch::NoGradGuard ng;
    ref.step();
    on_both([&](int64_t r) { opts[r]->step(); });
  }
  // The same element-wise ops on slices of the same values: equal to the last bit.
  for (int r = 0; r < 2; ++r)
    for (size_t i = 0; i < ref_params.size(); ++i)
      EXPECT_TRUE(torch::equal(params[r][i], ref_params[i])) << "rank " << r << " parameter " << i;
  // 35 + 8 elements -> chunks of 18 and 4 per rank: 2 x 22 floats of state instead of 2 x 43.
  EXPECT_EQ(opts[0]->state_bytes(), 2 * (18 + 4) * 4);
  EXPECT_EQ(opts[0]->host_state_bytes(), offload ? 2 * (18 + 4) * 4 : 0);
  EXPECT_EQ(ref.state_bytes(), 2 * (35 + 8) * 4);

  // Gathered state is FusedAdamW's, name for name; loading it back gives each rank its slice.
  std::vector<std::vector<std::pair<std::string, at::Tensor>>> states(2);
  on_both([&](int64_t r) { states[r] = opts[r]->state_tensors(); });
  auto want = ref.state_tensors();
  ASSERT_EQ(states[0].size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(states[0][i].first, want[i].first);
    EXPECT_TRUE(torch::equal(states[0][i].second, want[i].second)) << want[i].first;
  }
  expect_shards_piece_together(opts, want);
  expect_weight_shards_piece_together(opts, params, ref_params);
  std::vector<at::Tensor> fresh = make_params(9);
  ZeroAdamW reloaded({{{fresh[0]}, 0.1}, {{fresh[1], fresh[2]}, 0.0}}, h, groups[1], false, offload);
  reloaded.load_state(want, 4);
  EXPECT_EQ(reloaded.step_count(), 4);
  std::vector<std::pair<std::string, at::Tensor>> again;
  on_both([&](int64_t r) {
    if (r == 0)
      opts[0]->state_tensors();  // rank 0's half of the gather
    else
      again = reloaded.state_tensors();
  });
  for (size_t i = 0; i < want.size(); ++i) EXPECT_TRUE(torch::equal(again[i].second, want[i].second));
}

TEST(ZeroAdamW, ShardedStepsMatchFusedAdamWAndHalveTheState) {
  const auto groups = two_ranks(29650);
  expect_sharded_steps_match_fused_adamw(groups, false);
  expect_sharded_steps_match_fused_adamw(groups, true);
}

// dist.zero = 3: a unit's parameters hold memory only while gathered; a gather brings back every
// rank's shard without moving the version counters autograd checks, so a backward whose unit was
// released and gathered again reads the same values; release_parameters(true) keeps each rank's own
// chunk of what was written; a prefetched unit is read only once it arrived. The 7x5 matrix (unit
// 0) spans both ranks' chunks (18 + 17); the 3-element tensor has no unit and stays whole.
TEST(ZeroAdamW, Zero3GathersAUnitWholeAndFreesItBetweenUses) {
  const auto groups = two_ranks(29656);
  const AdamWHyper h{1e-2, 0.9, 0.99, 1e-8};
  const std::vector<at::Tensor> ref = make_params(7);
  std::vector<std::vector<at::Tensor>> params = {make_params(7), make_params(7)};
  std::vector<std::unique_ptr<ZeroAdamW>> opts(2);
  for (int r = 0; r < 2; ++r)
    opts[r] = std::make_unique<ZeroAdamW>(
        std::vector<FusedAdamW::Group>{{{params[r][0]}, 0.1}, {{params[r][1]}, 0.0}, {{params[r][2]}, 0.0}}, h,
        groups[r], false, false, std::vector<GroupPlace>{{0, -1, {}}, {0, -1, {}}, {-1, -1, {}}});
  auto nbytes = [](const at::Tensor& t) { return t.storage().nbytes(); };
  auto version = [](const at::Tensor& t) { return t.unsafeGetTensorImpl()->version_counter().current_version(); };
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(opts[r]->gathers_parameters());
    EXPECT_EQ(nbytes(params[r][0]), 0u) << "rank " << r << " keeps the whole unit after construction";
    EXPECT_EQ(nbytes(params[r][1]), 0u);
    EXPECT_TRUE(torch::equal(params[r][2], ref[2]));  // no unit: whole
    // Shards of 18 and 3 floats, and the whole 3-element group padded to 2 x 2.
    EXPECT_EQ(opts[r]->parameter_bytes(), (18 + 3 + 4) * 4);
  }
  torch::manual_seed(3000);
  const at::Tensor x = torch::randn({4, 7});
  // p[0] * p[0] keeps the matrix itself for the backward (the product's derivative reads it).
  auto loss_of = [&x](const std::vector<at::Tensor>& p) {
    return ((torch::matmul(x, p[0]) + p[1]).tanh() * p[2].sum()).sum() + (p[0] * p[0]).sum();
  };
  loss_of(ref).backward();
  std::vector<uint32_t> versions(2);
  on_both([&](int64_t r) {
    auto& p = params[r];
    versions[r] = version(p[0]);
    opts[r]->gather_unit(0);
    EXPECT_TRUE(torch::equal(p[0], ref[0])) << "rank " << r;
    EXPECT_TRUE(torch::equal(p[1], ref[1])) << "rank " << r;
    at::Tensor loss = loss_of(p);
    opts[r]->release_unit(0);  // as after a block's forward
    EXPECT_EQ(nbytes(p[0]), 0u);
    opts[r]->gather_unit(0);  // as before its backward
    EXPECT_EQ(version(p[0]), versions[r]) << "a gather moved the version counter autograd checks";
    loss.backward();
    opts[r]->release_unit(0);
  });
  for (int r = 0; r < 2; ++r)
    for (size_t i = 0; i < ref.size(); ++i)
      EXPECT_TRUE(torch::allclose(params[r][i].grad(), ref[i].grad())) << "rank " << r << " param " << i;
  // A restore's writes: rank 0 writes 2x, rank 1 3x; each keeps its own chunk of the matrix.
  on_both([&](int64_t r) {
    opts[r]->gather_parameters();
    torch::NoGradGuard ng;
    params[r][0].mul_(static_cast<double>(2 + r));
    opts[r]->release_parameters(/*keep_writes=*/true);
    opts[r]->gather_unit(0);
  });
  const at::Tensor flat = ref[0].reshape({-1});
  const at::Tensor mixed = torch::cat({flat.narrow(0, 0, 18) * 2, flat.narrow(0, 18, 17) * 3}).view({7, 5});
  for (int r = 0; r < 2; ++r) EXPECT_TRUE(torch::equal(params[r][0], mixed)) << "rank " << r;
  // A prefetch: the gather that follows waits for it; a release under it waits, then frees.
  on_both([&](int64_t r) {
    opts[r]->release_unit(0);
    opts[r]->prefetch_unit(0);
    opts[r]->gather_unit(0);
    EXPECT_TRUE(torch::equal(params[r][0], mixed)) << "rank " << r << " read a prefetch before it arrived";
    opts[r]->release_unit(0);
    opts[r]->prefetch_unit(0);
    opts[r]->release_unit(0);
    EXPECT_EQ(nbytes(params[r][0]), 0u);
  });
  // host_copies (a checkpoint's capture): every tensor on the host, in order, each unit gathered
  // and released again.
  on_both([&](int64_t r) {
    const auto copies = host_copies(*opts[r], {{"m", params[r][0]}, {"v", params[r][1]}, {"w", params[r][2]}});
    ASSERT_EQ(copies.size(), 3u);
    EXPECT_EQ(copies[1].first, "v");
    EXPECT_TRUE(torch::equal(copies[0].second, mixed)) << "rank " << r;
    EXPECT_TRUE(torch::equal(copies[2].second, ref[2])) << "rank " << r;
    EXPECT_EQ(nbytes(params[r][0]), 0u) << "rank " << r << ": host_copies left unit 0 gathered";
  });
  // A rank that only takes part (keep = false) joins the gathers and copies nothing.
  on_both([&](int64_t r) {
    const auto copies = host_copies(*opts[r], {{"m", params[r][0]}, {"w", params[r][2]}}, /*keep=*/r == 0);
    EXPECT_EQ(copies.size(), r == 0 ? 2u : 0u) << "rank " << r;
    if (r == 0) {
      EXPECT_TRUE(torch::equal(copies[0].second, mixed));
    }
    EXPECT_EQ(nbytes(params[r][0]), 0u) << "rank " << r;
  });
  // Inside gather_parameters() (decoding on rank 0 alone, say) a block's release does nothing: a
  // later use must find it whole without a gather the other ranks do not join.
  on_both([&](int64_t r) {
    opts[r]->gather_parameters();
    opts[r]->release_unit(0);
    EXPECT_GT(nbytes(params[r][0]), 0u) << "rank " << r << " released a unit inside gather_parameters()";
    opts[r]->release_parameters(/*keep_writes=*/false);
    EXPECT_EQ(nbytes(params[r][0]), 0u);
  });
}

// dist.zero = 3 under bf16 autocast: a group of product weights is gathered as its bf16 working
// copy alone (the fp32 parameters keep no memory), which working_weight() returns: the fp32
// values rounded as autocast's cast rounds them. Another group of the unit is gathered in fp32.
// Without autocast, and inside gather_parameters(), the fp32 parameters are gathered whole and
// working_weight() returns them.
TEST(ZeroAdamW, Zero3GathersABf16CopyAloneWhereTheModelReadsOne) {
  const auto groups = two_ranks(29658);
  const std::vector<at::Tensor> ref = make_params(7);
  std::vector<std::vector<at::Tensor>> params = {make_params(7), make_params(7)};
  std::vector<std::unique_ptr<ZeroAdamW>> opts(2);
  for (int r = 0; r < 2; ++r)
    opts[r] = std::make_unique<ZeroAdamW>(
        std::vector<FusedAdamW::Group>{{{params[r][0]}, 0.1}, {{params[r][1], params[r][2]}, 0.0}}, AdamWHyper{},
        groups[r], false, false, std::vector<GroupPlace>{{0, -1, {}, at::kBFloat16}, {0, -1, {}}});
  auto nbytes = [](const at::Tensor& t) { return t.storage().nbytes(); };
  on_both([&](int64_t r) {
    const auto& p = params[r];
    {
      compat::AutocastGuard bf16(c10::DeviceType::CPU, at::kBFloat16, true);
      opts[r]->gather_unit(0);
      EXPECT_EQ(nbytes(p[0]), 0u) << "rank " << r << " gathered the fp32 weights beside their bf16 copy";
      EXPECT_TRUE(torch::equal(p[1], ref[1])) << "rank " << r;
      const at::Tensor w = working_weight(p[0]);
      EXPECT_EQ(w.scalar_type(), at::kBFloat16);
      EXPECT_TRUE(torch::equal(w, ref[0].to(at::kBFloat16))) << "rank " << r;
    }
    opts[r]->release_unit(0);
    opts[r]->gather_unit(0);  // without autocast the model reads the fp32 weights: those are gathered
    EXPECT_TRUE(torch::equal(p[0], ref[0])) << "rank " << r;
    opts[r]->release_unit(0);
    opts[r]->gather_parameters();
    EXPECT_TRUE(torch::equal(p[0], ref[0])) << "rank " << r;
    {
      compat::AutocastGuard bf16(c10::DeviceType::CPU, at::kBFloat16, true);
      EXPECT_EQ(working_weight(p[0]).scalar_type(), at::kFloat) << "the copy is not gathered: the weight itself";
    }
    opts[r]->release_parameters(/*keep_writes=*/false);
  });
}

// dist.zero = 3 with a group split by block: the unsplit group {7x5, 5, 3} as {7x5, 3} of block 0
// and {5} of none. Steps on gradient shards match FusedAdamW on the unsplit group, and the state
// is saved in the unsplit group's layout (one "g0", each parameter at its place), so a checkpoint
// reads back on either side.
TEST(ZeroAdamW, Zero3SplitGroupsStepAndSaveAsTheUnsplitGroup) {
  const auto groups = two_ranks(29657);
  const AdamWHyper h{1e-2, 0.9, 0.99, 1e-8};
  auto ref_params = make_params(7);
  FusedAdamW ref({{ref_params, 0.1}}, h);
  std::vector<std::vector<at::Tensor>> params = {make_params(7), make_params(7)};
  std::vector<std::unique_ptr<ZeroAdamW>> opts(2);
  const std::vector<GroupPlace> places{{0, 0, {0, 40}}, {-1, 0, {35}}};
  for (int r = 0; r < 2; ++r)
    opts[r] = std::make_unique<ZeroAdamW>(
        std::vector<FusedAdamW::Group>{{{params[r][0], params[r][2]}, 0.1}, {{params[r][1]}, 0.1}}, h, groups[r], false,
        false, places);
  for (int step = 0; step < 3; ++step) {
    torch::manual_seed(200 + step);
    std::vector<at::Tensor> grads;
    for (const auto& p : ref_params) grads.push_back(torch::randn(p.sizes()));
    {
      torch::NoGradGuard ng;
      for (size_t i = 0; i < grads.size(); ++i) ref_params[i].mutable_grad().copy_(grads[i]);
    }
    ref.step();
    on_both([&](int64_t r) {
      opts[r]->zero_grad();
      opts[r]->accumulate_shard(0, 0, torch::cat({grads[0].reshape({-1}), grads[2]}));
      opts[r]->accumulate_shard(1, 0, grads[1]);
      opts[r]->step();
    });
  }
  // Between gathers: block 0's weights read from the ranks' master shards.
  expect_weight_shards_piece_together(opts, params, ref_params);
  std::vector<std::vector<std::pair<std::string, at::Tensor>>> states(2);
  on_both([&](int64_t r) {
    opts[r]->gather_parameters();
    states[r] = opts[r]->state_tensors();
  });
  for (int r = 0; r < 2; ++r)
    for (size_t i = 0; i < ref_params.size(); ++i)
      EXPECT_TRUE(torch::equal(params[r][i], ref_params[i])) << "rank " << r << " parameter " << i;
  const auto want = ref.state_tensors();
  ASSERT_EQ(states[0].size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(states[0][i].first, want[i].first);
    EXPECT_TRUE(torch::equal(states[0][i].second, want[i].second)) << want[i].first;
  }
  // Each rank's pieces land at their parameters' places in the unsplit layout.
  expect_shards_piece_together(opts, want);
  // The unsplit layout loads back into the split groups: the same state again.
  on_both([&](int64_t r) {
    opts[r]->load_state(want, 3);
    states[r] = opts[r]->state_tensors();
  });
  for (size_t i = 0; i < want.size(); ++i) EXPECT_TRUE(torch::equal(states[1][i].second, want[i].second));
  // From a sharded checkpoint each rank reads only its own pieces (load_state_shards): the same
  // state again, after it was overwritten.
  test::TempDir dir;
  CheckpointData d;
  for (int64_t r = 0; r < 2; ++r)
    d.optimizer_shards.push_back(stage_state_shard(dir.path(), 3, r, 2, opts[r]->state_shard()));
  const std::string path = write_checkpoint(dir.path(), 3, d);
  const nlohmann::json index = load_checkpoint(path).state["optimizer_shards"];
  on_both([&](int64_t r) {
    std::vector<std::pair<std::string, at::Tensor>> zeros = want;
    for (auto& [name, t] : zeros) t = torch::zeros_like(t);
    opts[r]->load_state(zeros, 0);
    opts[r]->load_state_shards(path, index, 3);
    EXPECT_EQ(opts[r]->step_count(), 3);
    states[r] = opts[r]->state_tensors();
  });
  for (size_t i = 0; i < want.size(); ++i) EXPECT_TRUE(torch::equal(states[0][i].second, want[i].second));
  // A checkpoint of another model (another size for g0) is refused by name.
  std::vector<std::pair<std::string, at::Tensor>> other = want;
  other[0].second = torch::zeros({44});
  EXPECT_THROW(opts[0]->load_state(other, 3), CheckpointError);
  // load_weights (a resume) writes each rank's chunk into its shard and gathers nothing; the
  // shards then hold the new values, and so does every rank's parameter once gathered.
  std::vector<at::Tensor> values;
  for (const auto& p : ref_params) values.push_back(p * 2 + 1);
  on_both([&](int64_t r) {
    opts[r]->release_parameters(/*keep_writes=*/false);
    const int64_t gathers = opts[r]->unit_gathers();
    std::vector<std::pair<std::string, at::Tensor>> named;
    for (size_t i = 0; i < params[r].size(); ++i) named.emplace_back(fmt::format("p{}", i), params[r][i]);
    opts[r]->load_weights(named, values);
    EXPECT_EQ(opts[r]->unit_gathers(), gathers) << "rank " << r;
    EXPECT_EQ(params[r][0].storage().nbytes(), 0u) << "rank " << r;
  });
  expect_weight_shards_piece_together(opts, params, values);
  on_both([&](int64_t r) { opts[r]->gather_parameters(); });
  for (int r = 0; r < 2; ++r)
    for (size_t i = 0; i < values.size(); ++i)
      EXPECT_TRUE(torch::equal(params[r][i], values[i])) << "rank " << r << " parameter " << i;
  on_both([&](int64_t r) { opts[r]->release_parameters(/*keep_writes=*/false); });
}

// dist.zero = 3 with dist.offload = "optimizer": each rank's fp32 master chunk lives in host memory
// beside the moments, and the device keeps its shard only in the dtype the gathers send: bf16 for
// a group gathered as its working copy (half the bytes), fp32 for the other. The steps match
// FusedAdamW to the bit; what a checkpoint reads (weights_shard), a gather_parameters() and the
// writes it keeps are the fp32 master's, and the bf16 shard follows each of them.
TEST(ZeroAdamW, Zero3OffloadedKeepsTheMasterInHostMemoryAndABf16ShardOnTheDevice) {
  const auto groups = two_ranks(29659);
  const AdamWHyper h{1e-2, 0.9, 0.99, 1e-8};
  auto ref_params = make_params(7);
  FusedAdamW ref({{{ref_params[0]}, 0.1}, {{ref_params[1], ref_params[2]}, 0.0}}, h);
  std::vector<std::vector<at::Tensor>> params = {make_params(7), make_params(7)};
  std::vector<std::unique_ptr<ZeroAdamW>> opts(2);
  const std::vector<GroupPlace> places{{0, -1, {}, at::kBFloat16}, {0, -1, {}}};
  for (int r = 0; r < 2; ++r)
    opts[r] = std::make_unique<ZeroAdamW>(
        std::vector<FusedAdamW::Group>{{{params[r][0]}, 0.1}, {{params[r][1], params[r][2]}, 0.0}}, h, groups[r], false,
        /*offload=*/true, places);
  for (int r = 0; r < 2; ++r) {
    // Chunks of 18 (the 7x5 matrix, bf16 on the device) and 4 (5 + 3, fp32) elements.
    EXPECT_EQ(opts[r]->parameter_bytes(), 18 * 2 + 4 * 4) << "rank " << r;
    EXPECT_EQ(opts[r]->host_state_bytes(), 3 * (18 + 4) * 4) << "rank " << r << ": moments and master";
    EXPECT_EQ(opts[r]->state_bytes(), opts[r]->host_state_bytes());
  }
  for (int step = 0; step < 3; ++step) {
    torch::manual_seed(300 + step);
    std::vector<at::Tensor> grads;
    for (const auto& p : ref_params) grads.push_back(torch::randn(p.sizes()));
    {
      torch::NoGradGuard ng;
      for (size_t i = 0; i < grads.size(); ++i) ref_params[i].mutable_grad().copy_(grads[i]);
    }
    ref.step();
    on_both([&](int64_t r) {
      opts[r]->zero_grad();
      opts[r]->accumulate_shard(0, 0, grads[0].reshape({-1}));
      opts[r]->accumulate_shard(1, 0, torch::cat({grads[1], grads[2]}));
      opts[r]->step();
    });
  }
  // The checkpoint's pieces: fp32 from the host masters, not the bf16 shard's rounding.
  expect_weight_shards_piece_together(opts, params, ref_params);
  std::vector<std::vector<std::pair<std::string, at::Tensor>>> states(2);
  on_both([&](int64_t r) { states[r] = opts[r]->state_tensors(); });
  const auto want = ref.state_tensors();
  for (size_t i = 0; i < want.size(); ++i) EXPECT_TRUE(torch::equal(states[0][i].second, want[i].second));
  // `expect` gathered as the model reads it under bf16 autocast, then in fp32.
  auto expect_gathers = [&](int64_t r, const at::Tensor& matrix, const char* when) {
    const auto& p = params[r];
    {
      compat::AutocastGuard bf16(c10::DeviceType::CPU, at::kBFloat16, true);
      opts[r]->gather_unit(0);
      EXPECT_TRUE(torch::equal(working_weight(p[0]), matrix.to(at::kBFloat16))) << "rank " << r << " " << when;
      EXPECT_TRUE(torch::equal(p[1], ref_params[1])) << "rank " << r << " " << when;
      opts[r]->release_unit(0);
    }
    opts[r]->gather_parameters();
    EXPECT_TRUE(torch::equal(p[0], matrix)) << "rank " << r << " " << when;
    EXPECT_TRUE(torch::equal(p[2], ref_params[2])) << "rank " << r << " " << when;
  };
  on_both([&](int64_t r) {
    expect_gathers(r, ref_params[0], "after the steps");
    torch::NoGradGuard ng;
    params[r][0].mul_(static_cast<double>(2 + r));  // a restore's writes: each rank keeps its own chunk
    opts[r]->release_parameters(/*keep_writes=*/true);
  });
  const at::Tensor flat = ref_params[0].reshape({-1});
  const at::Tensor mixed = torch::cat({flat.narrow(0, 0, 18) * 2, flat.narrow(0, 18, 17) * 3}).view({7, 5});
  on_both([&](int64_t r) {
    expect_gathers(r, mixed, "after the kept writes");
    opts[r]->release_parameters(/*keep_writes=*/false);
  });
  // load_weights (a resume) writes the masters, and the bf16 shards follow.
  const std::vector<at::Tensor> values{ref_params[0] * 2 + 1, ref_params[1], ref_params[2]};
  on_both([&](int64_t r) {
    std::vector<std::pair<std::string, at::Tensor>> named;
    for (size_t i = 0; i < params[r].size(); ++i) named.emplace_back(fmt::format("p{}", i), params[r][i]);
    opts[r]->load_weights(named, values);
  });
  expect_weight_shards_piece_together(opts, params, values);
  on_both([&](int64_t r) {
    expect_gathers(r, values[0], "after load_weights");
    opts[r]->release_parameters(/*keep_writes=*/false);
  });
}

}  // namespace
}  // namespace frugal::dist::zero_adamw_test
