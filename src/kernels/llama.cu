// The Llama family's CUDA kernels: RMSNorm forward and backward, SwiGLU forward and backward. The
// arithmetic of the CPU loops (src/model/llama_kernel.cpp), the reference the GPU tests hold these
// to. See kernels.h.
#include <algorithm>

#include "kernels/device_common.cuh"

namespace frugal::kernels {
namespace {

constexpr int kRowThreads = 256;        // a row's block (RMSNorm)
constexpr int kColThreads = 256;        // a column group's block (the weight gradient's partial sums)
constexpr int64_t kMaxRowGroups = 512;  // the weight gradient's partial sums: at most this many row groups
constexpr int kElemThreads = 256;       // a row's block (SwiGLU)

// One block a row: rstd from the row's sum of squares, then out = (x * rstd) * w.
template <typename In, typename Out>
__global__ void __launch_bounds__(kRowThreads)
    rmsnorm_forward_kernel(Out* out, float* rstd, const In* x, const float* w, int64_t C, float eps) {
  const int64_t r = blockIdx.x;
  const In* xr = x + r * C;
  Out* yr = out + r * C;
  float s = 0.0f;
  for (int64_t j = threadIdx.x; j < C; j += blockDim.x) {
    const float v = to_f(xr[j]);
    s += v * v;
  }
  const float rs = 1.0f / sqrtf(block_sum(s) / static_cast<float>(C) + eps);
  if (threadIdx.x == 0) rstd[r] = rs;
  for (int64_t j = threadIdx.x; j < C; j += blockDim.x) yr[j] = from_f<Out>((to_f(xr[j]) * rs) * w[j]);
}

// The residual form's forward, one block a row: h = residual + y (y in the matmul's dtype Out,
// the sum rounded once to In), then the RMSNorm of h as above.
template <typename In, typename Out>
__global__ void __launch_bounds__(kRowThreads)
    residual_rmsnorm_forward_kernel(In* h, Out* out, float* rstd, const In* residual, const Out* y, const float* w,
                                    int64_t C, float eps) {
  const int64_t r = blockIdx.x;
  In* hr = h + r * C;
  Out* yr = out + r * C;
  float s = 0.0f;
  for (int64_t j = threadIdx.x; j < C; j += blockDim.x) {
    const In v = from_f<In>(to_f(residual[r * C + j]) + to_f(y[r * C + j]));
    hr[j] = v;
    s += to_f(v) * to_f(v);
  }
  const float rs = 1.0f / sqrtf(block_sum(s) / static_cast<float>(C) + eps);
  if (threadIdx.x == 0) rstd[r] = rs;
  for (int64_t j = threadIdx.x; j < C; j += blockDim.x) yr[j] = from_f<Out>((to_f(hr[j]) * rs) * w[j]);
}

// One block a row: dx = rstd * (dy w - xhat * mean(dy w xhat)) + dresid, xhat = x * rstd; the
// same values in dy's dtype into dx_low (the residual form's gradient of y). dresid and dx_low may
// be null.
template <typename In, typename Grad>
__global__ void __launch_bounds__(kRowThreads)
    rmsnorm_backward_dx_kernel(In* dx, Grad* dx_low, const Grad* dy, const In* dresid, const In* x, const float* w,
                               const float* rstd, int64_t C) {
  const int64_t r = blockIdx.x;
  const In* xr = x + r * C;
  const Grad* gr = dy + r * C;
  In* dxr = dx + r * C;
  const float rs = rstd[r];
  float dot = 0.0f;
  for (int64_t j = threadIdx.x; j < C; j += blockDim.x) dot += to_f(gr[j]) * w[j] * (to_f(xr[j]) * rs);
  const float c = block_sum(dot) / static_cast<float>(C);
  for (int64_t j = threadIdx.x; j < C; j += blockDim.x) {
    float v = rs * (to_f(gr[j]) * w[j] - (to_f(xr[j]) * rs) * c);
    if (dresid != nullptr) v += to_f(dresid[r * C + j]);
    dxr[j] = from_f<In>(v);
    if (dx_low != nullptr) dx_low[r * C + j] = from_f<Grad>(v);
  }
}

// The weight gradient's partial sums: block (column group, row group g) adds dy * xhat over the
// rows of group g for its columns, in row order, into scratch[g * C + j].
template <typename In, typename Grad>
__global__ void __launch_bounds__(kColThreads)
    rmsnorm_backward_dw_partial_kernel(float* scratch, const Grad* dy, const In* x, const float* rstd, int64_t rows,
                                       int64_t C, int64_t rows_per_group) {
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kColThreads + threadIdx.x;
  if (j >= C) return;
  const int64_t g = blockIdx.y, r0 = g * rows_per_group, r1 = r0 + rows_per_group < rows ? r0 + rows_per_group : rows;
  float s = 0.0f;
  for (int64_t r = r0; r < r1; ++r) s += to_f(dy[r * C + j]) * (to_f(x[r * C + j]) * rstd[r]);
  scratch[g * C + j] = s;
}

// sigmoid(g) without an exponential of a positive argument (the CPU loops' form).
__device__ __forceinline__ float sigmoid(float g) {
  const float e = expf(-fabsf(g));
  const float inv = 1.0f / (1.0f + e);
  return g >= 0.0f ? inv : e * inv;
}

// One block a row (no division of a flat index), its threads striding over the columns.
template <typename T>
__global__ void __launch_bounds__(kElemThreads) swiglu_forward_kernel(T* act, const T* gu, int64_t F) {
  const int64_t r = blockIdx.x;
  const T* g = gu + r * 2 * F;
  const T* u = g + F;
  T* a = act + r * F;
  for (int64_t j = threadIdx.x; j < F; j += kElemThreads) {
    const float gj = to_f(g[j]);
    a[j] = from_f<T>(gj * sigmoid(gj) * to_f(u[j]));
  }
}

// dgate = dact * up * s (1 + g (1 - s)), dup = dact * g * s, s = sigmoid(g).
template <typename T>
__global__ void __launch_bounds__(kElemThreads) swiglu_backward_kernel(T* dgu, const T* gu, const T* dact, int64_t F) {
  const int64_t r = blockIdx.x;
  const T* g = gu + r * 2 * F;
  const T* u = g + F;
  const T* d = dact + r * F;
  T* dg = dgu + r * 2 * F;
  T* du = dg + F;
  for (int64_t j = threadIdx.x; j < F; j += kElemThreads) {
    const float gj = to_f(g[j]), uj = to_f(u[j]), dj = to_f(d[j]);
    const float s = sigmoid(gj);
    dg[j] = from_f<T>(dj * uj * s * (1.0f + gj * (1.0f - s)));
    du[j] = from_f<T>(dj * gj * s);
  }
}

int64_t row_groups(int64_t rows) { return std::max<int64_t>(1, std::min(rows, kMaxRowGroups)); }

// The slot j of a row of the packed projection (H query heads, then K key heads, then K value
// heads): its output tensor, its head there, and that tensor's head count.
struct Slot {
  int64_t head, heads;
  int which;  // 0 q, 1 k, 2 v
};
__device__ __forceinline__ Slot slot_of(int j, int H, int K) {
  if (j < H) return {j, H, 0};
  if (j < H + K) return {j - H, K, 1};
  return {j - H - K, K, 2};
}

// One block a row (b, t) of qkv (B, T, (H + 2K) D): q and k rotated by position t (rotate-half:
// y1 = x1 c - x2 s, y2 = x2 c + x1 s over the two halves of a head), v copied, each into its
// (B, heads, T, D) tensor. The backward turns the other way: dx1 = dy1 c + dy2 s, dx2 = dy2 c - dy1 s.
template <typename T, bool kBackward>
__global__ void __launch_bounds__(kRowThreads) rope_split_kernel(T* packed, T* q, T* k, T* v, const float* cos,
                                                                 const float* sin, int64_t Tn, int H, int K, int half) {
  const int64_t row = blockIdx.x, b = row / Tn, t = row - b * Tn;
  const int D = 2 * half, slots = H + 2 * K;
  T* x = packed + row * slots * D;
  for (int p = threadIdx.x; p < slots * half; p += blockDim.x) {
    const int j = p / half, d = p - j * half;
    const Slot s = slot_of(j, H, K);
    T* o = (s.which == 0 ? q : s.which == 1 ? k : v) + ((b * s.heads + s.head) * Tn + t) * D;
    if (s.which == 2) {  // the values (and their gradient) copied as they are
      if (!kBackward) {
        o[d] = x[j * D + d];
        o[d + half] = x[j * D + d + half];
      } else {
        x[j * D + d] = o[d];
        x[j * D + d + half] = o[d + half];
      }
      continue;
    }
    const float c = cos[t * half + d], sn = sin[t * half + d];
    if (!kBackward) {
      const float x1 = to_f(x[j * D + d]), x2 = to_f(x[j * D + d + half]);
      o[d] = from_f<T>(x1 * c - x2 * sn);
      o[d + half] = from_f<T>(x2 * c + x1 * sn);
    } else {
      const float y1 = to_f(o[d]), y2 = to_f(o[d + half]);
      x[j * D + d] = from_f<T>(y1 * c + y2 * sn);
      x[j * D + d + half] = from_f<T>(y2 * c - y1 * sn);
    }
  }
}

template <typename In, typename Out>
int forward_typed(Out* out, float* rstd, const In* x, const float* w, int64_t rows, int64_t C, float eps,
                  cudaStream_t s) {
  if (rows == 0 || C == 0) return 0;
  rmsnorm_forward_kernel<In, Out><<<static_cast<unsigned>(rows), kRowThreads, 0, s>>>(out, rstd, x, w, C, eps);
  return launch_status();
}

template <typename In, typename Grad>
int backward_typed(In* dx, Grad* dx_low, const Grad* dy, const In* dresid, const In* x, const float* w,
                   const float* rstd, float* dweight, float* scratch, int64_t rows, int64_t C, cudaStream_t s) {
  if (C == 0) return 0;
  if (rows == 0) return static_cast<int>(cudaMemsetAsync(dweight, 0, C * sizeof(float), s));  // no rows: zero sums
  rmsnorm_backward_dx_kernel<In, Grad>
      <<<static_cast<unsigned>(rows), kRowThreads, 0, s>>>(dx, dx_low, dy, dresid, x, w, rstd, C);
  if (const int status = launch_status(); status != 0) return status;
  const int64_t groups = row_groups(rows), per_group = (rows + groups - 1) / groups;
  const unsigned col_blocks = static_cast<unsigned>((C + kColThreads - 1) / kColThreads);
  rmsnorm_backward_dw_partial_kernel<In, Grad><<<dim3(col_blocks, static_cast<unsigned>(groups)), kColThreads, 0, s>>>(
      scratch, dy, x, rstd, rows, C, per_group);
  if (const int status = launch_status(); status != 0) return status;
  sum_row_groups_kernel<kColThreads><<<col_blocks, kColThreads, 0, s>>>(dweight, scratch, groups, C);  // dweight
  return launch_status();
}

template <typename T>
int rope_typed(bool backward, T* packed, T* q, T* k, T* v, const float* cos, const float* sin, int64_t B, int64_t Tn,
               int H, int K, int half, cudaStream_t s) {
  if (B * Tn == 0) return 0;
  const unsigned rows = static_cast<unsigned>(B * Tn);
  if (backward)
    rope_split_kernel<T, true><<<rows, kRowThreads, 0, s>>>(packed, q, k, v, cos, sin, Tn, H, K, half);
  else
    rope_split_kernel<T, false><<<rows, kRowThreads, 0, s>>>(packed, q, k, v, cos, sin, Tn, H, K, half);
  return launch_status();
}

}  // namespace

int rope_split(bool backward, void* qkv, void* q, void* k, void* v, Dtype t, const float* cos, const float* sin,
               int64_t B, int64_t T, int64_t H, int64_t K, int64_t D, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  const int h = static_cast<int>(H), kv = static_cast<int>(K), half = static_cast<int>(D / 2);
  if (t == Dtype::kBf16)
    return rope_typed(backward, static_cast<bf16*>(qkv), static_cast<bf16*>(q), static_cast<bf16*>(k),
                      static_cast<bf16*>(v), cos, sin, B, T, h, kv, half, s);
  return rope_typed(backward, static_cast<float*>(qkv), static_cast<float*>(q), static_cast<float*>(k),
                    static_cast<float*>(v), cos, sin, B, T, h, kv, half, s);
}

int rmsnorm_forward(void* out, Dtype ot, float* rstd, const void* x, Dtype xt, const float* weight, int64_t rows,
                    int64_t C, float eps, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  if (xt == Dtype::kF32 && ot == Dtype::kF32)
    return forward_typed(static_cast<float*>(out), rstd, static_cast<const float*>(x), weight, rows, C, eps, s);
  if (xt == Dtype::kF32)
    return forward_typed(static_cast<bf16*>(out), rstd, static_cast<const float*>(x), weight, rows, C, eps, s);
  if (ot == Dtype::kF32)
    return forward_typed(static_cast<float*>(out), rstd, static_cast<const bf16*>(x), weight, rows, C, eps, s);
  return forward_typed(static_cast<bf16*>(out), rstd, static_cast<const bf16*>(x), weight, rows, C, eps, s);
}

size_t rmsnorm_backward_scratch_floats(int64_t rows, int64_t C) {
  return static_cast<size_t>(row_groups(rows)) * static_cast<size_t>(std::max<int64_t>(C, 0));
}

namespace {
template <typename In, typename Grad>
int backward_as(void* dx, void* dx_low, const void* dy, const void* dresid, const void* x, const float* weight,
                const float* rstd, float* dweight, float* scratch, int64_t rows, int64_t C, cudaStream_t s) {
  return backward_typed(static_cast<In*>(dx), static_cast<Grad*>(dx_low), static_cast<const Grad*>(dy),
                        static_cast<const In*>(dresid), static_cast<const In*>(x), weight, rstd, dweight, scratch, rows,
                        C, s);
}

template <typename In, typename Out>
int residual_forward_as(void* h, void* out, float* rstd, const void* residual, const void* y, const float* weight,
                        int64_t rows, int64_t C, float eps, cudaStream_t s) {
  if (rows == 0 || C == 0) return 0;
  residual_rmsnorm_forward_kernel<In, Out><<<static_cast<unsigned>(rows), kRowThreads, 0, s>>>(
      static_cast<In*>(h), static_cast<Out*>(out), rstd, static_cast<const In*>(residual), static_cast<const Out*>(y),
      weight, C, eps);
  return launch_status();
}
}  // namespace

int rmsnorm_backward(void* dx, void* dx_low, const void* dy, Dtype dt, const void* dresid, const void* x, Dtype xt,
                     const float* weight, const float* rstd, float* dweight, float* scratch, int64_t rows, int64_t C,
                     void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  if (xt == Dtype::kF32 && dt == Dtype::kF32)
    return backward_as<float, float>(dx, dx_low, dy, dresid, x, weight, rstd, dweight, scratch, rows, C, s);
  if (xt == Dtype::kF32)
    return backward_as<float, bf16>(dx, dx_low, dy, dresid, x, weight, rstd, dweight, scratch, rows, C, s);
  if (dt == Dtype::kF32)
    return backward_as<bf16, float>(dx, dx_low, dy, dresid, x, weight, rstd, dweight, scratch, rows, C, s);
  return backward_as<bf16, bf16>(dx, dx_low, dy, dresid, x, weight, rstd, dweight, scratch, rows, C, s);
}

int residual_rmsnorm_forward(void* h, void* out, Dtype ot, float* rstd, const void* residual, const void* y, Dtype xt,
                             const float* weight, int64_t rows, int64_t C, float eps, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  if (xt == Dtype::kF32 && ot == Dtype::kF32)
    return residual_forward_as<float, float>(h, out, rstd, residual, y, weight, rows, C, eps, s);
  if (xt == Dtype::kF32) return residual_forward_as<float, bf16>(h, out, rstd, residual, y, weight, rows, C, eps, s);
  if (ot == Dtype::kF32) return residual_forward_as<bf16, float>(h, out, rstd, residual, y, weight, rows, C, eps, s);
  return residual_forward_as<bf16, bf16>(h, out, rstd, residual, y, weight, rows, C, eps, s);
}

int swiglu_forward(void* act, const void* gate_up, Dtype t, int64_t rows, int64_t F, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  if (rows == 0 || F == 0) return 0;
  if (t == Dtype::kBf16)
    swiglu_forward_kernel<<<static_cast<unsigned>(rows), kElemThreads, 0, s>>>(static_cast<bf16*>(act),
                                                                               static_cast<const bf16*>(gate_up), F);
  else
    swiglu_forward_kernel<<<static_cast<unsigned>(rows), kElemThreads, 0, s>>>(static_cast<float*>(act),
                                                                               static_cast<const float*>(gate_up), F);
  return launch_status();
}

int swiglu_backward(void* dgate_up, const void* gate_up, const void* dact, Dtype t, int64_t rows, int64_t F,
                    void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  if (rows == 0 || F == 0) return 0;
  if (t == Dtype::kBf16)
    swiglu_backward_kernel<<<static_cast<unsigned>(rows), kElemThreads, 0, s>>>(
        static_cast<bf16*>(dgate_up), static_cast<const bf16*>(gate_up), static_cast<const bf16*>(dact), F);
  else
    swiglu_backward_kernel<<<static_cast<unsigned>(rows), kElemThreads, 0, s>>>(
        static_cast<float*>(dgate_up), static_cast<const float*>(gate_up), static_cast<const float*>(dact), F);
  return launch_status();
}

}  // namespace frugal::kernels
