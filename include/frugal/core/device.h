// What this LibTorch build and this machine offer beyond the CPU: whether CUDA (and NCCL) were
// compiled in, which GPUs are visible, their memory figures, random-number state and timing
// events. The CUDA-specific calls live in src/core/device.cpp behind FRUGAL_HAVE_CUDA (set by
// CMake when LibTorch was built with CUDA); everything here answers sensibly on a CPU-only build or
// a machine without a GPU (counts 0, empty lists, timers that report nothing).
#pragma once

#include <c10/core/Device.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace frugal::device {

struct BuildInfo {
  std::string torch_version;   // e.g. "2.11.0"
  bool cuda_compiled = false;  // frugal and LibTorch both built with CUDA
  std::string cuda_version;    // the CUDA runtime frugal was compiled against ("13.0"), or ""
  bool nccl_compiled = false;  // the c10d NCCL process group is in the build
  int cudnn_version = 0;       // LibTorch's cuDNN (e.g. 91900), 0 without
};
BuildInfo build_info();

// GPUs this process can use (0 on a CPU-only build or without a driver/GPU).
int cuda_device_count();
bool cuda_available();

struct GpuInfo {
  int index = 0;
  std::string name;          // "NVIDIA H100 80GB HBM3"
  int major = 0, minor = 0;  // compute capability
  int64_t total_bytes = 0;
  int multiprocessors = 0;
};
std::vector<GpuInfo> cuda_devices();

// Tensor memory of the CUDA caching allocator on `device` (a CUDA device): bytes held by live
// tensors now, their peak since the last reset, and the bytes the allocator has reserved from the
// driver (peak). All 0 for a non-CUDA device.
struct MemoryFigures {
  int64_t allocated_now = 0;
  int64_t allocated_peak = 0;
  int64_t reserved_peak = 0;
};
MemoryFigures cuda_memory(c10::Device device);
void reset_cuda_peak(c10::Device device);
// Returns the caching allocator's unused blocks to the driver (after an out-of-memory back-off).
void cuda_empty_cache();

// Waits for all work queued on `device` (no-op on the CPU).
void synchronize(c10::Device device);

// Page-locked host memory of exactly `bytes` (cudaHostAlloc; PyTorch's pinned allocator would round
// the size up to a power of two), released when its last owner lets go. Copies from a GPU into it
// run at the link's speed and need not block the host. Null on a build without CUDA, on a machine
// without a GPU, or when the driver refuses (the caller then uses pageable memory).
std::shared_ptr<void> pinned_host_memory(int64_t bytes);

// Random-number state of every visible GPU's default generator, as bytes (one entry per device,
// in index order); restoring takes as many entries as there are devices on both sides.
std::vector<std::vector<uint8_t>> cuda_rng_states();
void set_cuda_rng_states(const std::vector<std::vector<uint8_t>>& states);

// Deterministic GPU kernels (cuDNN deterministic and benchmark off, deterministic ATen algorithms,
// CUBLAS_WORKSPACE_CONFIG for cuBLAS) or the fastest ones. Must be called before the first CUDA
// work of the process for the cuBLAS setting to act.
void set_deterministic(bool on);
// TF32 tensor-core math for fp32 matmuls and convolutions on Ampere and newer.
void set_tf32(bool on);

// Device time between points of the step on a CUDA stream (CUDA events): mark() records an event
// on the current stream; wait() blocks the host until an event has completed, after which
// seconds_between() reads the time between it and any earlier event. On the CPU, no events.
class EventTimer {
 public:
  explicit EventTimer(c10::Device device);
  ~EventTimer();
  EventTimer(const EventTimer&) = delete;
  EventTimer& operator=(const EventTimer&) = delete;

  bool active() const { return active_; }
  // Records an event; returns its index (-1 when inactive).
  int mark();
  // Events recorded since the last clear().
  int recorded() const;
  // Blocks until event b has completed (and every event recorded before it on the stream).
  void wait(int b);
  // Seconds of device time between events a and b (b after a, and waited for).
  double seconds_between(int a, int b) const;
  // Forgets recorded events (keeps their storage for reuse).
  void clear();
  // wait() calls so far: each is one host synchronisation (a fake one under the fake clock).
  int64_t waits() const { return waits_; }

  // Tests only: timers made for the CPU while this is on are active, and their events are ticks
  // of a fake clock (uneven, counted over the timer's life), so the logic that reads device
  // times runs without a GPU.
  static void fake_clock_for_tests(bool on);

 private:
  struct Impl;
  bool fake_ = false;
  bool active_ = false;
  int64_t fake_used_ = 0;
  int64_t fake_ticks_ = 0;
  std::vector<double> fake_ms_;
  int64_t waits_ = 0;
  std::unique_ptr<Impl> impl_;
};

}  // namespace frugal::device
