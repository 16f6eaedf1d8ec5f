// NF4 quantisation and the product over an NF4 weight; see nf4.h.
#include "frugal/model/nf4.h"

#include <torch/torch.h>

#include <fmt/format.h>

#include "frugal/core/compat.h"
#include "frugal/core/errors.h"

namespace frugal {
namespace {

// torchao's table (QLoRA's), written as it writes it: each a float rounded to bf16.
const std::vector<float> kLevels = {-1.0000f, -0.6962f, -0.5251f, -0.3949f, -0.2844f, -0.1848f, -0.0911f, 0.0000f,
                                    0.0796f,  0.1609f,  0.2461f,  0.3379f,  0.4407f,  0.5626f,  0.7230f,  1.0000f};
constexpr int64_t kChunk = int64_t{1} << 20;  // values matched against the levels at a time

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// `t` (1-D) padded with zeros to `n` elements.
at::Tensor pad_to(const at::Tensor& t, int64_t n) {
  return t.size(0) == n ? t : at::cat({t, at::zeros({n - t.size(0)}, t.options())});
}

// Each byte's two levels, (256, 2) bf16: byte b stands for (level[b >> 4], level[b & 15]).
at::Tensor level_pairs(const c10::Device& device) {
  const at::Tensor b = at::arange(256, at::TensorOptions().dtype(at::kLong).device(device));
  const at::Tensor levels = nf4_levels(device);
  return at::stack({levels.index_select(0, b.div(16, "floor")), levels.index_select(0, b.remainder(16))}, 1);
}

}  // namespace

at::Tensor nf4_levels(const c10::Device& device) {
  return at::tensor(kLevels, at::kFloat).to(at::kBFloat16).to(device);
}

Nf4 nf4_quantize(const at::Tensor& w) {
  torch::NoGradGuard no_grad;
  const int64_t n = w.numel();
  FRUGAL_CHECK(n % 2 == 0 && n > 0, ConfigError,
               fmt::format("lora.base_dtype = \"nf4\" stores two weights a byte, but a weight of shape {} has {} "
                           "elements (set lora.base_dtype = \"bf16\")",
                           w.sizes(), n));
  const at::Tensor flat = w.detach().to(at::kBFloat16).contiguous().view({-1});
  const int64_t blocks = ceil_div(n, kNf4Block), scaler_blocks = ceil_div(blocks, kNf4ScalerBlock);
  const at::Tensor grid = pad_to(flat, blocks * kNf4Block).view({blocks, kNf4Block});
  const at::Tensor absmax = grid.abs().amax(1);  // (blocks) bf16
  Nf4 q;
  // The exact mean, summed in order in double: the same bits on any thread count.
  const at::Tensor host = absmax.to(at::kDouble).cpu().contiguous();
  double sum = 0;
  for (int64_t i = 0; i < blocks; ++i) sum += host.data_ptr<double>()[i];
  q.mean = at::full({1}, static_cast<float>(sum / static_cast<double>(blocks)), absmax.options().dtype(at::kFloat))
               .to(at::kBFloat16);
  // Double quantisation, as torchao writes it: factor = 256 / (2 max), via the reciprocal
  // (Python's 256 / t), in bf16. A block of equal scales (max 0) gets the factor 1.
  const at::Tensor centred = pad_to(absmax - q.mean, scaler_blocks * kNf4ScalerBlock).view({scaler_blocks, -1});
  const at::Tensor smax = centred.abs().amax(1);
  q.factors = at::where(smax == 0, at::ones_like(smax), (smax * 2).reciprocal() * 256);
  q.scalers = (centred * q.factors.unsqueeze(1)).round().clamp(-128, 127).to(at::kChar).view({-1}).narrow(0, 0, blocks);
  // Each value's nearest level after division by its block's absmax (an all-zero block: by 1).
  const at::Tensor scaled = (grid / at::where(absmax == 0, at::ones_like(absmax), absmax).unsqueeze(1)).view({-1});
  const at::Tensor levels = nf4_levels(w.device());
  at::Tensor idx = at::empty({n}, flat.options().dtype(at::kByte));
  for (int64_t s = 0; s < n; s += kChunk) {
    const int64_t len = std::min(kChunk, n - s);
    const at::Tensor diff = (scaled.narrow(0, s, len).unsqueeze(-1) - levels).abs();
    idx.narrow(0, s, len).copy_(std::get<1>(diff.min(-1)));
  }
  q.codes = idx.slice(0, 0, n, 2).bitwise_left_shift(4).bitwise_or(idx.slice(0, 1, n, 2));
  return q;
}

namespace {

// The scales as torchao recovers them: int8 / factor in bf16, plus the mean.
at::Tensor block_scales(const Nf4& q) {
  const int64_t blocks = q.scalers.numel();
  return q.scalers / q.factors.repeat_interleave(kNf4ScalerBlock).narrow(0, 0, blocks) + q.mean;
}

// The CPU's dequantisation in one pass over the codes, written as `out`'s dtype: each value is
// level * scale rounded to bf16 (the product of two bf16 is exact in float; ATen's bf16 product
// rounds it to nearest even, as BFloat16's constructor does): the tensor expression's bits.
template <typename T>
void dequantize_cpu(const Nf4& q, T* out) {
  const at::Tensor scales = block_scales(q).contiguous();
  const at::Tensor codes = q.codes.contiguous();
  const auto* s = scales.data_ptr<at::BFloat16>();
  const auto* c = codes.data_ptr<uint8_t>();
  float levels[16];
  for (int i = 0; i < 16; ++i) levels[i] = static_cast<float>(at::BFloat16(kLevels[static_cast<size_t>(i)]));
  const int64_t n = 2 * codes.numel(), blocks = scales.numel();
  at::parallel_for(0, blocks, 64, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const float scale = static_cast<float>(s[b]);
      const int64_t end = std::min(n, (b + 1) * kNf4Block);
      for (int64_t i = b * kNf4Block; i < end; i += 2) {
        const uint8_t byte = c[i / 2];
        out[i] = static_cast<T>(at::BFloat16(levels[byte >> 4] * scale));
        out[i + 1] = static_cast<T>(at::BFloat16(levels[byte & 15] * scale));
      }
    }
  });
}

// `q` dequantised into `out` (contiguous, 2 x codes elements; bf16 or fp32 on the CPU, bf16
// elsewhere).
void dequantize_into(const Nf4& q, at::Tensor out) {
  if (out.is_cpu() && out.scalar_type() == at::kFloat) return dequantize_cpu(q, out.data_ptr<float>());
  if (out.is_cpu()) return dequantize_cpu(q, out.data_ptr<at::BFloat16>());
  const int64_t n = 2 * q.codes.numel(), blocks = q.scalers.numel();
  const at::Tensor values = level_pairs(q.codes.device()).index_select(0, q.codes.to(at::kInt)).view({-1});
  const at::Tensor scaled =
      (pad_to(values, blocks * kNf4Block).view({blocks, kNf4Block}) * block_scales(q).unsqueeze(1));
  out.view({-1}).copy_(scaled.view({-1}).narrow(0, 0, n));
}

}  // namespace

at::Tensor nf4_dequantize(const Nf4& q, at::IntArrayRef shape) {
  torch::NoGradGuard no_grad;
  at::Tensor out = at::empty(shape, q.codes.options().dtype(at::kBFloat16));
  dequantize_into(q, out);
  return out;
}

namespace {

// W from its row slices, in `dtype` (written straight in it on the CPU).
at::Tensor dequantize_rows(const std::vector<Nf4>& slices, const std::vector<int64_t>& rows, int64_t in,
                           at::ScalarType dtype) {
  torch::NoGradGuard no_grad;
  int64_t total = 0;
  for (const int64_t r : rows) total += r;
  const bool direct = slices[0].codes.is_cpu() && (dtype == at::kFloat || dtype == at::kBFloat16);
  at::Tensor w = at::empty({total, in}, slices[0].codes.options().dtype(direct ? dtype : at::kBFloat16));
  int64_t row = 0;
  for (size_t k = 0; k < slices.size(); ++k) {
    dequantize_into(slices[k], w.narrow(0, row, rows[k]));
    row += rows[k];
  }
  return w.scalar_type() == dtype ? w : w.to(dtype);
}

// The frozen NF4 weight travels as plain data: only x has a gradient.
class Nf4LinearFunction : public torch::autograd::Function<Nf4LinearFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                            const std::vector<at::Tensor>& state, const std::vector<int64_t>& rows, int64_t in,
                            const std::vector<at::Tensor>& bias) {
    ctx->saved_data["state"] = state;
    ctx->saved_data["rows"] = rows;
    ctx->saved_data["in"] = in;
    ctx->saved_data["x_dtype"] = static_cast<int64_t>(x.scalar_type());
    const bool autocast = compat::autocast_enabled(x.device().type());
    const at::Tensor w = dequantize_rows(unpack(state), rows, in, autocast ? at::kBFloat16 : x.scalar_type());
    // One product over the rows of x, and its result reshaped without a view: the caller adds the
    // adapters' update in place into slices of it, which a view made here would forbid.
    const at::Tensor x2 = x.reshape({-1, in});
    const at::Tensor y = bias.empty() ? at::mm(x2, w.t()) : at::addmm(bias[0], x2, w.t());
    std::vector<int64_t> sizes = x.sizes().vec();
    sizes.back() = w.size(0);
    return at::_unsafe_view(y, sizes);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const at::Tensor& g = grads[0];
    const at::Tensor w =
        dequantize_rows(unpack(ctx->saved_data["state"].toTensorVector()), ctx->saved_data["rows"].toIntVector(),
                        ctx->saved_data["in"].toInt(), g.scalar_type());
    const auto x_dtype = static_cast<at::ScalarType>(ctx->saved_data["x_dtype"].toInt());
    at::Tensor dx = at::matmul(g, w);
    return {dx.scalar_type() == x_dtype ? dx : dx.to(x_dtype), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }

  static std::vector<at::Tensor> pack(const std::vector<Nf4>& slices) {
    std::vector<at::Tensor> out;
    for (const Nf4& s : slices) out.insert(out.end(), {s.codes, s.scalers, s.factors, s.mean});
    return out;
  }
  static std::vector<Nf4> unpack(const std::vector<at::Tensor>& state) {
    std::vector<Nf4> out;
    for (size_t i = 0; i + 3 < state.size(); i += 4)
      out.push_back({state[i], state[i + 1], state[i + 2], state[i + 3]});
    return out;
  }
};

}  // namespace

at::Tensor nf4_linear(const at::Tensor& x, const std::vector<Nf4>& slices, const std::vector<int64_t>& rows, int64_t in,
                      const at::Tensor& bias) {
  FRUGAL_INTERNAL_ASSERT(!bias.defined() || !bias.requires_grad(), "nf4_linear: the bias of a frozen base trains");
  std::vector<at::Tensor> b;
  if (bias.defined()) b.push_back(bias);
  return Nf4LinearFunction::apply(x, Nf4LinearFunction::pack(slices), rows, in, b);
}

}  // namespace frugal
