// LayerNorm forward (alone, or after the residual add), and its backward in one kernel: the input
// gradient, the residual gradient added in, and the weight and bias gradients reduced in a fixed
// order (llm.c's fused_residual_forward and layernorm_backward, without float atomics so that a
// deterministic run gives the same bits). See kernels.h. Statistics and sums in fp32.
#include <initializer_list>

#include "kernels/device_common.cuh"

namespace frugal::kernels {
namespace {

constexpr int kThreads = 256;  // 8 warps: one row per warp at a time
constexpr int kWarps = kThreads / 32;

// One warp per row. With `y`, the row is first residual + y, written to h; then it is normalised.
template <typename TX, typename TO>
__global__ void __launch_bounds__(kThreads)
    layernorm_forward_kernel(TX* h, TO* out, float* mean, float* rstd, const TX* x, const TO* y, const TX* weight,
                             const TX* bias, int64_t rows, int C, float eps) {
  const int lane = threadIdx.x % 32;
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (r >= rows) return;
  const TX* xr = x + r * C;
  float sum = 0.0f;
  if (y) {
    const TO* yr = y + r * C;
    TX* hr = h + r * C;
    for (int c = lane; c < C; c += 32) {
      const TX v = from_f<TX>(to_f(xr[c]) + to_f(yr[c]));  // rounded as the stored h is
      hr[c] = v;
      sum += to_f(v);
    }
    xr = hr;  // this thread reads back only what it wrote itself
  } else {
    for (int c = lane; c < C; c += 32) sum += to_f(xr[c]);
  }
  const float m = warp_sum(sum) / static_cast<float>(C);
  float var = 0.0f;
  for (int c = lane; c < C; c += 32) {
    const float d = to_f(xr[c]) - m;
    var += d * d;
  }
  const float rs = rsqrtf(warp_sum(var) / static_cast<float>(C) + eps);
  TO* outr = out + r * C;
  for (int c = lane; c < C; c += 32) outr[c] = from_f<TO>((to_f(xr[c]) - m) * rs * to_f(weight[c]) + to_f(bias[c]));
  if (lane == 0) {
    mean[r] = m;
    rstd[r] = rs;
  }
}

// After each block wrote its partial sums (2 * C floats) to scratch: the last block to arrive adds
// them in block order and writes dweight and dbias, then resets the counter.
__device__ void reduce_block_partials(const float* scratch, float* dweight, float* dbias, unsigned* counter, int C) {
  __shared__ bool last;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(counter, 1u) == gridDim.x - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
  const int blocks = static_cast<int>(gridDim.x);
  for (int c = threadIdx.x; c < 2 * C; c += kThreads) {
    // Four running sums over the blocks, added in one fixed order: the same bits every run.
    float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
    int b = 0;
    for (; b + 4 <= blocks; b += 4) {
      s0 += __ldcg(scratch + static_cast<int64_t>(b) * 2 * C + c);
      s1 += __ldcg(scratch + static_cast<int64_t>(b + 1) * 2 * C + c);
      s2 += __ldcg(scratch + static_cast<int64_t>(b + 2) * 2 * C + c);
      s3 += __ldcg(scratch + static_cast<int64_t>(b + 3) * 2 * C + c);
    }
    for (; b < blocks; ++b) s0 += __ldcg(scratch + static_cast<int64_t>(b) * 2 * C + c);
    const float s = (s0 + s1) + (s2 + s3);
    if (c < C) {
      dweight[c] = s;
    } else {
      dbias[c - C] = s;
    }
  }
  if (threadIdx.x == 0) *counter = 0u;
}

// Block b owns the rows [b * chunk, (b + 1) * chunk). 1. Each warp takes rows of the chunk and
// writes their input gradient. 2. Each thread takes columns and sums dout * xhat and dout over the
// chunk's rows in row order: the block's partial sums, to scratch. 3. The last block to finish
// adds the partials in block order and writes dweight and dbias.
template <typename TX, typename TO>
__global__ void __launch_bounds__(kThreads)
    layernorm_backward_kernel(TX* dx, TO* dx_low, const TO* dout, const TX* dresid, const TX* x, const TX* weight,
                              const float* mean, const float* rstd, float* dweight, float* dbias, float* scratch,
                              unsigned* counter, int64_t rows, int C) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t chunk = (rows + gridDim.x - 1) / gridDim.x;
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * chunk;
  const int64_t r1 = r0 + chunk < rows ? r0 + chunk : rows;
  const float inv_c = 1.0f / static_cast<float>(C);

  for (int64_t r = r0 + warp; r < r1; r += kWarps) {
    const float m = mean[r], rs = rstd[r];
    const TO* dr = dout + r * C;
    const TX* xr = x + r * C;
    float sg = 0.0f, sgx = 0.0f;
    for (int c = lane; c < C; c += 32) {
      const float g = to_f(dr[c]) * to_f(weight[c]);
      sg += g;
      sgx += g * (to_f(xr[c]) - m) * rs;
    }
    const float mean_g = warp_sum(sg) * inv_c, mean_gx = warp_sum(sgx) * inv_c;
    for (int c = lane; c < C; c += 32) {
      const float g = to_f(dr[c]) * to_f(weight[c]);
      float v = layernorm_dx(g, (to_f(xr[c]) - m) * rs, mean_g, mean_gx, rs);
      if (dresid) v += to_f(dresid[r * C + c]);
      dx[r * C + c] = from_f<TX>(v);
      if (dx_low) dx_low[r * C + c] = from_f<TO>(v);
    }
  }

  float* part = scratch + static_cast<int64_t>(blockIdx.x) * 2 * C;
  for (int c = threadIdx.x; c < C; c += kThreads) {
    float dw = 0.0f, db = 0.0f;
    for (int64_t r = r0; r < r1; ++r) {
      const float d = to_f(dout[r * C + c]);
      dw += d * (to_f(x[r * C + c]) - mean[r]) * rstd[r];
      db += d;
    }
    part[c] = dw;
    part[C + c] = db;
  }

  reduce_block_partials(scratch, dweight, dbias, counter, C);
}

// ---- the register-cached path: rows whose width is a multiple of 8, at most kMaxGroups * 256 ----
// A lane holds groups of 8 consecutive elements (16-byte loads and stores: one for bf16, two for
// fp32): lane l owns the groups l, l + 32, ... of every row it handles, so the row is read from
// memory once, kept in registers, and (backward) the lane's weight and bias column sums stay in
// registers across the rows. llm.c's layernorm kernels read in 128-bit packs the same way.
constexpr int kGroup = 8;

template <typename T>
__device__ __forceinline__ void load8(const T* p, float (&v)[kGroup]);
template <>
__device__ __forceinline__ void load8<float>(const float* p, float (&v)[kGroup]) {
  const Pack<float> a = load_pack(p), b = load_pack(p + 4);
  for (int i = 0; i < 4; ++i) v[i] = a.v[i], v[4 + i] = b.v[i];
}
template <>
__device__ __forceinline__ void load8<bf16>(const bf16* p, float (&v)[kGroup]) {
  const Pack<bf16> a = load_pack(p);
  for (int i = 0; i < kGroup; ++i) v[i] = to_f(a.v[i]);
}
template <typename T>
__device__ __forceinline__ void store8(T* p, const float (&v)[kGroup]);
template <>
__device__ __forceinline__ void store8<float>(float* p, const float (&v)[kGroup]) {
  Pack<float> a, b;
  for (int i = 0; i < 4; ++i) a.v[i] = v[i], b.v[i] = v[4 + i];
  store_pack(p, a);
  store_pack(p + 4, b);
}
template <>
__device__ __forceinline__ void store8<bf16>(bf16* p, const float (&v)[kGroup]) {
  Pack<bf16> a;
  for (int i = 0; i < kGroup; ++i) a.v[i] = from_f<bf16>(v[i]);
  store_pack(p, a);
}

// kN: groups per lane (the row has at most kN * 32 groups; g < groups guards the rest).
template <typename TX, typename TO, int kN>
__global__ void __launch_bounds__(kThreads)
    layernorm_forward_vec_kernel(TX* h, TO* out, float* mean, float* rstd, const TX* x, const TO* y, const TX* weight,
                                 const TX* bias, int64_t rows, int C, float eps) {
  const int lane = threadIdx.x % 32, groups = C / kGroup;
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (r >= rows) return;
  float v[kN][kGroup];
  float sum = 0.0f;
#pragma unroll
  for (int i = 0; i < kN; ++i) {
    const int g = lane + 32 * i;
    if (g >= groups) break;
    load8(x + r * C + g * kGroup, v[i]);
    if (y) {
      float w[kGroup];
      load8(y + r * C + g * kGroup, w);
      for (int j = 0; j < kGroup; ++j) v[i][j] = to_f(from_f<TX>(v[i][j] + w[j]));  // rounded as h is stored
      store8(h + r * C + g * kGroup, v[i]);
    }
    for (int j = 0; j < kGroup; ++j) sum += v[i][j];
  }
  const float m = warp_sum(sum) / static_cast<float>(C);
  float var = 0.0f;
#pragma unroll
  for (int i = 0; i < kN; ++i) {
    if (lane + 32 * i >= groups) break;
    for (int j = 0; j < kGroup; ++j) var += (v[i][j] - m) * (v[i][j] - m);
  }
  const float rs = rsqrtf(warp_sum(var) / static_cast<float>(C) + eps);
#pragma unroll
  for (int i = 0; i < kN; ++i) {
    const int g = lane + 32 * i;
    if (g >= groups) break;
    float w[kGroup], b[kGroup], o[kGroup];
    load8(weight + g * kGroup, w);
    load8(bias + g * kGroup, b);
    for (int j = 0; j < kGroup; ++j) o[j] = (v[i][j] - m) * rs * w[j] + b[j];
    store8(out + r * C + g * kGroup, o);
  }
  if (lane == 0) {
    mean[r] = m;
    rstd[r] = rs;
  }
}

// The backward on the register-cached layout: a warp's rows of the block's chunk, each read once
// (dout, x, dresid); the lane's column sums of dout * xhat and dout kept in registers, then the
// block's warps add theirs in warp order in shared memory (the same bits every run), and the block's
// partial goes to scratch as in layernorm_backward_kernel, whose last-block reduction follows.
template <typename TX, typename TO, int kN>
__global__ void __launch_bounds__(kThreads)
    layernorm_backward_vec_kernel(TX* dx, TO* dx_low, const TO* dout, const TX* dresid, const TX* x, const TX* weight,
                                  const float* mean, const float* rstd, float* dweight, float* dbias, float* scratch,
                                  unsigned* counter, int64_t rows, int C) {
  extern __shared__ float block_sums[];  // 2 * C: dweight's, then dbias's
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, groups = C / kGroup;
  const int64_t chunk = (rows + gridDim.x - 1) / gridDim.x;
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * chunk;
  const int64_t r1 = r0 + chunk < rows ? r0 + chunk : rows;
  const float inv_c = 1.0f / static_cast<float>(C);
  float dw[kN][kGroup] = {}, db[kN][kGroup] = {};
  for (int64_t r = r0 + warp; r < r1; r += kWarps) {
    const float m = mean[r], rs = rstd[r];
    float d[kN][kGroup], xh[kN][kGroup];
    float sg = 0.0f, sgx = 0.0f;
#pragma unroll
    for (int i = 0; i < kN; ++i) {
      const int g = lane + 32 * i;
      if (g >= groups) break;
      float w[kGroup];
      load8(dout + r * C + g * kGroup, d[i]);
      load8(x + r * C + g * kGroup, xh[i]);
      load8(weight + g * kGroup, w);
      for (int j = 0; j < kGroup; ++j) {
        xh[i][j] = (xh[i][j] - m) * rs;
        dw[i][j] += d[i][j] * xh[i][j];
        db[i][j] += d[i][j];
        d[i][j] *= w[j];  // from here on, g = dout * weight
        sg += d[i][j];
        sgx += d[i][j] * xh[i][j];
      }
    }
    const float mean_g = warp_sum(sg) * inv_c, mean_gx = warp_sum(sgx) * inv_c;
#pragma unroll
    for (int i = 0; i < kN; ++i) {
      const int g = lane + 32 * i;
      if (g >= groups) break;
      float v[kGroup];
      for (int j = 0; j < kGroup; ++j) v[j] = layernorm_dx(d[i][j], xh[i][j], mean_g, mean_gx, rs);
      if (dresid) {
        float e[kGroup];
        load8(dresid + r * C + g * kGroup, e);
        for (int j = 0; j < kGroup; ++j) v[j] += e[j];
      }
      store8(dx + r * C + g * kGroup, v);
      if (dx_low) store8(dx_low + r * C + g * kGroup, v);
    }
  }
  for (int w = 0; w < kWarps; ++w) {  // warp by warp, in order: warp 0 writes, the others add
    if (warp == w) {
#pragma unroll
      for (int i = 0; i < kN; ++i) {
        const int g = lane + 32 * i;
        if (g >= groups) break;
        for (int j = 0; j < kGroup; ++j) {
          const int c = g * kGroup + j;
          block_sums[c] = (w == 0 ? 0.0f : block_sums[c]) + dw[i][j];
          block_sums[C + c] = (w == 0 ? 0.0f : block_sums[C + c]) + db[i][j];
        }
      }
    }
    __syncthreads();
  }
  float* part = scratch + static_cast<int64_t>(blockIdx.x) * 2 * C;
  for (int c = threadIdx.x; c < 2 * C; c += kThreads) part[c] = block_sums[c];
  reduce_block_partials(scratch, dweight, dbias, counter, C);
}

unsigned row_blocks(int64_t rows) { return static_cast<unsigned>((rows + kWarps - 1) / kWarps); }

// Groups per lane for the register-cached path: 1, 2, 3, 4 or (forward only: the backward keeps
// four arrays of them in registers) 8; 0 where it does not apply (a width no multiple of 8 or
// over max_groups * 256, or a buffer not 16-byte aligned).
int vec_groups(int64_t C, int max_groups, std::initializer_list<const void*> buffers) {
  if (C % kGroup != 0 || C > int64_t{max_groups} * 32 * kGroup) return 0;
  for (const void* p : buffers)
    if (p && !aligned16(p)) return 0;
  const int64_t per_lane = (C / kGroup + 31) / 32;
  return per_lane <= 4 ? static_cast<int>(per_lane) : 8;
}

template <typename TX, typename TO, int kN>
void launch_forward_vec(void* h, void* out, float* mean, float* rstd, const void* x, const void* y, const void* weight,
                        const void* bias, int64_t rows, int64_t C, float eps, cudaStream_t stream) {
  layernorm_forward_vec_kernel<TX, TO, kN><<<row_blocks(rows), kThreads, 0, stream>>>(
      static_cast<TX*>(h), static_cast<TO*>(out), mean, rstd, static_cast<const TX*>(x), static_cast<const TO*>(y),
      static_cast<const TX*>(weight), static_cast<const TX*>(bias), rows, static_cast<int>(C), eps);
}

template <typename TX, typename TO>
int forward_typed(void* h, void* out, float* mean, float* rstd, const void* x, const void* y, const void* weight,
                  const void* bias, int64_t rows, int64_t C, float eps, cudaStream_t stream) {
  if (rows == 0) return 0;
#define FRUGAL_LN_FORWARD_VEC(N) \
  launch_forward_vec<TX, TO, N>(h, out, mean, rstd, x, y, weight, bias, rows, C, eps, stream)
  switch (vec_groups(C, 8, {h, out, x, y, weight, bias})) {
    case 1:
      FRUGAL_LN_FORWARD_VEC(1);
      break;
    case 2:
      FRUGAL_LN_FORWARD_VEC(2);
      break;
    case 3:
      FRUGAL_LN_FORWARD_VEC(3);
      break;
    case 4:
      FRUGAL_LN_FORWARD_VEC(4);
      break;
    case 8:
      FRUGAL_LN_FORWARD_VEC(8);
      break;
    default:
      layernorm_forward_kernel<TX, TO><<<row_blocks(rows), kThreads, 0, stream>>>(
          static_cast<TX*>(h), static_cast<TO*>(out), mean, rstd, static_cast<const TX*>(x), static_cast<const TO*>(y),
          static_cast<const TX*>(weight), static_cast<const TX*>(bias), rows, static_cast<int>(C), eps);
  }
#undef FRUGAL_LN_FORWARD_VEC
  return launch_status();
}

int forward_dispatch(void* h, void* out, float* mean, float* rstd, const void* x, const void* y, const void* weight,
                     const void* bias, Dtype xt, Dtype ot, int64_t rows, int64_t C, float eps, cudaStream_t s) {
  if (xt == Dtype::kF32 && ot == Dtype::kF32)
    return forward_typed<float, float>(h, out, mean, rstd, x, y, weight, bias, rows, C, eps, s);
  if (xt == Dtype::kF32 && ot == Dtype::kBf16)
    return forward_typed<float, bf16>(h, out, mean, rstd, x, y, weight, bias, rows, C, eps, s);
  if (xt == Dtype::kBf16 && ot == Dtype::kF32)
    return forward_typed<bf16, float>(h, out, mean, rstd, x, y, weight, bias, rows, C, eps, s);
  return forward_typed<bf16, bf16>(h, out, mean, rstd, x, y, weight, bias, rows, C, eps, s);
}

template <typename TX, typename TO>
int backward_typed(void* dx, void* dx_low, const void* dout, const void* dresid, const void* x, const void* weight,
                   const float* mean, const float* rstd, float* dweight, float* dbias, float* scratch,
                   unsigned* counter, int64_t rows, int64_t C, int sm_count, cudaStream_t stream) {
  if (rows == 0) return 0;
  const auto blocks = static_cast<unsigned>(layernorm_backward_blocks(rows, sm_count));
  const size_t shared = 2 * static_cast<size_t>(C) * sizeof(float);
#define FRUGAL_LN_BACKWARD_VEC(N)                                                                                    \
  layernorm_backward_vec_kernel<TX, TO, N><<<blocks, kThreads, shared, stream>>>(                                    \
      static_cast<TX*>(dx), static_cast<TO*>(dx_low), static_cast<const TO*>(dout), static_cast<const TX*>(dresid),  \
      static_cast<const TX*>(x), static_cast<const TX*>(weight), mean, rstd, dweight, dbias, scratch, counter, rows, \
      static_cast<int>(C))
  switch (vec_groups(C, 4, {dx, dx_low, dout, dresid, x, weight})) {
    case 1:
      FRUGAL_LN_BACKWARD_VEC(1);
      break;
    case 2:
      FRUGAL_LN_BACKWARD_VEC(2);
      break;
    case 3:
      FRUGAL_LN_BACKWARD_VEC(3);
      break;
    case 4:
      FRUGAL_LN_BACKWARD_VEC(4);
      break;
    default:
      layernorm_backward_kernel<TX, TO><<<blocks, kThreads, 0, stream>>>(
          static_cast<TX*>(dx), static_cast<TO*>(dx_low), static_cast<const TO*>(dout), static_cast<const TX*>(dresid),
          static_cast<const TX*>(x), static_cast<const TX*>(weight), mean, rstd, dweight, dbias, scratch, counter, rows,
          static_cast<int>(C));
  }
#undef FRUGAL_LN_BACKWARD_VEC
  return launch_status();
}

}  // namespace

int layernorm_forward(void* out, Dtype ot, float* mean, float* rstd, const void* x, const void* weight,
                      const void* bias, Dtype xt, int64_t rows, int64_t C, float eps, void* stream) {
  return forward_dispatch(nullptr, out, mean, rstd, x, nullptr, weight, bias, xt, ot, rows, C, eps,
                          static_cast<cudaStream_t>(stream));
}

int residual_layernorm_forward(void* h, void* out, float* mean, float* rstd, const void* residual, const void* y,
                               const void* weight, const void* bias, Dtype xt, Dtype ot, int64_t rows, int64_t C,
                               float eps, void* stream) {
  return forward_dispatch(h, out, mean, rstd, residual, y, weight, bias, xt, ot, rows, C, eps,
                          static_cast<cudaStream_t>(stream));
}

size_t layernorm_backward_blocks(int64_t rows, int sm_count) {
  const int64_t by_rows = (rows + kWarps - 1) / kWarps;
  const int64_t cap = sm_count > 0 ? sm_count : 1;
  return static_cast<size_t>(by_rows < cap ? (by_rows < 1 ? 1 : by_rows) : cap);
}

size_t layernorm_backward_scratch_floats(int64_t rows, int64_t C, int sm_count) {
  return layernorm_backward_blocks(rows, sm_count) * 2 * static_cast<size_t>(C);
}

int layernorm_backward(void* dx, void* dx_low, const void* dout, const void* dresid, const void* x, const void* weight,
                       const float* mean, const float* rstd, Dtype xt, Dtype ot, float* dweight, float* dbias,
                       float* scratch, unsigned* counter, int64_t rows, int64_t C, int sm_count, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  if (xt == Dtype::kF32 && ot == Dtype::kF32)
    return backward_typed<float, float>(dx, dx_low, dout, dresid, x, weight, mean, rstd, dweight, dbias, scratch,
                                        counter, rows, C, sm_count, s);
  if (xt == Dtype::kF32 && ot == Dtype::kBf16)
    return backward_typed<float, bf16>(dx, dx_low, dout, dresid, x, weight, mean, rstd, dweight, dbias, scratch,
                                       counter, rows, C, sm_count, s);
  if (xt == Dtype::kBf16 && ot == Dtype::kF32)
    return backward_typed<bf16, float>(dx, dx_low, dout, dresid, x, weight, mean, rstd, dweight, dbias, scratch,
                                       counter, rows, C, sm_count, s);
  return backward_typed<bf16, bf16>(dx, dx_low, dout, dresid, x, weight, mean, rstd, dweight, dbias, scratch, counter,
                                    rows, C, sm_count, s);
}

}  // namespace frugal::kernels
