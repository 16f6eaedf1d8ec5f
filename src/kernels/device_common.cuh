// What the .cu files of src/kernels share: element conversion by type (float, or bfloat16 held as
// its bits in a uint16_t), 16-byte packs, warp and block reductions, and the launch status.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/kernel_math.h"
#include "kernels/kernels.h"

namespace frugal::kernels {

using bf16 = uint16_t;  // a bfloat16 as its bits (kernel_math.h converts)

__device__ __forceinline__ float to_f(float v) { return v; }
__device__ __forceinline__ float to_f(bf16 v) { return bf16_bits_to_float(v); }
template <typename T>
__device__ __forceinline__ T from_f(float v);
template <>
__device__ __forceinline__ float from_f<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ bf16 from_f<bf16>(float v) {
  return float_to_bf16_bits(v);
}

// 16 bytes of T: one 128-bit load or store (the pointer must be 16-byte aligned).
template <typename T>
struct alignas(16) Pack {
  static constexpr int kSize = 16 / static_cast<int>(sizeof(T));
  T v[kSize];
};

template <typename T>
__device__ __forceinline__ Pack<T> load_pack(const T* p) {
  return *reinterpret_cast<const Pack<T>*>(p);
}
template <typename T>
__device__ __forceinline__ void store_pack(T* p, const Pack<T>& v) {
  *reinterpret_cast<Pack<T>*>(p) = v;
}

inline bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ SoftmaxState warp_softmax_merge(SoftmaxState s) {
  for (int o = 16; o > 0; o >>= 1) {
    SoftmaxState other{__shfl_xor_sync(0xffffffffu, s.max, o), __shfl_xor_sync(0xffffffffu, s.sum, o)};
    s = softmax_merge(s, other);
  }
  return s;
}

// Merges every thread's state of the block (blockDim.x a multiple of 32); all threads get the result.
__device__ __forceinline__ SoftmaxState block_softmax_merge(SoftmaxState s) {
  __shared__ SoftmaxState partial[32];
  __shared__ SoftmaxState total;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  s = warp_softmax_merge(s);
  if (lane == 0) partial[warp] = s;
  __syncthreads();
  if (warp == 0) {
    SoftmaxState t = lane < warps ? partial[lane] : softmax_empty();
    t = warp_softmax_merge(t);
    if (lane == 0) total = t;
  }
  __syncthreads();
  return total;
}

// The sum of v over the block (blockDim.x a multiple of 32, at most 1024); every thread gets it.
__device__ __forceinline__ float block_sum(float v) {
  __shared__ float partial[32];
  __shared__ float total;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = warp_sum(v);
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (warp == 0) {
    float t = lane < warps ? partial[lane] : 0.0f;
    t = warp_sum(t);
    if (lane == 0) total = t;
  }
  __syncthreads();
  return total;
}

// The last step of a column sum taken over groups of rows: out[c] = the groups' partial sums
// partial[g * C + c], added in group order (the same bits on every run). One thread a column,
// blocks of kThreads.
template <int kThreads>
__global__ void __launch_bounds__(kThreads)
    sum_row_groups_kernel(float* out, const float* partial, int64_t groups, int64_t C) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (c >= C) return;
  float s = 0.0f;
  for (int64_t g = 0; g < groups; ++g) s += partial[g * C + c];
  out[c] = s;
}

// The status of the launch just queued: 0, or the CUDA error code.
inline int launch_status() { return static_cast<int>(cudaGetLastError()); }

}  // namespace frugal::kernels
