// FP8 linear layers; see fp8.h.
#include "frugal/model/fp8.h"

#include <ATen/ATen.h>
#include <c10/core/DispatchKeySet.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/autograd.h>

#include <limits>

#include "frugal/core/compat.h"
#include "frugal/model/kernel_ops.h"
#include "frugal/model/working_weights.h"
#include "frugal_build_config.h"  // FRUGAL_HAVE_KERNELS

#if FRUGAL_HAVE_KERNELS
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include <cmath>

#include "kernels/kernels.h"
#include "model/internal/kernel_launch.h"
#endif

namespace frugal::fp8 {
namespace {

thread_local bool fp8_on = false;
thread_local bool fp8_kernels = false;

constexpr at::ScalarType kForward = at::kFloat8_e4m3fn;
constexpr at::ScalarType kGradient = at::kFloat8_e5m2;

double format_max(at::ScalarType format) { return format == kGradient ? kE5m2Max : kE4m3Max; }

// The three products, with the dequantized operands kept and reused by the backward.
class Fp8LinearFunction : public torch::autograd::Function<Fp8LinearFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight) {
    // The products run in the dtypes chosen here, whatever autocast is on around them (an
    // activation-checkpointing recompute runs under the forward's autocast).
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    const bool kernel = cast_kernels();
    const auto [x8, sx] = cast(x.reshape({-1, x.size(-1)}), kForward, kernel);
    const auto [w8, sw] = cast(weight, kForward, kernel);
    ctx->save_for_backward({x8, sx, w8, sw});
    ctx->saved_data["x_sizes"] = x.sizes().vec();
    ctx->saved_data["kernel"] = kernel;  // the backward runs on autograd's thread
    std::vector<int64_t> sizes = x.sizes().vec();
    sizes.back() = weight.size(0);
    return scaled_product(x8, sx, w8, sw, x.scalar_type()).view(sizes);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad) {
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &x8 = saved[0], &sx = saved[1], &w8 = saved[2], &sw = saved[3];
    const auto [g8, sg] = cast(grad[0].reshape({-1, grad[0].size(-1)}), kGradient, ctx->saved_data["kernel"].toBool());
    at::Tensor dx, dw;
    // dx (M, K) = dy (M, N) W (N, K); dW (N, K) = dy^T (N, M) x (M, K). scaled_product takes its
    // second operand transposed, so W^T and x^T go in (fp8 copies: a byte an element).
    if (ctx->needs_input_grad(0))
      dx = scaled_product(g8, sg, w8.t().contiguous(), sw, grad[0].scalar_type())
               .view(ctx->saved_data["x_sizes"].toIntVector());
    if (ctx->needs_input_grad(1)) dw = scaled_product(g8.t().contiguous(), sg, x8.t().contiguous(), sx, at::kFloat);
    return {dx, dw};
  }
};

#if FRUGAL_HAVE_KERNELS
Cast kernel_cast(const at::Tensor& t, at::ScalarType format) {
  const c10::cuda::CUDAGuard guard(t.device());
  const at::Tensor x = t.contiguous();
  const at::Tensor amax = at::linalg_vector_norm(x, INFINITY).to(at::kFloat);
  Cast c{at::empty(x.sizes(), x.options().dtype(format)), at::empty({}, x.options().dtype(at::kFloat))};
  check_kernel_launch(kernels::fp8_scaled_cast(c.data.data_ptr(), x.data_ptr(), kernel_dtype_of(x.scalar_type()),
                                               x.numel(), format == kGradient, amax.data_ptr<float>(),
                                               c.scale.data_ptr<float>(), kernel_stream(x)),
                      "fp8_scaled_cast");
  return c;
}
#endif

}  // namespace

bool enabled() { return fp8_on; }
bool cast_kernels() { return fp8_kernels; }

Scope::Scope(bool on, bool cast_kernels) : previous_(fp8_on), previous_kernels_(fp8_kernels) {
  fp8_on = on;
  fp8_kernels = cast_kernels;
}
Scope::~Scope() {
  fp8_on = previous_;
  fp8_kernels = previous_kernels_;
}

Cast cast(const at::Tensor& t, at::ScalarType format, bool kernel) {
#if FRUGAL_HAVE_KERNELS
  if (kernel && t.is_cuda() && (t.scalar_type() == at::kFloat || t.scalar_type() == at::kBFloat16) &&
      cuda_kernels_run_on(t))
    return kernel_cast(t, format);
#endif
  (void)kernel;
  const at::Tensor s = scale_of(t, format);
  return {quantize(t, s, format), s};
}

at::Tensor scale_of(const at::Tensor& t, at::ScalarType format) {
  // One pass, no |t| temporary (the fp8 cast kernel's amax is the same reduction).
  const at::Tensor amax = at::linalg_vector_norm(t, std::numeric_limits<double>::infinity()).to(at::kDouble);
  return (format_max(format) / amax.clamp_min(1e-12)).to(at::kFloat);
}

at::Tensor quantize(const at::Tensor& t, const at::Tensor& scale, at::ScalarType format) {
  const double m = format_max(format);
  return (t.to(at::kFloat) * scale).clamp(-m, m).to(format);
}

at::Tensor scaled_product(const at::Tensor& a, const at::Tensor& sa, const at::Tensor& b, const at::Tensor& sb,
                          at::ScalarType out) {
  if (a.is_cuda())
    return at::_scaled_mm(a.contiguous(), b.contiguous().t(), sa.reciprocal(), sb.reciprocal(), c10::nullopt,
                          c10::nullopt, out);
  return at::mm(a.to(at::kFloat) / sa, (b.to(at::kFloat) / sb).t()).to(out);
}

bool eligible(const at::Tensor& x, const at::Tensor& weight) {
  if (!x.defined() || !weight.defined() || weight.dim() != 2 || x.dim() < 1) return false;
  if (!at::isFloatingType(x.scalar_type()) || !at::isFloatingType(weight.scalar_type())) return false;
  const int64_t k = x.size(-1);
  const int64_t rows = k > 0 ? x.numel() / k : 0;
  return rows > 0 && rows % 16 == 0 && k % 16 == 0 && weight.size(1) == k && weight.size(0) % 16 == 0;
}

at::Tensor linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  // The input in autocast's dtype, as F.linear would take it (and torchao's Float8Linear does).
  const c10::DeviceType dev = x.device().type();
  const at::Tensor input = compat::autocast_enabled(dev) ? x.to(compat::autocast_dtype(dev)) : x;
  at::Tensor y = Fp8LinearFunction::apply(input, weight);
  return bias.defined() ? y + bias.to(y.scalar_type()) : y;
}

at::Tensor linear_or_aten(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  if (enabled() && eligible(x, weight)) return linear(x, weight, bias);
  return at::linear(x, working_weight(weight), working_weight(bias));
}

bool gpu_supports_fp8(int major, int minor) { return major > 8 || (major == 8 && minor >= 9); }

}  // namespace frugal::fp8
