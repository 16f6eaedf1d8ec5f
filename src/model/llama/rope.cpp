// Rotary position embeddings; see rope.h. Each scaling repeats transformers' own tensor
// operations (modeling_rope_utils.py, 5.x) in fp32, in the same order, so the frequencies come out
// bit for bit as the reference computes them.
#include "frugal/model/rope.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>

namespace frugal {
namespace {

constexpr double kPi = 3.14159265358979323846;

// 1 / theta^(2i / dim) for i < dim / 2 (the "default" rope_type).
at::Tensor default_inv_freq(double theta, int64_t dim) {
  const at::Tensor exponent = at::arange(0, dim, 2, at::kLong).to(at::kFloat) / dim;
  return at::reciprocal(at::pow(theta, exponent));
}

// Llama 3.1's band-wise scaling: wavelengths below original / high_freq_factor kept, above
// original / low_freq_factor divided by factor, the band between interpolated smoothly.
at::Tensor llama3_inv_freq(const ModelConfig& m, int64_t dim) {
  const at::Tensor inv_freq = default_inv_freq(m.rope_theta, dim);
  const double factor = m.rope_factor, low = m.rope_low_freq_factor, high = m.rope_high_freq_factor;
  const double old_context = static_cast<double>(m.rope_original_block > 0 ? m.rope_original_block : m.block);
  const double low_freq_wavelen = old_context / low, high_freq_wavelen = old_context / high;
  const at::Tensor wavelen = at::reciprocal(inv_freq) * (2 * kPi);
  at::Tensor scaled = at::where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq);
  const at::Tensor smooth = (at::reciprocal(wavelen) * old_context - low) / (high - low);
  const at::Tensor smoothed = (1 - smooth) * scaled / factor + smooth * scaled;
  const at::Tensor medium = at::logical_not(wavelen < high_freq_wavelen) * at::logical_not(wavelen > low_freq_wavelen);
  return at::where(medium, smoothed, scaled);
}

// YaRN (Peng et al. 2023): interpolated frequencies for the slow dimensions, extrapolated ones for
// the fast, a linear ramp between the correction range's ends (beta_fast 32, beta_slow 1,
// truncated to whole dimensions, as transformers' defaults).
at::Tensor yarn_inv_freq(const ModelConfig& m, int64_t dim) {
  const double base = m.rope_theta, factor = m.rope_factor;
  const double original = static_cast<double>(m.rope_original_block > 0 ? m.rope_original_block : m.block);
  const at::Tensor pos_freqs = at::pow(base, at::arange(0, dim, 2, at::kLong).to(at::kFloat) / dim);
  const at::Tensor extrapolation = at::reciprocal(pos_freqs);
  const at::Tensor interpolation = at::reciprocal(pos_freqs * factor);
  auto correction_dim = [&](double rotations) {
    return (static_cast<double>(dim) * std::log(original / (rotations * 2 * kPi))) / (2 * std::log(base));
  };
  double low = std::max(std::floor(correction_dim(32.0)), 0.0);
  double high = std::min(std::ceil(correction_dim(1.0)), static_cast<double>(dim - 1));
  if (low == high) high += 0.001;  // transformers' guard against a zero-width ramp
  const at::Tensor ramp = at::clamp((at::arange(dim / 2, at::kFloat) - low) / (high - low), 0, 1);
  const at::Tensor extrapolation_factor = 1 - ramp;
  return interpolation * (1 - extrapolation_factor) + extrapolation * extrapolation_factor;
}

}  // namespace

int64_t head_dim_of(const ModelConfig& m) { return m.head_dim > 0 ? m.head_dim : m.embd / m.heads; }

at::Tensor rope_inv_freq(const ModelConfig& m) {
  const int64_t dim = head_dim_of(m);
  switch (m.rope_scaling) {
    case ModelConfig::RopeScaling::kNone:
      return default_inv_freq(m.rope_theta, dim);
    case ModelConfig::RopeScaling::kLinear:
      return default_inv_freq(m.rope_theta, dim) / m.rope_factor;
    case ModelConfig::RopeScaling::kLlama3:
      return llama3_inv_freq(m, dim);
    case ModelConfig::RopeScaling::kYarn:
      return yarn_inv_freq(m, dim);
  }
  return default_inv_freq(m.rope_theta, dim);
}

double rope_attention_factor(const ModelConfig& m) {
  if (m.rope_scaling != ModelConfig::RopeScaling::kYarn || m.rope_factor <= 1) return 1.0;
  return 0.1 * std::log(m.rope_factor) + 1.0;
}

RopeTables rope_tables(const ModelConfig& m, int64_t positions, c10::Device device) {
  const at::Tensor inv_freq = rope_inv_freq(m);
  const at::Tensor freqs = at::arange(positions, at::kLong).to(at::kFloat).unsqueeze(1) * inv_freq.unsqueeze(0);
  const double f = rope_attention_factor(m);
  RopeTables t{at::cos(freqs) * f, at::sin(freqs) * f};
  t.cos = t.cos.to(device).contiguous();
  t.sin = t.sin.to(device).contiguous();
  return t;
}

at::Tensor apply_rope(const at::Tensor& x, const RopeTables& tables, int64_t pos) {
  const int64_t T = x.size(1), half = x.size(3) / 2;
  const at::Tensor c = tables.cos.narrow(0, pos, T).to(x.scalar_type()).view({1, T, 1, half});
  const at::Tensor s = tables.sin.narrow(0, pos, T).to(x.scalar_type()).view({1, T, 1, half});
  const at::Tensor x1 = x.narrow(3, 0, half), x2 = x.narrow(3, half, half);
  return at::cat({x1 * c - x2 * s, x2 * c + x1 * s}, 3);
}

at::Tensor apply_rope(const at::Tensor& x, const RopeTables& tables, const at::Tensor& positions) {
  const int64_t B = x.size(0), T = x.size(1), half = x.size(3) / 2;
  const at::Tensor rows = positions.reshape({-1}).to(tables.cos.device());
  const at::Tensor c = tables.cos.index_select(0, rows).to(x.scalar_type()).view({B, T, 1, half});
  const at::Tensor s = tables.sin.index_select(0, rows).to(x.scalar_type()).view({B, T, 1, half});
  const at::Tensor x1 = x.narrow(3, 0, half), x2 = x.narrow(3, half, half);
  return at::cat({x1 * c - x2 * s, x2 * c + x1 * s}, 3);
}

}  // namespace frugal
