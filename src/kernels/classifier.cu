// The fused classifier: softmax, cross-entropy and the logits' gradient straight from the head's
// bf16 (or fp32) logits, without a float copy of them and without writing probabilities
// (llm.c's fused_classifier, split at the autograd boundary: the forward keeps each row's
// logsumexp, the backward reads it and writes the gradient over the logits). See kernels.h.
#include "kernels/device_common.cuh"

namespace frugal::kernels {
namespace {

// One block per row. kVec: the row stride is a multiple of the pack and the buffers are 16-byte
// aligned, so a thread reads 16 bytes at a time (the padded head's widths are multiples of 64).
template <typename T, bool kVec>
__global__ void classifier_forward_kernel(const T* logits, int64_t vocab, int64_t ld, const int64_t* targets,
                                          int64_t ignore_index, float* lse, float* loss) {
  const int64_t r = blockIdx.x;
  const T* row = logits + r * ld;
  SoftmaxState s = softmax_empty();
  if (kVec) {
    constexpr int P = Pack<T>::kSize;
    const int64_t packs = (vocab + P - 1) / P;
    for (int64_t i = threadIdx.x; i < packs; i += blockDim.x) {
      const Pack<T> p = load_pack(row + i * P);
#pragma unroll
      for (int k = 0; k < P; ++k)
        if (i * P + k < vocab) s = softmax_add(s, to_f(p.v[k]));
    }
  } else {
    for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) s = softmax_add(s, to_f(row[j]));
  }
  s = block_softmax_merge(s);
  if (threadIdx.x == 0) {
    const float l = softmax_logsumexp(s);
    const int64_t t = targets[r];
    lse[r] = l;
    if (t == ignore_index) {
      loss[r] = 0.0f;
    } else if (t < 0 || t >= vocab) {
      loss[r] = NAN;
    } else {
      loss[r] = l - to_f(row[t]);
    }
  }
}

template <typename T, bool kVec>
__global__ void classifier_backward_kernel(T* dlogits, const T* logits, int64_t vocab, int64_t ld,
                                           const int64_t* targets, int64_t ignore_index, const float* lse,
                                           const float* grad, const float* count) {
  const int64_t r = blockIdx.x;
  const int64_t t = targets[r];
  const bool ignored = t == ignore_index;
  const float scale = ignored ? 0.0f : grad[0] / fmaxf(count[0], 1.0f);
  const float l = lse[r];
  const T* in = logits + r * ld;
  T* out = dlogits + r * ld;
  if (kVec) {
    constexpr int P = Pack<T>::kSize;
    const int64_t packs = ld / P;
    for (int64_t i = threadIdx.x; i < packs; i += blockDim.x) {
      Pack<T> p;
      if (!ignored && i * P < vocab) p = load_pack(in + i * P);
#pragma unroll
      for (int k = 0; k < P; ++k) {
        const int64_t j = i * P + k;
        const float d = (!ignored && j < vocab) ? classifier_dlogit(to_f(p.v[k]), l, j == t, scale) : 0.0f;
        p.v[k] = from_f<T>(d);
      }
      store_pack(out + i * P, p);
    }
  } else {
    for (int64_t j = threadIdx.x; j < ld; j += blockDim.x) {
      const float d = (!ignored && j < vocab) ? classifier_dlogit(to_f(in[j]), l, j == t, scale) : 0.0f;
      out[j] = from_f<T>(d);
    }
  }
}

// Threads per row: enough for the row's packs, a multiple of 32, at most 1024.
int row_threads(int64_t elements) {
  const int64_t warps = (elements + 31) / 32;
  return static_cast<int>(warps >= 32 ? 1024 : (warps < 1 ? 32 : warps * 32));
}

template <typename T>
int forward_typed(const T* logits, int64_t rows, int64_t vocab, int64_t ld, const int64_t* targets, int64_t ignore,
                  float* lse, float* loss, cudaStream_t stream) {
  if (rows == 0) return 0;
  constexpr int P = Pack<T>::kSize;
  const bool vec = ld % P == 0 && aligned16(logits);
  const int threads = row_threads(vec ? (vocab + P - 1) / P : vocab);
  if (vec) {
    classifier_forward_kernel<T, true>
        <<<static_cast<unsigned>(rows), threads, 0, stream>>>(logits, vocab, ld, targets, ignore, lse, loss);
  } else {
    classifier_forward_kernel<T, false>
        <<<static_cast<unsigned>(rows), threads, 0, stream>>>(logits, vocab, ld, targets, ignore, lse, loss);
  }
  return launch_status();
}

template <typename T>
int backward_typed(T* dlogits, const T* logits, int64_t rows, int64_t vocab, int64_t ld, const int64_t* targets,
                   int64_t ignore, const float* lse, const float* grad, const float* count, cudaStream_t stream) {
  if (rows == 0) return 0;
  constexpr int P = Pack<T>::kSize;
  const bool vec = ld % P == 0 && aligned16(logits) && aligned16(dlogits);
  const int threads = row_threads(vec ? ld / P : ld);
  if (vec) {
    classifier_backward_kernel<T, true><<<static_cast<unsigned>(rows), threads, 0, stream>>>(
        dlogits, logits, vocab, ld, targets, ignore, lse, grad, count);
  } else {
    classifier_backward_kernel<T, false><<<static_cast<unsigned>(rows), threads, 0, stream>>>(
        dlogits, logits, vocab, ld, targets, ignore, lse, grad, count);
  }
  return launch_status();
}

}  // namespace

const char* kernel_error_text(int code) { return cudaGetErrorString(static_cast<cudaError_t>(code)); }

int kernel_image_status() {
  cudaFuncAttributes attributes;
  const cudaError_t status = cudaFuncGetAttributes(&attributes, classifier_forward_kernel<float, true>);
  if (status != cudaSuccess) (void)cudaGetLastError();  // not left for the next launch's status
  return static_cast<int>(status);
}

int classifier_forward(const void* logits, Dtype dt, int64_t rows, int64_t vocab, int64_t ld, const int64_t* targets,
                       int64_t ignore_index, float* lse, float* loss, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  if (dt == Dtype::kBf16)
    return forward_typed(static_cast<const bf16*>(logits), rows, vocab, ld, targets, ignore_index, lse, loss, s);
  return forward_typed(static_cast<const float*>(logits), rows, vocab, ld, targets, ignore_index, lse, loss, s);
}

int classifier_backward(void* dlogits, const void* logits, Dtype dt, int64_t rows, int64_t vocab, int64_t ld,
                        const int64_t* targets, int64_t ignore_index, const float* lse, const float* grad,
                        const float* count, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  if (dt == Dtype::kBf16)
    return backward_typed(static_cast<bf16*>(dlogits), static_cast<const bf16*>(logits), rows, vocab, ld, targets,
                          ignore_index, lse, grad, count, s);
  return backward_typed(static_cast<float*>(dlogits), static_cast<const float*>(logits), rows, vocab, ld, targets,
                        ignore_index, lse, grad, count, s);
}

}  // namespace frugal::kernels
