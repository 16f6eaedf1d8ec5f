// The fp8 cast of precision.mode = "fp8" (model/fp8.h): scale from a device amax, multiply, round
// to e4m3 or e5m2 with saturation, one pass. See kernels.h.
#include <cuda_fp8.h>

#include <algorithm>

#include "kernels/device_common.cuh"

namespace frugal::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int kPerThread = 8;  // elements a thread converts per loop trip

// The scale of torchao's amax_to_scale: max / max(amax, 1e-12), in double, kept as float. A NaN
// amax stays NaN, as clamp_min keeps it (fmax would drop it).
__device__ __forceinline__ float scale_from(const float* amax, double format_max) {
  const double a = static_cast<double>(*amax);
  return static_cast<float>(format_max / (a < 1e-12 ? 1e-12 : a));
}

template <typename T, __nv_fp8_interpretation_t F>
__global__ void __launch_bounds__(kThreads) fp8_cast_kernel(__nv_fp8_storage_t* out, const T* x, int64_t n,
                                                            const float* amax, double format_max, float* scale) {
  const float s = scale_from(amax, format_max);
  if (blockIdx.x == 0 && threadIdx.x == 0 && scale != nullptr) *scale = s;
  // A block's trip covers kThreads x kPerThread consecutive elements, element k of each thread
  // kThreads apart: every load and store of a warp is one contiguous run.
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads * kPerThread;
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * kThreads * kPerThread + threadIdx.x; base < n;
       base += stride) {
#pragma unroll
    for (int k = 0; k < kPerThread; ++k) {
      const int64_t i = base + static_cast<int64_t>(k) * kThreads;
      // The product rounded to float first, as the host's (x.float() * scale) is; then the
      // nearest value of the format, ties to even, saturated to its largest finite value.
      if (i < n) out[i] = __nv_cvt_float_to_fp8(__fmul_rn(to_f(x[i]), s), __NV_SATFINITE, F);
    }
  }
}

template <typename T>
int cast_typed(void* out, const T* x, int64_t n, bool e5m2, const float* amax, float* scale, cudaStream_t stream) {
  if (n == 0) return 0;
  const int64_t per_block = static_cast<int64_t>(kThreads) * kPerThread;
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((n + per_block - 1) / per_block, 65535));
  auto* o = static_cast<__nv_fp8_storage_t*>(out);
  if (e5m2)
    fp8_cast_kernel<T, __NV_E5M2><<<blocks, kThreads, 0, stream>>>(o, x, n, amax, 57344.0, scale);
  else
    fp8_cast_kernel<T, __NV_E4M3><<<blocks, kThreads, 0, stream>>>(o, x, n, amax, 448.0, scale);
  return launch_status();
}

}  // namespace

int fp8_scaled_cast(void* out, const void* x, Dtype xt, int64_t n, bool e5m2, const float* amax, float* scale,
                    void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  if (xt == Dtype::kBf16) return cast_typed(out, static_cast<const bf16*>(x), n, e5m2, amax, scale, s);
  return cast_typed(out, static_cast<const float*>(x), n, e5m2, amax, scale, s);
}

}  // namespace frugal::kernels
