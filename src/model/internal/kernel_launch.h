// What every wrapper of frugal's CUDA kernels needs at a launch (kernel_ops.cpp, fused_gelu.cpp,
// fused_llama.cpp, fp8.cpp): the kernels' dtype of a tensor, the stream its kernels queue on, and
// the check of a launch's status. Only in a build with the kernels (FRUGAL_HAVE_KERNELS).
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/cuda/CUDAContext.h>

#include "kernels/kernels.h"

namespace frugal {

// fp32 or bf16 (the kernels take no other; callers check kernel-eligible dtypes first).
inline kernels::Dtype kernel_dtype_of(at::ScalarType t) {
  return t == at::kBFloat16 ? kernels::Dtype::kBf16 : kernels::Dtype::kF32;
}

// The current stream of `t`'s GPU. Each launch runs under a CUDAGuard of that device (a
// data-parallel rank's tensors live on its own GPU, which need not be the thread's current one).
inline void* kernel_stream(const at::Tensor& t) { return at::cuda::getCurrentCUDAStream(t.device().index()).stream(); }

inline void check_kernel_launch(int status, const char* what) {
  TORCH_CHECK(status == 0, "frugal kernel ", what, " failed to launch: ", kernels::kernel_error_text(status));
}

}  // namespace frugal
