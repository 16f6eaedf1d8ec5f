// The MLP's bias add and GELU, forward and backward, with the bias gradient's column sums taken in
// the backward's one pass. The arithmetic is kernel_math.h's (gelu_value, gelu_derivative); the
// ATen body in src/model/bias_gelu.cpp is the reference the GPU tests hold these to. See kernels.h.
#include <algorithm>

#include "kernels/device_common.cuh"

namespace frugal::kernels {
namespace {

constexpr int kThreads = 256;           // the forward's blocks
constexpr int kColThreads = 128;        // the backward's blocks: a run of columns each
constexpr int64_t kMaxRowGroups = 256;  // the bias gradient's partial sums: at most this many row groups
constexpr int kMaxBlocks = 65535 * 8;   // the forward's grid; its threads stride over the rest

int64_t row_groups(int64_t rows) { return std::max<int64_t>(1, std::min(rows, kMaxRowGroups)); }

// V consecutive elements at p: one 16-byte load where V fills one (the caller checked the
// alignment), else V scalar loads.
template <typename T, int V>
__device__ __forceinline__ void load_run(const T* p, float (&out)[V]) {
  if constexpr (V == Pack<T>::kSize) {
    const Pack<T> pack = load_pack(p);
#pragma unroll
    for (int k = 0; k < V; ++k) out[k] = to_f(pack.v[k]);
  } else {
#pragma unroll
    for (int k = 0; k < V; ++k) out[k] = to_f(p[k]);
  }
}

template <typename T, int V>
__device__ __forceinline__ void store_run(T* p, const float (&in)[V]) {
  if constexpr (V == Pack<T>::kSize) {
    Pack<T> pack;
#pragma unroll
    for (int k = 0; k < V; ++k) pack.v[k] = from_f<T>(in[k]);
    store_pack(p, pack);
  } else {
#pragma unroll
    for (int k = 0; k < V; ++k) p[k] = from_f<T>(in[k]);
  }
}

// Each thread takes runs of V elements (C a multiple of V, so a run stays in its row), striding
// over the whole tensor.
template <typename T, int V>
__global__ void __launch_bounds__(kThreads)
    bias_gelu_forward_kernel(T* y, const T* u, const float* bias, int64_t runs, int64_t C, bool tanh_form) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < runs;
       i += static_cast<int64_t>(gridDim.x) * kThreads) {
    const int64_t e = i * V, c = e % C;
    float v[V];
    load_run<T, V>(u + e, v);
#pragma unroll
    for (int k = 0; k < V; ++k) v[k] = gelu_value(v[k] + bias[c + k], tanh_form);
    store_run<T, V>(y + e, v);
  }
}

// Block (column tile, row group g): each thread a run of V columns over the rows of group g, in
// row order: du written, and the run's sums of du (before rounding) into scratch[g * C + c].
template <typename T, int V>
__global__ void __launch_bounds__(kColThreads)
    bias_gelu_backward_kernel(T* du, float* scratch, const T* dy, const T* u, const float* bias, int64_t rows,
                              int64_t C, int64_t rows_per_group, bool tanh_form) {
  const int64_t c = (static_cast<int64_t>(blockIdx.x) * kColThreads + threadIdx.x) * V;
  if (c >= C) return;
  const int64_t g = blockIdx.y, r0 = g * rows_per_group, r1 = r0 + rows_per_group < rows ? r0 + rows_per_group : rows;
  float b[V], sum[V];
#pragma unroll
  for (int k = 0; k < V; ++k) {
    b[k] = bias[c + k];
    sum[k] = 0.0f;
  }
  for (int64_t r = r0; r < r1; ++r) {
    float x[V], d[V];
    load_run<T, V>(u + r * C + c, x);
    load_run<T, V>(dy + r * C + c, d);
#pragma unroll
    for (int k = 0; k < V; ++k) {
      d[k] *= gelu_derivative(x[k] + b[k], tanh_form);
      sum[k] += d[k];
    }
    store_run<T, V>(du + r * C + c, d);
  }
#pragma unroll
  for (int k = 0; k < V; ++k) scratch[g * C + c + k] = sum[k];
}

template <typename T, int V>
int forward_as(T* y, const T* u, const float* bias, int64_t rows, int64_t C, bool tanh_form, cudaStream_t s) {
  const int64_t runs = rows * C / V;
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((runs + kThreads - 1) / kThreads, kMaxBlocks));
  bias_gelu_forward_kernel<T, V><<<blocks, kThreads, 0, s>>>(y, u, bias, runs, C, tanh_form);
  return launch_status();
}

template <typename T, int V>
int backward_as(T* du, float* dbias, const T* dy, const T* u, const float* bias, float* scratch, int64_t rows,
                int64_t C, bool tanh_form, cudaStream_t s) {
  const int64_t groups = row_groups(rows), per_group = (rows + groups - 1) / groups;
  const unsigned tiles = static_cast<unsigned>((C / V + kColThreads - 1) / kColThreads);
  bias_gelu_backward_kernel<T, V><<<dim3(tiles, static_cast<unsigned>(groups)), kColThreads, 0, s>>>(
      du, scratch, dy, u, bias, rows, C, per_group, tanh_form);
  if (const int status = launch_status(); status != 0) return status;
  const unsigned col_blocks = static_cast<unsigned>((C + kColThreads - 1) / kColThreads);
  sum_row_groups_kernel<kColThreads><<<col_blocks, kColThreads, 0, s>>>(dbias, scratch, groups, C);
  return launch_status();
}

// The run length for these buffers: a 16-byte pack of T where every row starts on one, else 1.
template <typename T>
bool packs_fit(int64_t C, std::initializer_list<const void*> buffers) {
  if (C % Pack<T>::kSize != 0) return false;
  for (const void* p : buffers)
    if (!aligned16(p)) return false;
  return true;
}

template <typename T>
int forward_typed(void* y, const void* u, const float* bias, int64_t rows, int64_t C, bool tanh_form, cudaStream_t s) {
  if (packs_fit<T>(C, {y, u}))
    return forward_as<T, Pack<T>::kSize>(static_cast<T*>(y), static_cast<const T*>(u), bias, rows, C, tanh_form, s);
  return forward_as<T, 1>(static_cast<T*>(y), static_cast<const T*>(u), bias, rows, C, tanh_form, s);
}

template <typename T>
int backward_typed(void* du, float* dbias, const void* dy, const void* u, const float* bias, float* scratch,
                   int64_t rows, int64_t C, bool tanh_form, cudaStream_t s) {
  if (packs_fit<T>(C, {du, dy, u}))
    return backward_as<T, Pack<T>::kSize>(static_cast<T*>(du), dbias, static_cast<const T*>(dy),
                                          static_cast<const T*>(u), bias, scratch, rows, C, tanh_form, s);
  return backward_as<T, 1>(static_cast<T*>(du), dbias, static_cast<const T*>(dy), static_cast<const T*>(u), bias,
                           scratch, rows, C, tanh_form, s);
}

}  // namespace

int bias_gelu_forward(void* y, const void* u, Dtype t, const float* bias, int64_t rows, int64_t C, bool tanh_form,
                      void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  if (rows == 0 || C == 0) return 0;
  if (t == Dtype::kBf16) return forward_typed<bf16>(y, u, bias, rows, C, tanh_form, s);
  return forward_typed<float>(y, u, bias, rows, C, tanh_form, s);
}

size_t bias_gelu_backward_scratch_floats(int64_t rows, int64_t C) {
  return static_cast<size_t>(row_groups(rows)) * static_cast<size_t>(std::max<int64_t>(C, 0));
}

int bias_gelu_backward(void* du, float* dbias, const void* dy, const void* u, Dtype t, const float* bias,
                       float* scratch, int64_t rows, int64_t C, bool tanh_form, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  if (C == 0) return 0;
  if (rows == 0) return static_cast<int>(cudaMemsetAsync(dbias, 0, C * sizeof(float), s));  // no rows: zero sums
  if (t == Dtype::kBf16) return backward_typed<bf16>(du, dbias, dy, u, bias, scratch, rows, C, tanh_form, s);
  return backward_typed<float>(du, dbias, dy, u, bias, scratch, rows, C, tanh_form, s);
}

}  // namespace frugal::kernels
