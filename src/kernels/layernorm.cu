// LayerNorm forward (alone, or after the residual add), and its backward in one kernel: the input
// gradient, the residual gradient added in, and the weight and bias gradients reduced in a fixed
// order (llm.c's fused_residual_forward and layernorm_backward, without float atomics so that a
// deterministic run gives the same bits). See kernels.h. Statistics and sums in fp32.
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

unsigned row_blocks(int64_t rows) { return static_cast<unsigned>((rows + kWarps - 1) / kWarps); }

template <typename TX, typename TO>
int forward_typed(void* h, void* out, float* mean, float* rstd, const void* x, const void* y, const void* weight,
                  const void* bias, int64_t rows, int64_t C, float eps, cudaStream_t stream) {
  if (rows == 0) return 0;
  layernorm_forward_kernel<TX, TO><<<row_blocks(rows), kThreads, 0, stream>>>(
      static_cast<TX*>(h), static_cast<TO*>(out), mean, rstd, static_cast<const TX*>(x), static_cast<const TO*>(y),
      static_cast<const TX*>(weight), static_cast<const TX*>(bias), rows, static_cast<int>(C), eps);
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
  layernorm_backward_kernel<TX, TO><<<blocks, kThreads, 0, stream>>>(
      static_cast<TX*>(dx), static_cast<TO*>(dx_low), static_cast<const TO*>(dout), static_cast<const TX*>(dresid),
      static_cast<const TX*>(x), static_cast<const TX*>(weight), mean, rstd, dweight, dbias, scratch, counter, rows,
      static_cast<int>(C));
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
