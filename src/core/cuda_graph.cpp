// CUDA graphs; see cuda_graph.h.
#include "frugal/core/cuda_graph.h"

#include <ATen/autocast_mode.h>
#include <c10/util/Exception.h>

#include <atomic>
#include <stdexcept>
#include <string>

#include "frugal/core/device.h"
#include "frugal_build_config.h"  // FRUGAL_HAVE_CUDA

#if FRUGAL_HAVE_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#endif

namespace frugal::device {
namespace {
std::atomic<bool> emulated{false};
}  // namespace

struct CudaGraph::Impl {
  std::function<void()> emulated_body;  // tests: the body replay() runs on the host
#if FRUGAL_HAVE_CUDA
  std::unique_ptr<at::cuda::CUDAGraph> graph;
  c10::Device device{c10::kCUDA, 0};
#endif
};

CudaGraph::CudaGraph() : impl_(std::make_unique<Impl>()) {}
CudaGraph::~CudaGraph() = default;

void CudaGraph::emulate_for_tests(bool on) { emulated = on; }
bool CudaGraph::emulated_for_tests() { return emulated.load(); }

bool CudaGraph::captured() const {
#if FRUGAL_HAVE_CUDA
  if (impl_->graph) return true;
#endif
  return static_cast<bool>(impl_->emulated_body);
}

void CudaGraph::run_and_capture(const std::function<void()>& body, c10::Device device) {
  if (emulated.load()) {
    body();
    impl_->emulated_body = body;
    return;
  }
#if FRUGAL_HAVE_CUDA
  TORCH_CHECK(device.is_cuda(), "a CUDA graph captures work on a GPU, not on ", device);
  const c10::cuda::CUDAGuard device_guard(device);
  auto graph = std::make_unique<at::cuda::CUDAGraph>();
  // A side stream that starts after the work queued so far, as PyTorch's torch.cuda.graph uses;
  // the current stream's later work (the replays) is ordered after it by the synchronisations.
  const c10::cuda::CUDAStream current = c10::cuda::getCurrentCUDAStream(device.index());
  const c10::cuda::CUDAStream side = c10::cuda::getStreamFromPool(false, device.index());
  current.synchronize();
  {
    const c10::cuda::CUDAStreamGuard stream_guard(side);
    body();  // the step itself, and every lazy per-stream allocation outside the capture
  }
  side.synchronize();
  cuda_empty_cache();  // the eager run's cached blocks back to the device before the pool fills
  const bool cache = at::autocast::is_autocast_cache_enabled();
  at::autocast::set_autocast_cache_enabled(false);
  try {
    const c10::cuda::CUDAStreamGuard stream_guard(side);
    // Thread-local: the loader's threads may pin host memory meanwhile; the autograd thread's
    // kernels still land in the graph (capture follows the stream, not the thread).
    graph->capture_begin({0, 0}, cudaStreamCaptureModeThreadLocal);
    try {
      body();
    } catch (...) {
      try {
        graph->capture_end();  // ends the recording; its own error is secondary
      } catch (...) {
      }
      throw;
    }
    graph->capture_end();
  } catch (const std::exception& e) {
    at::autocast::set_autocast_cache_enabled(cache);
    const std::string what = e.what();
    throw CaptureFailed(what.substr(0, what.find('\n')));
  }
  at::autocast::set_autocast_cache_enabled(cache);
  side.synchronize();
  impl_->graph = std::move(graph);
  impl_->device = device;
#else
  (void)body;
  throw std::runtime_error("this build of frugal has no CUDA, so no CUDA graphs (device " + device.str() + ")");
#endif
}

void CudaGraph::replay() {
  if (impl_->emulated_body) {
    impl_->emulated_body();
    return;
  }
#if FRUGAL_HAVE_CUDA
  TORCH_CHECK(impl_->graph, "CudaGraph::replay before a capture");
  const c10::cuda::CUDAGuard device_guard(impl_->device);
  impl_->graph->replay();
#else
  throw std::runtime_error("CudaGraph::replay before a capture");
#endif
}

}  // namespace frugal::device
