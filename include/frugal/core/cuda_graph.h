// A CUDA graph of the device work one host function queues (at::cuda::CUDAGraph), for the
// training step (train.cuda_graphs, train/train_step.h). run_and_capture() runs the function once
// on a side stream (real work: the step it is called for), so that whatever it creates lazily per
// stream (cuBLAS workspaces, kernel scratch) exists before the capture; empties the allocator's
// cache; then runs it again while the stream records its kernels into the graph, in the caching
// allocator's private pool for the graph (the recording executes nothing). Each replay() then
// launches all of them at once.
//
// During the capture, autocast's cast cache is off (a cached cast would be freed at the region's
// end while the graph still writes it). Random operations (dropout) register the default CUDA
// generator with the graph as they are captured, so each replay draws fresh numbers.
//
// What a captured function must not do: wait for the device (.item(), a copy to the host or from
// pageable memory), or take decisions on the host that later steps would change.
#pragma once

#include <c10/core/Device.h>

#include <functional>
#include <memory>
#include <stdexcept>

namespace frugal::device {

// The recording failed after it began: the allocator's pool for the graph may stay claimed, so the
// process should not go on with CUDA graphs (the caller stops the run with the reason).
class CaptureFailed : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class CudaGraph {
 public:
  CudaGraph();
  ~CudaGraph();
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;

  // Runs `body` once on GPU `device` (what it throws then propagates as thrown; nothing is
  // captured), then captures it; a failure of the capture throws CaptureFailed with the cause.
  void run_and_capture(const std::function<void()>& body, c10::Device device);
  bool captured() const;
  // Launches the captured work on the current stream of the capture's GPU.
  void replay();

  // Tests only: run_and_capture() runs `body` once and keeps it, and replay() runs it on the host,
  // so the code that prepares a graph's inputs and reads its outputs runs on a CPU.
  static void emulate_for_tests(bool on);
  static bool emulated_for_tests();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace frugal::device
