// The fused GELU autograd op; see fused_gelu.h.
#include "frugal/model/fused_gelu.h"

#include <torch/torch.h>

#include "frugal/core/compat.h"
#include "frugal/model/fp8.h"
#include "model/internal/gelu_kernel.h"

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

}  // namespace

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
