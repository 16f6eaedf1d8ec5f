// ZeRO-1 sharded AdamW; see zero_adamw.h.
#include "frugal/dist/zero_adamw.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "frugal/core/errors.h"
#include "frugal/core/wall_clock.h"

namespace frugal::dist {

ZeroAdamW::ZeroAdamW(std::vector<FusedAdamW::Group> groups, AdamWHyper hyper, std::shared_ptr<ProcessGroup> pg,
                     bool shard_gradients, bool offload)
    : hyper_(hyper), pg_(std::move(pg)), shard_gradients_(shard_gradients) {
  c10::NoGradGuard no_grad;
  const int64_t world = pg_->world_size();
  for (auto& g : groups) {
    if (g.params.empty()) continue;
    const auto opts = g.params.front().options();
    Flat f;
    f.weight_decay = g.weight_decay;
    for (const auto& p : g.params) f.numel += p.numel();
    f.chunk = (f.numel + world - 1) / world;
    f.params = at::zeros({f.chunk * world}, opts);  // the padding stays zero: AdamW keeps 0 at 0
    f.grads = at::zeros({shard_gradients_ ? f.chunk : f.chunk * world}, opts);
    int64_t off = 0;
    for (auto& p : g.params) {
      const int64_t n = p.numel();
      at::Tensor pv = f.params.narrow(0, off, n).view(p.sizes());
      pv.copy_(p);
      p.set_data(pv);
      if (shard_gradients_) {
        p.mutable_grad().reset();  // autograd's own gradient, reduced and freed in backward
      } else {
        p.mutable_grad() = f.grads.narrow(0, off, n).view(p.sizes());
      }
      off += n;
    }
    f.state = AdamWState(f.chunk, opts, offload);
    flats_.push_back(std::move(f));
  }
  if (!flats_.empty() && !offload) device_.init(flats_.front().params.device(), hyper_.lr, steps_);
}

void ZeroAdamW::zero_grad() {
  for (auto& f : flats_) f.grads.zero_();
}

void ZeroAdamW::step() {
  c10::NoGradGuard no_grad;
  ++steps_;
  device_.advance();
  const int64_t rank = pg_->rank(), world = pg_->world_size();
  for (auto& f : flats_) {
    at::Tensor p = f.params.narrow(0, rank * f.chunk, f.chunk);
    at::Tensor g = shard_gradients_ ? f.grads : f.grads.narrow(0, rank * f.chunk, f.chunk);
    // FusedAdamW's update, on this rank's chunk.
    f.state.update(p, g, hyper_, f.weight_decay, steps_, {}, &device_);
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<at::Tensor> out;
    for (int64_t r = 0; r < world; ++r) out.push_back(f.params.narrow(0, r * f.chunk, f.chunk));
    pg_->allgather(p.clone(), out);  // a copy: the input must not alias an output
    gather_s_ += seconds_since(t0);
  }
}

std::vector<at::Tensor> ZeroAdamW::grads() {
  std::vector<at::Tensor> out;
  for (const auto& f : flats_) out.push_back(f.grads);
  return out;
}

int64_t ZeroAdamW::group_of(const c10::StorageImpl* storage) const {
  for (size_t i = 0; i < flats_.size(); ++i)
    if (flats_[i].params.storage().unsafeGetStorageImpl() == storage) return static_cast<int64_t>(i);
  return -1;
}

void ZeroAdamW::accumulate_shard(int64_t group, int64_t lo, const at::Tensor& values) {
  c10::NoGradGuard no_grad;
  Flat& f = flats_[static_cast<size_t>(group)];
  const int64_t own_lo = pg_->rank() * f.chunk;
  const int64_t a = std::max(lo, own_lo), b = std::min(lo + values.numel(), own_lo + f.chunk);
  if (a >= b) return;
  f.grads.narrow(0, a - own_lo, b - a).add_(values.narrow(0, a - lo, b - a));
}

int64_t ZeroAdamW::gradient_bytes() const {
  int64_t n = 0;
  for (const auto& f : flats_) n += f.grads.numel() * static_cast<int64_t>(f.grads.element_size());
  return n;
}

std::vector<std::pair<std::string, at::Tensor>> ZeroAdamW::state_tensors() {
  std::vector<std::pair<std::string, at::Tensor>> out;
  const int64_t world = pg_->world_size();
  for (size_t i = 0; i < flats_.size(); ++i) {
    const Flat& f = flats_[i];
    for (const auto& [name, shard] : {std::pair<const char*, at::Tensor>{"exp_avg", f.state.exp_avg},
                                      std::pair<const char*, at::Tensor>{"exp_avg_sq", f.state.exp_avg_sq}}) {
      // Gathered on the parameters' device (an offloaded shard is a host tensor, which NCCL cannot send).
      at::Tensor full = at::empty({f.chunk * world}, f.params.options());
      std::vector<at::Tensor> parts;
      for (int64_t r = 0; r < world; ++r) parts.push_back(full.narrow(0, r * f.chunk, f.chunk));
      pg_->allgather(shard.to(f.params.device()), parts);
      out.emplace_back("g" + std::to_string(i) + "." + name, full.narrow(0, 0, f.numel));
    }
  }
  return out;
}

void ZeroAdamW::load_state(const std::vector<std::pair<std::string, at::Tensor>>& tensors, int64_t steps) {
  c10::NoGradGuard no_grad;
  const int64_t rank = pg_->rank();
  for (size_t i = 0; i < flats_.size(); ++i) {
    Flat& f = flats_[i];
    for (auto* dst : {&f.state.exp_avg, &f.state.exp_avg_sq}) {
      const std::string name = "g" + std::to_string(i) + (dst == &f.state.exp_avg ? ".exp_avg" : ".exp_avg_sq");
      const at::Tensor* src = nullptr;
      for (const auto& [n, t] : tensors)
        if (n == name) src = &t;
      if (!src || src->numel() != f.numel)
        throw CheckpointError("optimizer state '" + name +
                              "' is missing or has the wrong size; the model or its parameter "
                              "grouping differs from the checkpoint's");
      dst->zero_();
      const int64_t lo = std::min(rank * f.chunk, f.numel);
      const int64_t n = std::min(f.numel, lo + f.chunk) - lo;
      if (n > 0) dst->narrow(0, 0, n).copy_(src->reshape({-1}).narrow(0, lo, n));
    }
  }
  steps_ = steps;
  device_.set_steps(steps);
}

int64_t ZeroAdamW::host_state_bytes() const {
  int64_t n = 0;
  for (const auto& f : flats_) n += f.state.host_bytes();
  return n;
}

int64_t ZeroAdamW::state_bytes() const {
  int64_t n = 0;
  for (const auto& f : flats_) n += f.state.bytes();
  return n;
}

}  // namespace frugal::dist
