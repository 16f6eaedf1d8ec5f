// FP8 linear layers (precision.mode = "fp8"; docs/levers.md, "fp8 linears").
//
// While an fp8::Scope is on (the training step's forward, like autocast), the linear layers of
// frugal's GPT and Llama blocks run as three fp8 products, the recipe torchao calls "tensorwise"
// (Float8LinearConfig's default):
//   forward        y  = x W^T        x and W in e4m3
//   grad of input  dx = dy W         dy in e5m2, W in e4m3
//   grad of weight dW = dy^T x       dy in e5m2, x in e4m3
// Each operand gets one scale, computed from its own absolute maximum at the moment it is cast
// (current scaling: max / amax maps the largest magnitude onto the format's largest finite value).
// The input is first cast to the autocast dtype, as F.linear's would be; the weight is cast from the
// fp32 master. The output is in the input's (autocast) dtype; the weight's gradient is accumulated in
// fp32; the bias is added after the product, in the output's dtype. No state outlives a step, so the
// final weights and the checkpoints are those of any other precision, and a resume is exact.
//
// On a GPU each product is one at::_scaled_mm (Ada and Hopper, compute capability 8.9+); elsewhere
// the product of the dequantized operands in fp32, which is what torchao's `emulate` mode computes
// (ATen's CPU _scaled_mm gives the same values but is a reference loop, minutes for one layer of a
// 124M model). The heads, the embeddings and attention stay in the autocast dtype.
#pragma once

#include <ATen/core/Tensor.h>

namespace frugal::fp8 {

inline constexpr double kE4m3Max = 448.0;    // largest finite float8_e4m3fn
inline constexpr double kE5m2Max = 57344.0;  // largest finite float8_e5m2

// Whether this thread's linears run in fp8 now.
bool enabled();
// Whether their casts run frugal's fp8 cast kernel (src/kernels/fp8_cast.cu: the amax's scale, the
// product and the rounding in one pass) where it can: a CUDA tensor of fp32 or bf16 and a build
// with kernels that run on its GPU. Else the ATen operations of scale_of and quantize. The run's
// model.kernels = "frugal" turns it on.
bool cast_kernels();

// Turns fp8 linears on (or off) for this thread until destroyed; restores the previous setting.
class Scope {
 public:
  explicit Scope(bool on, bool cast_kernels = false);
  ~Scope();
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  bool previous_, previous_kernels_;
};

// The tensorwise scale of `t` for `format` (at::kFloat8_e4m3fn or at::kFloat8_e5m2): the format's
// largest finite value / max(amax(|t|), 1e-12), computed in double and kept as a float32 scalar on
// t's device (torchao's amax_to_scale).
at::Tensor scale_of(const at::Tensor& t, at::ScalarType format);

// t * scale in float32, saturated to the format's finite range, rounded to the format.
at::Tensor quantize(const at::Tensor& t, const at::Tensor& scale, at::ScalarType format);

// An fp8 tensor and its float32 scalar scale: scale_of and quantize, or the cast kernel where
// `kernel` and it can run (same values).
struct Cast {
  at::Tensor data, scale;
};
Cast cast(const at::Tensor& t, at::ScalarType format, bool kernel);

// (a / sa) (b / sb)^T in `out`, for fp8 a (M, K) and b (N, K) with float32 scalar scales.
at::Tensor scaled_product(const at::Tensor& a, const at::Tensor& sa, const at::Tensor& b, const at::Tensor& sb,
                          at::ScalarType out);

// Whether x W^T can run in fp8: x floating with at least one row, W 2-D, and the three products'
// dimensions (x's rows, in_features, out_features) multiples of 16, as the GPU's fp8 products need.
// Others run at::linear, here and on the GPU alike.
bool eligible(const at::Tensor& x, const at::Tensor& weight);

// x W^T + b through the three fp8 products above (b may be undefined).
at::Tensor linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias);

// `linear` where enabled() and eligible(x, weight), else at::linear.
at::Tensor linear_or_aten(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias);

// Whether a GPU of this compute capability has fp8 tensor cores (8.9: Ada; 9.0: Hopper; and newer).
bool gpu_supports_fp8(int major, int minor);

}  // namespace frugal::fp8
