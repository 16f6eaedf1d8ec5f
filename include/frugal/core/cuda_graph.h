// A CUDA graph of the device work one host function queues (at::cuda::CUDAGraph), for the
// training step (train.cuda_graphs, train/train_step.h): the function runs once on the host while
// a side stream records its kernels, in the caching allocator's private pool for the graph, and
// each replay() then launches all of them at once. Nothing is executed by the capture itself.
//
// During the capture, autocast's cast cache is off (a cached cast would be freed at the region's
// end while the graph still writes it), and the default CUDA generator is registered with the graph,
// so dropout draws fresh numbers on each replay.
//
// What a captured function must not do: wait for the device (.item(), a copy to the host), allocate
// on the host from device values, or take decisions on the host that later steps would change; the
// capture then fails and capture() throws (the graph stays empty and the caller runs eagerly).
#pragma once

#include <c10/core/Device.h>

#include <functional>
#include <memory>

namespace frugal::device {

class CudaGraph {
 public:
  CudaGraph();
  ~CudaGraph();
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;

  // Captures `body`'s work on GPU `device`; throws what the capture threw (e.g. an operation not
  // permitted while capturing, out of memory), leaving the graph empty.
  void capture(const std::function<void()>& body, c10::Device device);
  bool captured() const;
  // Launches the captured work on the current stream of the capture's GPU.
  void replay();

  // Tests only: capture() keeps `body` and replay() runs it on the host, so the code that prepares
  // a graph's inputs and reads its outputs runs on a CPU.
  static void emulate_for_tests(bool on);
  static bool emulated_for_tests();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace frugal::device
