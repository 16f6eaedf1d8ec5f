// Memory accounting. RSS high-water marks (VmHWM) cannot show per-phase peaks (glibc keeps freed
// heap), so frugal can install a counting CPU allocator that tracks live and peak tensor bytes
// exactly. It wraps LibTorch's default CPU allocator and keeps the DataPtr context equal to the
// data pointer, as ATen's raw_allocate requires.
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

// Process resident-set high-water mark (VmHWM) and current RSS, in bytes; 0 if unknown.
int64_t rss_peak_bytes();
int64_t rss_now_bytes();

}  // namespace frugal
