// The fused causal attention autograd op; see fused_attention.h.
#include "frugal/model/fused_attention.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include <cmath>
#include <stdexcept>

#include "model/internal/attention_kernel.h"

namespace frugal {
namespace {

// A positions tensor's data, or null for an empty one (one document a row).
const int64_t* positions_or_null(const at::Tensor& pos) { return pos.numel() > 0 ? pos.data_ptr<int64_t>() : nullptr; }

internal::AttentionShape shape_of(const at::Tensor& qkv, int64_t heads, const at::Tensor& pos) {
  return {qkv.size(0), qkv.size(1), heads, qkv.size(2) / 3 / heads, positions_or_null(pos)};
}

// `positions` as the kernels read it: (B, T) int64 contiguous on the CPU, checked (0 <= pos[t] <=
// t, each either 0 or one past the previous token's), or an empty tensor where undefined (an
// autograd Function takes no undefined tensor arguments).
at::Tensor checked_positions(const at::Tensor& positions, const at::Tensor& qkv, const char* op) {
  if (!positions.defined()) return at::empty({0}, at::kLong);
  const int64_t B = qkv.size(0), T = qkv.size(1);
  if (positions.dim() != 2 || positions.size(0) != B || positions.size(1) != T)
    throw std::invalid_argument(
        fmt::format("{}: positions of sizes {} for a ({}, {}) batch", op, c10::str(positions.sizes()), B, T));
  at::Tensor p = positions.to(at::kCPU, at::kLong).contiguous();
  const int64_t* d = p.data_ptr<int64_t>();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      const int64_t v = d[b * T + t];
      if (v != 0 && (t == 0 || v != d[b * T + t - 1] + 1))
        throw std::invalid_argument(
            fmt::format("{}: row {} position {} holds {}: each token's position is 0 (a document's first) or one "
                        "past the previous token's",
                        op, b, t, v));
    }
  return p;
}

float softmax_scale_of(const internal::AttentionShape& s) {
  return static_cast<float>(1.0 / std::sqrt(static_cast<double>(s.head_dim)));
}

uint16_t* bits(const at::Tensor& t) { return reinterpret_cast<uint16_t*>(t.data_ptr<at::BFloat16>()); }

// What the forward leaves for the backward: the softmax's row max and 1 / sum, (B, H, T, 2)
// float, always; the softmax itself, (B, H, T, T) float, only while it is no larger than the q,
// k, v it comes from (T <= 3 D), where reading it back is cheaper than recomputing it. Past that
// (long contexts) it would be the largest activation of the layer, and the backward recomputes it.
struct Saved {
  at::Tensor stats, probs;
};

float* data_or_null(const at::Tensor& t) { return t.defined() ? t.data_ptr<float>() : nullptr; }

std::pair<at::Tensor, Saved> run_attention_forward(const at::Tensor& qkv, int64_t heads, const at::Tensor& pos,
                                                   bool for_backward) {
  // Named in profiles (the backward shows as the autograd node).
  RECORD_FUNCTION("frugal::fused_causal_attention", std::vector<c10::IValue>());
  const auto s = shape_of(qkv, heads, pos);
  const auto f32 = qkv.options().dtype(at::kFloat);
  at::Tensor y = at::empty({s.batch, s.seq, s.heads * s.head_dim}, qkv.options());
  Saved saved{at::empty({s.batch, s.heads, s.seq, 2}, f32), at::Tensor()};
  if (for_backward && s.seq <= 3 * s.head_dim) saved.probs = at::empty({s.batch, s.heads, s.seq, s.seq}, f32);
  float* stats = saved.stats.data_ptr<float>();
  float* probs = data_or_null(saved.probs);
  const int threads = at::get_num_threads();
  if (qkv.scalar_type() == at::kFloat) {
    internal::attention_forward_f32(qkv.data_ptr<float>(), y.data_ptr<float>(), stats, probs, s, softmax_scale_of(s),
                                    threads);
  } else {
    internal::attention_forward_bf16(bits(qkv), bits(y), stats, probs, s, softmax_scale_of(s), threads);
  }
  return {y, saved};
}

at::Tensor run_attention_backward(const at::Tensor& qkv, const Saved& saved, const at::Tensor& grad, int64_t heads,
                                  const at::Tensor& pos) {
  const auto s = shape_of(qkv, heads, pos);
  at::Tensor dy = grad.to(qkv.scalar_type()).contiguous();
  at::Tensor dqkv = at::empty_like(qkv, at::MemoryFormat::Contiguous);
  const float* stats = saved.stats.data_ptr<float>();
  const float* probs = data_or_null(saved.probs);
  const int threads = at::get_num_threads();
  if (qkv.scalar_type() == at::kFloat) {
    internal::attention_backward_f32(qkv.data_ptr<float>(), stats, probs, dy.data_ptr<float>(), dqkv.data_ptr<float>(),
                                     s, softmax_scale_of(s), threads);
  } else {
    internal::attention_backward_bf16(bits(qkv), stats, probs, bits(dy), bits(dqkv), s, softmax_scale_of(s), threads);
  }
  return dqkv;
}

class AttentionFunction : public torch::autograd::Function<AttentionFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& qkv, int64_t heads,
                            const at::Tensor& pos) {
    auto [y, saved] = run_attention_forward(qkv, heads, pos, /*for_backward=*/true);
    ctx->save_for_backward({qkv, saved.stats, saved.probs, pos});
    ctx->saved_data["heads"] = heads;
    return y;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad) {
    const auto saved = ctx->get_saved_variables();
    return {run_attention_backward(saved[0], {saved[1], saved[2]}, grad[0], ctx->saved_data["heads"].toInt(), saved[3]),
            at::Tensor(), at::Tensor()};
  }
};

// The Llama family's grouped-query attention: the same saved state per query head as above.
internal::GqaShape gqa_shape_of(const at::Tensor& qkv, int64_t heads, int64_t kv_heads, const at::Tensor& cos,
                                const at::Tensor& sin, int64_t window, const at::Tensor& pos) {
  const int64_t D = qkv.size(2) / (heads + 2 * kv_heads);
  return {qkv.size(0),
          qkv.size(1),
          heads,
          kv_heads,
          D,
          window,
          cos.numel() > 0 ? cos.data_ptr<float>() : nullptr,
          sin.numel() > 0 ? sin.data_ptr<float>() : nullptr,
          positions_or_null(pos)};
}

float gqa_scale(const internal::GqaShape& s) {
  return static_cast<float>(1.0 / std::sqrt(static_cast<double>(s.head_dim)));
}

std::pair<at::Tensor, Saved> run_gqa_forward(const at::Tensor& qkv, const internal::GqaShape& s, bool for_backward) {
  RECORD_FUNCTION("frugal::fused_gqa_attention", std::vector<c10::IValue>());
  const auto f32 = qkv.options().dtype(at::kFloat);
  at::Tensor y = at::empty({s.batch, s.seq, s.heads * s.head_dim}, qkv.options());
  Saved saved{at::empty({s.batch, s.heads, s.seq, 2}, f32), at::Tensor()};
  if (for_backward && s.seq <= 3 * s.head_dim) saved.probs = at::empty({s.batch, s.heads, s.seq, s.seq}, f32);
  const int threads = at::get_num_threads();
  if (qkv.scalar_type() == at::kFloat)
    internal::gqa_forward_f32(qkv.data_ptr<float>(), y.data_ptr<float>(), saved.stats.data_ptr<float>(),
                              data_or_null(saved.probs), s, gqa_scale(s), threads);
  else
    internal::gqa_forward_bf16(bits(qkv), bits(y), saved.stats.data_ptr<float>(), data_or_null(saved.probs), s,
                               gqa_scale(s), threads);
  return {y, saved};
}

class GqaAttentionFunction : public torch::autograd::Function<GqaAttentionFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& qkv, int64_t heads,
                            int64_t kv_heads, const at::Tensor& cos, const at::Tensor& sin, int64_t window,
                            const at::Tensor& pos) {
    auto [y, saved] = run_gqa_forward(qkv, gqa_shape_of(qkv, heads, kv_heads, cos, sin, window, pos), true);
    ctx->save_for_backward({qkv, saved.stats, saved.probs, cos, sin, pos});
    ctx->saved_data["heads"] = heads;
    ctx->saved_data["kv_heads"] = kv_heads;
    ctx->saved_data["window"] = window;
    return y;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad) {
    const auto v = ctx->get_saved_variables();
    const at::Tensor& qkv = v[0];
    const auto s = gqa_shape_of(qkv, ctx->saved_data["heads"].toInt(), ctx->saved_data["kv_heads"].toInt(), v[3], v[4],
                                ctx->saved_data["window"].toInt(), v[5]);
    at::Tensor dy = grad[0].to(qkv.scalar_type()).contiguous();
    at::Tensor dqkv = at::empty_like(qkv, at::MemoryFormat::Contiguous);
    const int threads = at::get_num_threads();
    if (qkv.scalar_type() == at::kFloat)
      internal::gqa_backward_f32(qkv.data_ptr<float>(), v[1].data_ptr<float>(), data_or_null(v[2]),
                                 dy.data_ptr<float>(), dqkv.data_ptr<float>(), s, gqa_scale(s), threads);
    else
      internal::gqa_backward_bf16(bits(qkv), v[1].data_ptr<float>(), data_or_null(v[2]), bits(dy), bits(dqkv), s,
                                  gqa_scale(s), threads);
    return {dqkv, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

bool fused_attention_supported(const at::Tensor& qkv, int64_t heads) {
  return qkv.defined() && qkv.device().is_cpu() &&
         (qkv.scalar_type() == at::kFloat || qkv.scalar_type() == at::kBFloat16) && qkv.dim() == 3 && heads > 0 &&
         qkv.size(2) > 0 && qkv.size(2) % (3 * heads) == 0;
}

at::Tensor fused_causal_attention(const at::Tensor& qkv, int64_t heads, const at::Tensor& positions) {
  if (!fused_attention_supported(qkv, heads)) {
    throw std::invalid_argument(
        fmt::format("fused_causal_attention: needs a CPU float or bfloat16 tensor (B, T, 3C) with 3C divisible by "
                    "3 * heads = {}; got {} {} of sizes {}",
                    3 * heads, qkv.defined() ? qkv.device().str() : "undefined",
                    qkv.defined() ? std::string(c10::toString(qkv.scalar_type())) : "",
                    qkv.defined() ? c10::str(qkv.sizes()) : ""));
  }
  at::Tensor x = qkv.contiguous();
  const at::Tensor pos = checked_positions(positions, x, "fused_causal_attention");
  if (!x.requires_grad() || !torch::GradMode::is_enabled()) return run_attention_forward(x, heads, pos, false).first;
  return AttentionFunction::apply(x, heads, pos);
}

bool fused_gqa_attention_supported(const at::Tensor& qkv, int64_t heads, int64_t kv_heads) {
  if (!qkv.defined() || !qkv.device().is_cpu() || qkv.dim() != 3 || heads <= 0 || kv_heads <= 0 ||
      heads % kv_heads != 0 || (qkv.scalar_type() != at::kFloat && qkv.scalar_type() != at::kBFloat16))
    return false;
  const int64_t width = qkv.size(2), parts = heads + 2 * kv_heads;
  return width > 0 && width % parts == 0 && (width / parts) % 2 == 0;
}

at::Tensor fused_gqa_attention(const at::Tensor& qkv, int64_t heads, int64_t kv_heads, const at::Tensor& rope_cos,
                               const at::Tensor& rope_sin, int64_t window, const at::Tensor& positions) {
  if (!fused_gqa_attention_supported(qkv, heads, kv_heads))
    throw std::invalid_argument(
        fmt::format("fused_gqa_attention: needs a CPU float or bfloat16 tensor (B, T, (heads + 2 kv_heads) D) with "
                    "heads = {} a multiple of kv_heads = {} and D even; got {}",
                    heads, kv_heads, qkv.defined() ? c10::str(qkv.sizes()) : "undefined"));
  const int64_t T = qkv.size(1), D = qkv.size(2) / (heads + 2 * kv_heads);
  // No rotation: empty tables (an autograd Function takes no undefined tensor arguments).
  at::Tensor cos = at::empty({0}, at::kFloat), sin = at::empty({0}, at::kFloat);
  if (rope_cos.defined()) {
    if (rope_cos.size(0) < T || rope_cos.size(1) != D / 2 || rope_sin.sizes() != rope_cos.sizes())
      throw std::invalid_argument(
          fmt::format("fused_gqa_attention: rotary tables of sizes {} for {} positions of {} "
                      "channels",
                      c10::str(rope_cos.sizes()), T, D));
    cos = rope_cos.narrow(0, 0, T).to(at::kCPU, at::kFloat).contiguous();
    sin = rope_sin.narrow(0, 0, T).to(at::kCPU, at::kFloat).contiguous();
  }
  at::Tensor x = qkv.contiguous();
  const at::Tensor pos = checked_positions(positions, x, "fused_gqa_attention");
  if (!x.requires_grad() || !torch::GradMode::is_enabled())
    return run_gqa_forward(x, gqa_shape_of(x, heads, kv_heads, cos, sin, window, pos), false).first;
  return GqaAttentionFunction::apply(x, heads, kv_heads, cos, sin, window, pos);
}

int fused_attention_cpu_level() { return internal::attention_level(); }

}  // namespace frugal
