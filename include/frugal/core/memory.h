// Memory accounting. RSS high-water marks (VmHWM) cannot show per-phase peaks (glibc keeps freed
// heap), so frugal can install a counting CPU allocator that tracks live and peak tensor bytes
// exactly. It wraps LibTorch's default CPU allocator and keeps the DataPtr context equal to the
// data pointer, as ATen's raw_allocate requires.
//
// The same allocator enforces [memory] limit_mb: an allocation that would take live tensor bytes
// above the limit throws compat::OutOfMemoryError (c10::OutOfMemoryError), the error the CUDA
// allocator throws when VRAM runs out, so CPU runs exercise the same out-of-memory paths (the
// batch-size finder's probe, the trainer's micro-batch back-off). Tests use it to inject
// allocator failures.
#pragma once

#include <cstdint>

namespace frugal {

// Installs the counting allocator for CPU tensors (idempotent). Tensors allocated before the
// call are not counted.
void install_counting_allocator();
bool counting_allocator_installed();
int64_t tensor_bytes_now();
int64_t tensor_bytes_peak();
void reset_tensor_bytes_peak();

// [memory] reuse_freed: makes glibc's malloc keep memory freed by tensors in the process: blocks
// up to 32 MiB come from the heap instead of their own mmap, and the heap is never trimmed, so a
// tensor of a size seen before reuses pages already mapped instead of faulting in fresh zeroed
// ones. Process-wide, for the rest of the process (malloc settings cannot be put back). Returns
// false, changing nothing, where the C library is not glibc.
bool keep_freed_memory_in_process();

// Live tensor bytes allowed by the counting allocator; 0 = no limit. Thread-safe. The allocator
// must be installed for the limit to act.
void set_tensor_bytes_limit(int64_t bytes);
int64_t tensor_bytes_limit();

// Sets the limit for the scope of the guard and restores the previous one after.
class TensorBytesLimitGuard {
 public:
  explicit TensorBytesLimitGuard(int64_t bytes) : prev_(tensor_bytes_limit()) { set_tensor_bytes_limit(bytes); }
  ~TensorBytesLimitGuard() { set_tensor_bytes_limit(prev_); }
  TensorBytesLimitGuard(const TensorBytesLimitGuard&) = delete;
  TensorBytesLimitGuard& operator=(const TensorBytesLimitGuard&) = delete;

 private:
  int64_t prev_;
};

// The memory limit of this process's cgroup (v2 memory.max, else v1 memory.limit_in_bytes); 0
// when there is none.
int64_t cgroup_memory_limit_bytes();

// The tensor-byte budget [memory] limit_mb stands for: limit_mb > 0 -> that many MiB; 0 -> the
// cgroup limit minus what the process holds outside tensors now (RSS - live tensor bytes), or 0
// (no limit) without a cgroup limit.
int64_t resolve_tensor_bytes_limit(int64_t limit_mb);

// Process resident-set high-water mark (VmHWM) and current RSS, in bytes; 0 if unknown.
int64_t rss_peak_bytes();
int64_t rss_now_bytes();

}  // namespace frugal
