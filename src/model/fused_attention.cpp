// The fused causal attention autograd op; see fused_attention.h.
#include "frugal/model/fused_attention.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include <cmath>
#include <stdexcept>

#include "model/internal/attention_kernel.h"

namespace frugal {
namespace {

internal::AttentionShape shape_of(const at::Tensor& qkv, int64_t heads) {
  return {qkv.size(0), qkv.size(1), heads, qkv.size(2) / 3 / heads};
}

float scale_of(const internal::AttentionShape& s) {
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

std::pair<at::Tensor, Saved> run_attention_forward(const at::Tensor& qkv, int64_t heads, bool for_backward) {
  // Named in profiles (the backward shows as the autograd node).
  RECORD_FUNCTION("frugal::fused_causal_attention", std::vector<c10::IValue>());
  const auto s = shape_of(qkv, heads);
  const auto f32 = qkv.options().dtype(at::kFloat);
  at::Tensor y = at::empty({s.batch, s.seq, s.heads * s.head_dim}, qkv.options());
  Saved saved{at::empty({s.batch, s.heads, s.seq, 2}, f32), at::Tensor()};
  if (for_backward && s.seq <= 3 * s.head_dim) saved.probs = at::empty({s.batch, s.heads, s.seq, s.seq}, f32);
  float* stats = saved.stats.data_ptr<float>();
  float* probs = data_or_null(saved.probs);
  const int threads = at::get_num_threads();
  if (qkv.scalar_type() == at::kFloat) {
    internal::attention_forward_f32(qkv.data_ptr<float>(), y.data_ptr<float>(), stats, probs, s, scale_of(s), threads);
  } else {
    internal::attention_forward_bf16(bits(qkv), bits(y), stats, probs, s, scale_of(s), threads);
  }
  return {y, saved};
}

at::Tensor run_attention_backward(const at::Tensor& qkv, const Saved& saved, const at::Tensor& grad, int64_t heads) {
  const auto s = shape_of(qkv, heads);
  at::Tensor dy = grad.to(qkv.scalar_type()).contiguous();
  at::Tensor dqkv = at::empty_like(qkv, at::MemoryFormat::Contiguous);
  const float* stats = saved.stats.data_ptr<float>();
  const float* probs = data_or_null(saved.probs);
  const int threads = at::get_num_threads();
  if (qkv.scalar_type() == at::kFloat) {
    internal::attention_backward_f32(qkv.data_ptr<float>(), stats, probs, dy.data_ptr<float>(), dqkv.data_ptr<float>(),
                                     s, scale_of(s), threads);
  } else {
    internal::attention_backward_bf16(bits(qkv), stats, probs, bits(dy), bits(dqkv), s, scale_of(s), threads);
  }
  return dqkv;
}

class AttentionFunction : public torch::autograd::Function<AttentionFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& qkv, int64_t heads) {
    auto [y, saved] = run_attention_forward(qkv, heads, /*for_backward=*/true);
    ctx->save_for_backward({qkv, saved.stats, saved.probs});
    ctx->saved_data["heads"] = heads;
    return y;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad) {
    const auto saved = ctx->get_saved_variables();
    return {run_attention_backward(saved[0], {saved[1], saved[2]}, grad[0], ctx->saved_data["heads"].toInt()),
            at::Tensor()};
  }
};

}  // namespace

bool fused_attention_supported(const at::Tensor& qkv, int64_t heads) {
  return qkv.defined() && qkv.device().is_cpu() &&
         (qkv.scalar_type() == at::kFloat || qkv.scalar_type() == at::kBFloat16) && qkv.dim() == 3 && heads > 0 &&
         qkv.size(2) > 0 && qkv.size(2) % (3 * heads) == 0;
}

at::Tensor fused_causal_attention(const at::Tensor& qkv, int64_t heads) {
  if (!fused_attention_supported(qkv, heads)) {
    throw std::invalid_argument(
        fmt::format("fused_causal_attention: needs a CPU float or bfloat16 tensor (B, T, 3C) with 3C divisible by "
                    "3 * heads = {}; got {} {} of sizes {}",
                    3 * heads, qkv.defined() ? qkv.device().str() : "undefined",
                    qkv.defined() ? std::string(c10::toString(qkv.scalar_type())) : "",
                    qkv.defined() ? c10::str(qkv.sizes()) : ""));
  }
  at::Tensor x = qkv.contiguous();
  if (!x.requires_grad() || !torch::GradMode::is_enabled()) return run_attention_forward(x, heads, false).first;
  return AttentionFunction::apply(x, heads);
}

int fused_attention_cpu_level() { return internal::attention_level(); }

}  // namespace frugal
