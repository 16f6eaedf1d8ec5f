// RMSNorm and SwiGLU as autograd ops; see fused_llama.h.
#include "frugal/model/fused_llama.h"

#include <torch/torch.h>

#include "frugal/core/compat.h"
#include "frugal/model/kernel_ops.h"
#include "frugal_build_config.h"  // FRUGAL_HAVE_KERNELS
#include "model/internal/llama_kernel.h"

#if FRUGAL_HAVE_KERNELS
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include "kernels/kernels.h"
#include "model/internal/kernel_launch.h"
#endif

namespace frugal {
namespace {

bool own_cpu(const at::Tensor& x) {
  return x.device().is_cpu() && (x.scalar_type() == at::kFloat || x.scalar_type() == at::kBFloat16);
}

uint16_t* bf16_bits(const at::Tensor& t) { return reinterpret_cast<uint16_t*>(t.data_ptr<at::BFloat16>()); }
float* fp(const at::Tensor& t) { return t.data_ptr<float>(); }

bool llama_kernel_dtype(at::ScalarType t) { return t == at::kFloat || t == at::kBFloat16; }

// The GPU half of the ops below: frugal's kernels (src/kernels/llama.cu) on a CUDA tensor. Each
// returns false, having done nothing, where this build has no kernels.
bool rms_forward_gpu(const at::Tensor& x2, const at::Tensor& w, double eps, const at::Tensor& y,
                     const at::Tensor& rstd) {
#if FRUGAL_HAVE_KERNELS
  const c10::cuda::CUDAGuard guard(x2.device());
  check_kernel_launch(kernels::rmsnorm_forward(y.data_ptr(), kernel_dtype_of(y.scalar_type()), rstd.data_ptr<float>(),
                                               x2.data_ptr(), kernel_dtype_of(x2.scalar_type()), w.data_ptr<float>(),
                                               x2.size(0), x2.size(1), static_cast<float>(eps), kernel_stream(x2)),
                      "rmsnorm_forward");
  return true;
#else
  (void)x2, (void)w, (void)eps, (void)y, (void)rstd;
  return false;
#endif
}

// dresid (x2's dtype) is added into dx; dx_low (dy's dtype) gets the same values: both may be
// undefined.
bool rms_backward_gpu(const at::Tensor& x2, const at::Tensor& w, const at::Tensor& rstd, const at::Tensor& dy,
                      const at::Tensor& dx, const at::Tensor& dw, const at::Tensor& dresid = {},
                      const at::Tensor& dx_low = {}) {
#if FRUGAL_HAVE_KERNELS
  const c10::cuda::CUDAGuard guard(x2.device());
  const at::Tensor scratch =
      at::empty({static_cast<int64_t>(kernels::rmsnorm_backward_scratch_floats(x2.size(0), x2.size(1)))}, dw.options());
  check_kernel_launch(kernels::rmsnorm_backward(
                          dx.data_ptr(), dx_low.defined() ? dx_low.data_ptr() : nullptr, dy.data_ptr(),
                          kernel_dtype_of(dy.scalar_type()), dresid.defined() ? dresid.data_ptr() : nullptr,
                          x2.data_ptr(), kernel_dtype_of(x2.scalar_type()), w.data_ptr<float>(), rstd.data_ptr<float>(),
                          dw.data_ptr<float>(), scratch.data_ptr<float>(), x2.size(0), x2.size(1), kernel_stream(x2)),
                      "rmsnorm_backward");
  return true;
#else
  (void)x2, (void)w, (void)rstd, (void)dy, (void)dx, (void)dw, (void)dresid, (void)dx_low;
  return false;
#endif
}

bool swiglu_gpu(const at::Tensor& gu2, const at::Tensor& dact, const at::Tensor& out) {
#if FRUGAL_HAVE_KERNELS
  const c10::cuda::CUDAGuard guard(gu2.device());
  const int64_t rows = gu2.size(0), cols = gu2.size(1) / 2;
  if (dact.defined())
    check_kernel_launch(kernels::swiglu_backward(out.data_ptr(), gu2.data_ptr(), dact.data_ptr(),
                                                 kernel_dtype_of(gu2.scalar_type()), rows, cols, kernel_stream(gu2)),
                        "swiglu_backward");
  else
    check_kernel_launch(kernels::swiglu_forward(out.data_ptr(), gu2.data_ptr(), kernel_dtype_of(gu2.scalar_type()),
                                                rows, cols, kernel_stream(gu2)),
                        "swiglu_forward");
  return true;
#else
  (void)gu2, (void)dact, (void)out;
  return false;
#endif
}

// x2: (rows, cols) contiguous float or bf16; w: (cols,) float. Returns y in out_dtype and rstd.
std::pair<at::Tensor, at::Tensor> rms_forward(const at::Tensor& x2, const at::Tensor& w, double eps,
                                              c10::ScalarType out_dtype) {
  RECORD_FUNCTION("frugal::fused_rms_norm", std::vector<c10::IValue>());
  const int64_t rows = x2.size(0), cols = x2.size(1);
  at::Tensor y = at::empty({rows, cols}, x2.options().dtype(out_dtype));
  at::Tensor rstd = at::empty({rows}, x2.options().dtype(at::kFloat));
  if (x2.is_cuda() && rms_forward_gpu(x2, w, eps, y, rstd)) return {y, rstd};
  const int threads = at::get_num_threads();
  const float e = static_cast<float>(eps);
  if (x2.scalar_type() == at::kFloat && out_dtype == at::kFloat) {
    internal::rms_norm_forward_f32(fp(x2), fp(w), fp(y), fp(rstd), rows, cols, e, threads);
  } else if (x2.scalar_type() == at::kFloat) {
    internal::rms_norm_forward_f32_bf16(fp(x2), fp(w), bf16_bits(y), fp(rstd), rows, cols, e, threads);
  } else {
    internal::rms_norm_forward_bf16(bf16_bits(x2), fp(w), bf16_bits(y), fp(rstd), rows, cols, e, threads);
  }
  return {y, rstd};
}

class RmsNormFunction : public torch::autograd::Function<RmsNormFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                            double eps, int64_t out_dtype) {
    const at::Tensor x2 = x.contiguous().view({-1, x.size(-1)});
    auto [y, rstd] = rms_forward(x2, weight.contiguous(), eps, static_cast<c10::ScalarType>(out_dtype));
    ctx->save_for_backward({x2, weight, rstd});
    ctx->saved_data["sizes"] = x.sizes().vec();
    return y.view(x.sizes());
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& x2 = saved[0];
    const at::Tensor w = saved[1].contiguous();
    const at::Tensor& rstd = saved[2];
    const bool x_float = x2.scalar_type() == at::kFloat;
    // dy in float or bf16 for a float x, in bf16 for a bf16 x.
    at::Tensor dy = grad[0].contiguous().view({x2.size(0), x2.size(1)});
    if ((!x_float && !x2.is_cuda()) || !llama_kernel_dtype(dy.scalar_type()))
      dy = dy.to(x_float ? at::kFloat : at::kBFloat16).contiguous();
    at::Tensor dx = at::empty_like(x2);
    at::Tensor dw = at::empty({x2.size(1)}, x2.options().dtype(at::kFloat));
    const auto sizes = ctx->saved_data["sizes"].toIntVector();
    if (x2.is_cuda() && rms_backward_gpu(x2, w, rstd, dy, dx, dw))  // the kernel takes any dy dtype of the two
      return {dx.view(sizes), dw.to(saved[1].scalar_type()), at::Tensor(), at::Tensor()};
    const bool dy_float = dy.scalar_type() == at::kFloat;
    internal::rms_norm_backward(x_float ? fp(x2) : nullptr, x_float ? nullptr : bf16_bits(x2), fp(w), fp(rstd),
                                dy_float ? fp(dy) : nullptr, dy_float ? nullptr : bf16_bits(dy),
                                x_float ? fp(dx) : nullptr, x_float ? nullptr : bf16_bits(dx), fp(dw), x2.size(0),
                                x2.size(1), at::get_num_threads());
    return {dx.view(sizes), dw.to(saved[1].scalar_type()), at::Tensor(), at::Tensor()};
  }
};

at::Tensor swiglu_forward(const at::Tensor& gu2) {
  RECORD_FUNCTION("frugal::fused_swiglu", std::vector<c10::IValue>());
  const int64_t rows = gu2.size(0), cols = gu2.size(1) / 2;
  at::Tensor act = at::empty({rows, cols}, gu2.options());
  if (gu2.is_cuda() && swiglu_gpu(gu2, at::Tensor(), act)) return act;
  if (gu2.scalar_type() == at::kFloat)
    internal::swiglu_forward_f32(fp(gu2), fp(act), rows, cols, at::get_num_threads());
  else
    internal::swiglu_forward_bf16(bf16_bits(gu2), bf16_bits(act), rows, cols, at::get_num_threads());
  return act;
}

class SwigluFunction : public torch::autograd::Function<SwigluFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& gate_up) {
    const at::Tensor gu2 = gate_up.contiguous().view({-1, gate_up.size(-1)});
    ctx->save_for_backward({gu2});
    ctx->saved_data["sizes"] = gate_up.sizes().vec();
    std::vector<int64_t> out = gate_up.sizes().vec();
    out.back() /= 2;
    return swiglu_forward(gu2).view(out);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad) {
    const at::Tensor gu2 = ctx->get_saved_variables()[0];
    const int64_t rows = gu2.size(0), cols = gu2.size(1) / 2;
    const at::Tensor dact = grad[0].to(gu2.scalar_type()).contiguous().view({rows, cols});
    at::Tensor dgu = at::empty_like(gu2);
    if (gu2.is_cuda() && swiglu_gpu(gu2, dact, dgu)) return {dgu.view(ctx->saved_data["sizes"].toIntVector())};
    if (gu2.scalar_type() == at::kFloat)
      internal::swiglu_backward_f32(fp(gu2), fp(dact), fp(dgu), rows, cols, at::get_num_threads());
    else
      internal::swiglu_backward_bf16(bf16_bits(gu2), bf16_bits(dact), bf16_bits(dgu), rows, cols,
                                     at::get_num_threads());
    return {dgu.view(ctx->saved_data["sizes"].toIntVector())};
  }
};

#if FRUGAL_HAVE_KERNELS
void rope_launch(bool backward, const at::Tensor& packed, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                 const at::Tensor& cos, const at::Tensor& sin, int64_t H, int64_t K) {
  const c10::cuda::CUDAGuard guard(packed.device());
  const int64_t B = packed.size(0), T = packed.size(1), D = packed.size(2) / (H + 2 * K);
  check_kernel_launch(kernels::rope_split(backward, packed.data_ptr(), q.data_ptr(), k.data_ptr(), v.data_ptr(),
                                          kernel_dtype_of(packed.scalar_type()), cos.data_ptr<float>(),
                                          sin.data_ptr<float>(), B, T, H, K, D, kernel_stream(packed)),
                      "rope_split");
}

// h = x + y and the RMSNorm of h, one kernel each way; see residual_rms_norm.
class ResidualRmsNormFunction : public torch::autograd::Function<ResidualRmsNormFunction> {
 public:
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                                                const at::Tensor& y, const at::Tensor& weight, double eps) {
    const int64_t C = x.size(-1);
    const at::Tensor x2 = x.contiguous().view({-1, C}), y2 = y.contiguous().view({-1, C}), w = weight.contiguous();
    at::Tensor h = at::empty_like(x2), out = at::empty_like(y2);
    at::Tensor rstd = at::empty({x2.size(0)}, x2.options().dtype(at::kFloat));
    const c10::cuda::CUDAGuard guard(x2.device());
    check_kernel_launch(kernels::residual_rmsnorm_forward(
                            h.data_ptr(), out.data_ptr(), kernel_dtype_of(out.scalar_type()), rstd.data_ptr<float>(),
                            x2.data_ptr(), y2.data_ptr(), kernel_dtype_of(x2.scalar_type()), w.data_ptr<float>(),
                            x2.size(0), C, static_cast<float>(eps), kernel_stream(x2)),
                        "residual_rmsnorm_forward");
    ctx->save_for_backward({h, w, rstd});
    ctx->saved_data["sizes"] = x.sizes().vec();
    ctx->saved_data["y_dtype"] = static_cast<int64_t>(y.scalar_type());
    return {h.view(x.sizes()), out.view(x.sizes())};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &h = saved[0], &w = saved[1], &rstd = saved[2];
    const auto sizes = ctx->saved_data["sizes"].toIntVector();
    const int64_t C = h.size(1);
    const auto low = static_cast<at::ScalarType>(ctx->saved_data["y_dtype"].toInt());
    at::Tensor dh = grad[0].defined() ? grad[0].to(h.scalar_type()).contiguous().view({-1, C}) : at::Tensor();
    if (!grad[1].defined()) {  // the normed output unused: the sum's gradient alone
      const at::Tensor d = dh.defined() ? dh : at::zeros_like(h);
      return {d.view(sizes), d.to(low).view(sizes), at::zeros_like(w), at::Tensor()};
    }
    const at::Tensor dy = grad[1].to(low).contiguous().view({-1, C});  // the normed output's dtype: y's
    at::Tensor dx = at::empty_like(h), dx_low = at::empty_like(dy), dw = at::empty_like(w);
    rms_backward_gpu(h, w, rstd, dy, dx, dw, dh, dx_low);
    return {dx.view(sizes), dx_low.view(sizes).to(low), dw, at::Tensor()};
  }
};

// q, k rotated and v in the attention's layout, from the packed projection; see rope_split.
class RopeSplitFunction : public torch::autograd::Function<RopeSplitFunction> {
 public:
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const at::Tensor& qkv,
                                                const at::Tensor& cos, const at::Tensor& sin, int64_t H, int64_t K) {
    const at::Tensor x = qkv.contiguous();
    const int64_t B = x.size(0), T = x.size(1), D = x.size(2) / (H + 2 * K);
    at::Tensor q = at::empty({B, H, T, D}, x.options()), k = at::empty({B, K, T, D}, x.options());
    at::Tensor v = at::empty({B, K, T, D}, x.options());
    rope_launch(false, x, q, k, v, cos, sin, H, K);
    ctx->save_for_backward({cos, sin});
    ctx->saved_data["H"] = H;
    ctx->saved_data["K"] = K;
    ctx->saved_data["sizes"] = x.sizes().vec();
    return {q, k, v};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad) {
    const auto saved = ctx->get_saved_variables();
    const int64_t H = ctx->saved_data["H"].toInt(), K = ctx->saved_data["K"].toInt();
    const auto sizes = ctx->saved_data["sizes"].toIntVector();
    const int64_t B = sizes[0], T = sizes[1], D = sizes[2] / (H + 2 * K);
    const auto options = saved[0].options().dtype(grad[0].defined()   ? grad[0].scalar_type()
                                                  : grad[1].defined() ? grad[1].scalar_type()
                                                                      : grad[2].scalar_type());
    auto part = [&](const at::Tensor& g, int64_t heads) {  // an output without a gradient contributes none
      return g.defined() ? g.to(options.dtype()).contiguous() : at::zeros({B, heads, T, D}, options);
    };
    const at::Tensor dq = part(grad[0], H), dk = part(grad[1], K), dv = part(grad[2], K);
    at::Tensor dqkv = at::empty(sizes, options);
    rope_launch(true, dqkv, dq, dk, dv, saved[0], saved[1], H, K);
    return {dqkv, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};
#endif

bool needs_grad(std::initializer_list<at::Tensor> ts) {
  if (!torch::GradMode::is_enabled()) return false;
  for (const auto& t : ts)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

}  // namespace

at::Tensor rms_norm_reference(const at::Tensor& x, const at::Tensor& weight, double eps) {
  const at::Tensor xf = x.to(at::kFloat);
  const at::Tensor variance = xf.pow(2).mean(-1, /*keepdim=*/true);
  return weight * (xf * at::rsqrt(variance + eps)).to(x.scalar_type());
}

at::Tensor fused_rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps, c10::ScalarType out_dtype,
                          bool gpu_kernels) {
  const bool here = own_cpu(x) || (gpu_kernels && llama_kernel_dtype(x.scalar_type()) && cuda_kernels_run_on(x));
  const bool ours = here && weight.device() == x.device() && weight.scalar_type() == at::kFloat && weight.dim() == 1 &&
                    weight.size(0) == x.size(-1) &&
                    (out_dtype == at::kBFloat16 || (out_dtype == at::kFloat && x.scalar_type() == at::kFloat));
  if (!ours) {
    // Under autocast the reference's product with the weight would run in autocast's rules; the
    // norm is computed outside it, as transformers' module does in fp32.
    return rms_norm_reference(x, weight, eps).to(out_dtype);
  }
  if (!needs_grad({x, weight})) {
    const at::Tensor x2 = x.contiguous().view({-1, x.size(-1)});
    return rms_forward(x2, weight.contiguous(), eps, out_dtype).first.view(x.sizes());
  }
  return RmsNormFunction::apply(x, weight, eps, static_cast<int64_t>(out_dtype));
}

std::pair<at::Tensor, at::Tensor> residual_rms_norm(const at::Tensor& x, const at::Tensor& y, const at::Tensor& weight,
                                                    double eps, c10::ScalarType out_dtype, bool gpu_kernels) {
  const bool kernel = cuda_kernels_built() && gpu_kernels && x.is_cuda() && llama_kernel_dtype(x.scalar_type()) &&
                      y.scalar_type() == out_dtype && llama_kernel_dtype(out_dtype) && y.sizes() == x.sizes() &&
                      y.device() == x.device() && weight.device() == x.device() && weight.scalar_type() == at::kFloat &&
                      weight.dim() == 1 && weight.size(0) == x.size(-1) && cuda_kernels_run_on(x);
#if FRUGAL_HAVE_KERNELS
  if (kernel) {
    const auto r = ResidualRmsNormFunction::apply(x, y, weight, eps);
    return {r[0], r[1]};
  }
#else
  (void)kernel;
#endif
  const at::Tensor h = x + y;
  return {h, fused_rms_norm(h, weight, eps, out_dtype, gpu_kernels)};
}

bool rope_split_runs(const at::Tensor& qkv, const at::Tensor& cos, const at::Tensor& sin, int64_t H, int64_t K) {
  if (!cuda_kernels_built() || !qkv.is_cuda() || qkv.dim() != 3 || !llama_kernel_dtype(qkv.scalar_type())) return false;
  const int64_t slots = H + 2 * K;
  if (H < 1 || K < 1 || qkv.size(2) % slots != 0 || (qkv.size(2) / slots) % 2 != 0) return false;
  const auto table = [&](const at::Tensor& t) {
    return t.defined() && t.device() == qkv.device() && t.scalar_type() == at::kFloat && t.dim() == 2 &&
           t.size(0) >= qkv.size(1) && t.size(1) == qkv.size(2) / slots / 2;
  };
  return table(cos) && table(sin) && cuda_kernels_run_on(qkv);
}

std::vector<at::Tensor> rope_split(const at::Tensor& qkv, const at::Tensor& cos, const at::Tensor& sin, int64_t H,
                                   int64_t K) {
  TORCH_CHECK(rope_split_runs(qkv, cos, sin, H, K), "rope_split: frugal's kernel does not run on qkv ", qkv.sizes(),
              " ", qkv.scalar_type(), " on ", qkv.device(), " (see rope_split_runs)");
#if FRUGAL_HAVE_KERNELS
  return RopeSplitFunction::apply(qkv, cos.contiguous(), sin.contiguous(), H, K);
#else
  (void)sin;
  return {};
#endif
}

at::Tensor swiglu_reference(const at::Tensor& gate_up) {
  const auto halves = gate_up.chunk(2, -1);
  return at::silu(halves[0]) * halves[1];
}

at::Tensor fused_swiglu(const at::Tensor& gate_up, bool gpu_kernels) {
  const bool here =
      own_cpu(gate_up) || (gpu_kernels && llama_kernel_dtype(gate_up.scalar_type()) && cuda_kernels_run_on(gate_up));
  if (!here || gate_up.size(-1) % 2 != 0) return swiglu_reference(gate_up);
  if (!needs_grad({gate_up})) {
    std::vector<int64_t> out = gate_up.sizes().vec();
    out.back() /= 2;
    return swiglu_forward(gate_up.contiguous().view({-1, gate_up.size(-1)})).view(out);
  }
  return SwigluFunction::apply(gate_up);
}

}  // namespace frugal
