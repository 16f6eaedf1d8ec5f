// Two ranks of a c10d Gloo group inside one test process, on two threads (data_parallel_test.cpp,
// zero_adamw_test.cpp).
#pragma once

#include <torch/torch.h>

#include <future>
#include <memory>
#include <vector>

#include "frugal/dist/process_group.h"

namespace frugal::dist::two_threads {

// Both ranks of a 2-process group, connected concurrently (connect blocks until all arrive).
inline std::vector<std::shared_ptr<ProcessGroup>> two_ranks(int64_t port) {
  DistConfig c;
  c.timeout_s = 30;
  auto connect_rank = [&](int64_t rank) {
    DistEnv e;
    e.rank = rank;
    e.world_size = 2;
    e.master_port = port;
    e.launcher = "test";
    return connect(e, c, c10::Device(c10::kCPU));
  };
  auto r1 = std::async(std::launch::async, connect_rank, 1);
  auto g0 = connect_rank(0);
  return {g0, r1.get()};
}

// Runs f(rank) on two threads and waits for both.
template <class F>
void on_both(F f) {
  auto other = std::async(std::launch::async, f, 1);
  f(0);
  other.get();
}

inline std::vector<at::Tensor> make_params(uint64_t seed) {
  torch::manual_seed(seed);
  // 7 x 5 (decayed) + 5 + 3 (not): odd sizes so the ZeRO chunks need padding.
  return {torch::randn({7, 5}).requires_grad_(), torch::randn({5}).requires_grad_(),
          torch::randn({3}).requires_grad_()};
}

// Random gradients drawn with `seed`, copied into the reference parameters' gradients and into
// each rank's copy of them (each parameter's .grad must exist, as an optimizer's flat view).
inline void give_same_gradients(uint64_t seed, const std::vector<at::Tensor>& ref,
                                const std::vector<std::vector<at::Tensor>>& ranks) {
  torch::manual_seed(seed);
  std::vector<at::Tensor> grads;
  for (const auto& p : ref) grads.push_back(torch::randn(p.sizes()));
  torch::NoGradGuard ng;
  for (size_t i = 0; i < grads.size(); ++i) {
    ref[i].mutable_grad().copy_(grads[i]);
    for (const auto& params : ranks) params[i].mutable_grad().copy_(grads[i]);
  }
}

}  // namespace frugal::dist::two_threads
