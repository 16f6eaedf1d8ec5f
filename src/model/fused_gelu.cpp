// The fused GELU autograd op; see fused_gelu.h.
#include "frugal/model/fused_gelu.h"

#include <torch/torch.h>

#include "frugal/core/compat.h"
#include "frugal/model/fp8.h"
#include "frugal/model/kernel_ops.h"
#include "frugal_build_config.h"  // FRUGAL_HAVE_KERNELS
#include "model/internal/gelu_kernel.h"

#if FRUGAL_HAVE_KERNELS
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include "kernels/kernels.h"
#include "model/internal/kernel_launch.h"
#endif

namespace frugal {
namespace {

bool own_kernel(const at::Tensor& x) {
  return x.device().is_cpu() && (x.scalar_type() == at::kFloat || x.scalar_type() == at::kBFloat16);
}

at::Tensor run_gelu_forward(const at::Tensor& input) {
  if (!own_kernel(input)) return at::gelu(input);
  // Named in profiles (the backward shows as the autograd node).
  RECORD_FUNCTION("frugal::fused_gelu", std::vector<c10::IValue>());
  at::Tensor x = input.contiguous();
  at::Tensor y = at::empty_like(x, at::MemoryFormat::Contiguous);
  if (x.scalar_type() == at::kFloat) {
    internal::gelu_forward_f32(x.data_ptr<float>(), y.data_ptr<float>(), x.numel(), at::get_num_threads());
  } else {
    internal::gelu_forward_bf16(reinterpret_cast<const uint16_t*>(x.data_ptr<at::BFloat16>()),
                                reinterpret_cast<uint16_t*>(y.data_ptr<at::BFloat16>()), x.numel(),
                                at::get_num_threads());
  }
  return y;
}

at::Tensor run_gelu_backward(const at::Tensor& grad, const at::Tensor& input) {
  if (!own_kernel(input) || grad.scalar_type() != input.scalar_type()) return at::gelu_backward(grad, input);
  at::Tensor x = input.contiguous(), dy = grad.contiguous();
  at::Tensor dx = at::empty_like(x, at::MemoryFormat::Contiguous);
  if (x.scalar_type() == at::kFloat) {
    internal::gelu_backward_f32(x.data_ptr<float>(), dy.data_ptr<float>(), dx.data_ptr<float>(), x.numel(),
                                at::get_num_threads());
  } else {
    auto bits = [](const at::Tensor& t) { return reinterpret_cast<uint16_t*>(t.data_ptr<at::BFloat16>()); };
    internal::gelu_backward_bf16(bits(x), bits(dy), bits(dx), x.numel(), at::get_num_threads());
  }
  return dx;
}

class GeluFunction : public torch::autograd::Function<GeluFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x) {
    ctx->save_for_backward({x});
    return run_gelu_forward(x);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad) {
    return {run_gelu_backward(grad[0], ctx->get_saved_variables()[0])};
  }
};

// GELU(u + b) on a 2-D float u, keeping GELU'(u + b) for the backward in place of u: the backward
// is then dx = dy * d plus the bias gradient's column sums, in one pass with no transcendental
// maths, and u (which only GELU's backward needed) is freed after the forward.
class BiasGeluFunction : public torch::autograd::Function<BiasGeluFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& u, const at::Tensor& bias) {
    RECORD_FUNCTION("frugal::linear_gelu", std::vector<c10::IValue>());
    at::Tensor x = u.contiguous(), b = bias.contiguous();
    at::Tensor y = at::empty_like(x, at::MemoryFormat::Contiguous);
    at::Tensor d = at::empty_like(x, at::MemoryFormat::Contiguous);
    internal::bias_gelu_forward_f32(x.data_ptr<float>(), b.data_ptr<float>(), y.data_ptr<float>(), d.data_ptr<float>(),
                                    x.size(0), x.size(1), at::get_num_threads());
    ctx->save_for_backward({d});
    return y;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad) {
    const at::Tensor d = ctx->get_saved_variables()[0];
    const at::Tensor dy = grad[0].contiguous();
    at::Tensor dx = at::empty_like(d, at::MemoryFormat::Contiguous);
    at::Tensor db = at::empty({d.size(1)}, d.options());
    internal::bias_gelu_backward_f32(d.data_ptr<float>(), dy.data_ptr<float>(), dx.data_ptr<float>(),
                                     db.data_ptr<float>(), d.size(0), d.size(1), at::get_num_threads());
    return {dx, db};
  }
};

// bias_gelu's ATen body: in float (double for double), rounded once to u's dtype.
at::ScalarType bias_gelu_compute_type(const at::Tensor& u) {
  return u.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
}

at::Tensor bias_gelu_reference(const at::Tensor& u2, const at::Tensor& bias, bool tanh_form) {
  const at::ScalarType ct = bias_gelu_compute_type(u2);
  return at::gelu(u2.to(ct) + bias.to(ct), tanh_form ? "tanh" : "none").to(u2.scalar_type());
}

// GELU(u + b) over rows of u2 (rows, F): frugal's kernels where `kernel`, else the ATen body.
class BiasGeluKernelFunction : public torch::autograd::Function<BiasGeluKernelFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& u, const at::Tensor& bias,
                            bool tanh_form, bool kernel) {
    const at::Tensor u2 = u.contiguous().view({-1, u.size(-1)}), b = bias.contiguous();
    at::Tensor y;
#if FRUGAL_HAVE_KERNELS
    if (kernel) {
      RECORD_FUNCTION("frugal::bias_gelu", std::vector<c10::IValue>());
      const c10::cuda::CUDAGuard device_guard(u2.device());
      y = at::empty_like(u2);
      check_kernel_launch(
          kernels::bias_gelu_forward(y.data_ptr(), u2.data_ptr(), kernel_dtype_of(u2.scalar_type()),
                                     b.data_ptr<float>(), u2.size(0), u2.size(1), tanh_form, kernel_stream(u2)),
          "bias_gelu_forward");
    }
#endif
    if (!y.defined()) y = bias_gelu_reference(u2, b, tanh_form);
    ctx->save_for_backward({u2, b});
    ctx->saved_data["tanh"] = tanh_form;
    ctx->saved_data["kernel"] = kernel;
    ctx->saved_data["sizes"] = u.sizes().vec();
    return y.view(u.sizes());
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &u2 = saved[0], &b = saved[1];
    const bool tanh_form = ctx->saved_data["tanh"].toBool();
    const at::Tensor dy = grad[0].to(u2.scalar_type()).contiguous().view(u2.sizes());
    const auto sizes = ctx->saved_data["sizes"].toIntVector();
#if FRUGAL_HAVE_KERNELS
    if (ctx->saved_data["kernel"].toBool()) {
      const c10::cuda::CUDAGuard device_guard(u2.device());
      at::Tensor du = at::empty_like(u2), db = at::empty({u2.size(1)}, b.options());
      const at::Tensor scratch = at::empty(
          {static_cast<int64_t>(kernels::bias_gelu_backward_scratch_floats(u2.size(0), u2.size(1)))}, b.options());
      check_kernel_launch(
          kernels::bias_gelu_backward(du.data_ptr(), db.data_ptr<float>(), dy.data_ptr(), u2.data_ptr(),
                                      kernel_dtype_of(u2.scalar_type()), b.data_ptr<float>(), scratch.data_ptr<float>(),
                                      u2.size(0), u2.size(1), tanh_form, kernel_stream(u2)),
          "bias_gelu_backward");
      return {du.view(sizes), db, at::Tensor(), at::Tensor()};
    }
#endif
    const at::ScalarType ct = bias_gelu_compute_type(u2);
    const at::Tensor d = at::gelu_backward(dy.to(ct), u2.to(ct) + b.to(ct), tanh_form ? "tanh" : "none");
    return {d.to(u2.scalar_type()).view(sizes), d.sum(0).to(b.scalar_type()), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor bias_gelu(const at::Tensor& u, const at::Tensor& bias, bool tanh_form, bool gpu_kernels) {
  TORCH_CHECK(u.dim() >= 1 && bias.dim() == 1 && bias.size(0) == u.size(-1),
              "bias_gelu: the bias must be 1-D of the input's last size ", u.dim() >= 1 ? u.size(-1) : 0, ", got ",
              bias.sizes(), " for an input of shape ", u.sizes());
  TORCH_CHECK(bias.device() == u.device(), "bias_gelu: the bias is on ", bias.device(), ", the input on ", u.device());
  TORCH_CHECK(at::isFloatingType(u.scalar_type()) && at::isFloatingType(bias.scalar_type()),
              "bias_gelu: the input and the bias must be floating point, got ", u.scalar_type(), " and ",
              bias.scalar_type());
  const bool kernel = gpu_kernels && cuda_kernels_run_on(u) &&
                      (u.scalar_type() == at::kFloat || u.scalar_type() == at::kBFloat16) &&
                      bias.scalar_type() == at::kFloat;
  return BiasGeluKernelFunction::apply(u, bias, tanh_form, kernel);
}

at::Tensor linear_gelu(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  const bool float_cpu = bias.defined() && x.device().is_cpu() && x.scalar_type() == at::kFloat &&
                         weight.scalar_type() == at::kFloat && bias.scalar_type() == at::kFloat &&
                         !compat::autocast_enabled(c10::DeviceType::CPU) && !fp8::enabled();
  const bool shapes = weight.dim() == 2 && bias.dim() == 1 && bias.size(0) == weight.size(0) && x.dim() >= 1;
  const bool training =
      torch::GradMode::is_enabled() && (x.requires_grad() || weight.requires_grad() || bias.requires_grad());
  const bool fused = float_cpu && shapes && training;
  if (!fused) return fused_gelu(fp8::linear_or_aten(x, weight, bias));
  std::vector<int64_t> sizes = x.sizes().vec();
  sizes.back() = weight.size(0);
  const at::Tensor u = x.reshape({-1, x.size(-1)}).mm(weight.t());
  return BiasGeluFunction::apply(u, bias).view(sizes);
}

at::Tensor fused_gelu(const at::Tensor& x) {
  if (!x.requires_grad() || !torch::GradMode::is_enabled()) return run_gelu_forward(x);
  return GeluFunction::apply(x);
}

}  // namespace frugal
