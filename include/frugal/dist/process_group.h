// The communication layer of a multi-process run: a thin, frugal-shaped face over LibTorch's
// c10d (a TCPStore rendezvous at MASTER_ADDR:MASTER_PORT, then ProcessGroupGloo on CPU or
// ProcessGroupNCCL on CUDA where LibTorch was built with it). The rest of src/dist talks to this
// interface only, so the backend choice stays in one file (process_group.cpp).
//
// Every call that waits on peers is bounded by dist.timeout_s. A peer that never arrives, exits or
// stops answering turns into DistError on this rank, saying which rank, what was waited for and
// what to do — never a silent hang.
//
// Collectives must be issued in the same order on every rank (c10d's contract). Not thread-safe,
// except that the async all-reduce may be started from autograd's thread while the trainer
// thread waits in backward().
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <memory>
#include <string>
#include <vector>

#include "frugal/core/config.h"
#include "frugal/dist/env.h"

namespace frugal::dist {

// A collective in flight. wait() blocks until it finished and throws DistError on failure.
class Pending {
 public:
  virtual ~Pending() = default;
  virtual void wait() = 0;
};

class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;
  virtual int64_t rank() const = 0;
  virtual int64_t world_size() const = 0;
  virtual std::string backend() const = 0;  // "gloo" or "nccl"

  // t = the element-wise sum of every rank's t, in place (REQUIRES: contiguous).
  virtual std::unique_ptr<Pending> allreduce_sum(at::Tensor t) = 0;
  // On rank `root`: t = the element-wise sum of every rank's t, in place; the other ranks' t is
  // left unspecified (REQUIRES: contiguous). ZeRO-2's gradients go to their owner this way.
  virtual std::unique_ptr<Pending> reduce_sum(at::Tensor t, int64_t root) = 0;
  // t = the element-wise maximum over ranks, in place; blocks.
  virtual void allreduce_max(at::Tensor t) = 0;
  // out[r] = rank r's `in`, for every r (REQUIRES: out.size() == world_size, equal shapes); blocks.
  // Like broadcast, it moves the version counter of what it wrote, as ATen's in-place operations
  // do (c10d's own do not), so that what keeps a copy of a parameter (model/working_weights.h)
  // sees the write.
  virtual void allgather(const at::Tensor& in, std::vector<at::Tensor> out) = 0;
  // The same, started: `out` holds the result once the returned collective's wait() returned, and
  // no version counter moves (ZeRO-3 gathers into tensors of its own). `in` and `out` must stay
  // untouched until then.
  virtual std::unique_ptr<Pending> allgather_async(const at::Tensor& in, std::vector<at::Tensor> out) = 0;
  // t = rank `root`'s t; blocks.
  virtual void broadcast(at::Tensor t, int64_t root) = 0;
  // Small strings through the rendezvous store (stop reasons, data cursors).
  virtual void store_set(const std::string& key, const std::string& value) = 0;
  virtual std::string store_get(const std::string& key) = 0;
  virtual bool store_has(const std::string& key) = 0;
  // Removes `key` (absent: nothing happens), so that a long run's exchanges do not pile up in rank
  // 0's store.
  virtual void store_delete(const std::string& key) = 0;
};

// Rendezvous with every rank of `env` and build the process group for tensors on `device`.
// Throws DistError when a peer does not arrive within config.timeout_s, ConfigError for a backend
// this LibTorch lacks.
std::shared_ptr<ProcessGroup> connect(const DistEnv& env, const DistConfig& config, c10::Device device);

// Whether this LibTorch build has the NCCL process group (CUDA builds with USE_NCCL).
bool nccl_available();

}  // namespace frugal::dist
