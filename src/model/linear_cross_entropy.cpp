// The chunked output head + cross-entropy; see linear_cross_entropy.h.
#include "frugal/model/linear_cross_entropy.h"

#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/torch.h>

#include <algorithm>

#include "frugal/core/compat.h"

namespace frugal {
namespace {

struct Dtypes {
  c10::ScalarType compute;  // the products: autocast's dtype, else x's and the weight's
  c10::ScalarType acc;      // softmax, sums, dW: double for double inputs, else float
};

Dtypes dtypes_for(const at::Tensor& x, const at::Tensor& w) {
  const c10::DeviceType dev = x.device().type();
  const c10::ScalarType compute = compat::autocast_enabled(dev) ? compat::autocast_dtype(dev) : at::result_type(x, w);
  return {compute, compute == at::kDouble ? at::kDouble : at::kFloat};
}

struct Outputs {
  at::Tensor loss;  // 0-dim, acc dtype
  at::Tensor dx;    // (N, C) in x's dtype, scaled for a loss gradient of 1; undefined without grad
  at::Tensor dw;    // (V, C) acc dtype; likewise
};

// The whole computation; the gradients only where `grad` (autocast excluded: the dtypes are
// chosen above, once).
Outputs run(const at::Tensor& x2, const at::Tensor& weight, const at::Tensor& t, int64_t chunk, int64_t ignore,
            bool grad) {
  RECORD_FUNCTION("frugal::linear_cross_entropy", std::vector<c10::IValue>());
  const Dtypes d = dtypes_for(x2, weight);
  c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
  const int64_t N = x2.size(0);
  const at::Tensor wc = weight.to(d.compute);
  const at::Tensor valid = t.ne(ignore);
  // 1 / (targets counted), at least 1: a tensor, so a GPU never waits for the count.
  const at::Tensor inv_count = at::reciprocal(valid.sum().to(d.acc).clamp_min(1));
  Outputs o;
  at::Tensor loss_sum = at::zeros({}, x2.options().dtype(d.acc));
  if (grad) {
    o.dx = at::empty_like(x2, at::MemoryFormat::Contiguous);
    o.dw = at::zeros({weight.size(0), weight.size(1)}, weight.options().dtype(d.acc));
  }
  for (int64_t r0 = 0; r0 < N; r0 += chunk) {
    const int64_t n = std::min(chunk, N - r0);
    const at::Tensor xc = x2.narrow(0, r0, n).to(d.compute);
    at::Tensor logits = at::mm(xc, wc.t()).to(d.acc);  // (n, V)
    const at::Tensor lse = at::logsumexp(logits, 1);
    const at::Tensor ok = valid.narrow(0, r0, n);
    const at::Tensor idx = at::where(ok, t.narrow(0, r0, n), at::zeros({}, t.options())).unsqueeze(1);
    const at::Tensor okf = ok.to(d.acc);
    loss_sum.add_(((lse - logits.gather(1, idx).squeeze(1)) * okf).sum());
    if (!grad) continue;
    // d loss / d logits = (softmax - one_hot(target)) / count on counted rows, 0 elsewhere; in
    // place of the logits.
    at::Tensor& g = logits;
    g.sub_(lse.unsqueeze(1)).exp_();
    g.scatter_add_(1, idx, -okf.unsqueeze(1));
    g.mul_((okf * inv_count).unsqueeze(1));
    const at::Tensor gc = g.to(d.compute);
    o.dx.narrow(0, r0, n).copy_(at::mm(gc, wc));
    o.dw.add_(at::mm(gc.t(), xc));
  }
  o.loss = loss_sum * inv_count;
  return o;
}

class LinearCrossEntropyFunction : public torch::autograd::Function<LinearCrossEntropyFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x2, const at::Tensor& weight,
                            const at::Tensor& targets, int64_t chunk, int64_t ignore) {
    Outputs o = run(x2, weight, targets, chunk, ignore, /*grad=*/true);
    ctx->save_for_backward({o.dx, o.dw});
    ctx->saved_data["w_dtype"] = static_cast<int64_t>(weight.scalar_type());
    return o.loss;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& g = grad[0];
    const auto w_dtype = static_cast<c10::ScalarType>(ctx->saved_data["w_dtype"].toInt());
    return {saved[0] * g.to(saved[0].scalar_type()), (saved[1] * g.to(saved[1].scalar_type())).to(w_dtype),
            at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

int64_t chunk_rows_for(int64_t rows, int64_t width, int64_t vocab) {
  const int64_t chunks = std::max<int64_t>(1, (vocab + width - 1) / std::max<int64_t>(width, 1));
  // At least 2^20 logits a chunk (4 MiB in fp32): narrower products run far below the matmul's rate.
  const int64_t floor_rows = ((int64_t{1} << 20) + vocab - 1) / std::max<int64_t>(vocab, 1);
  return std::clamp<int64_t>(std::max((rows + chunks - 1) / chunks, floor_rows), 1, std::max<int64_t>(rows, 1));
}

at::Tensor linear_cross_entropy(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& targets,
                                int64_t chunk_rows, int64_t ignore_index) {
  TORCH_CHECK(weight.dim() == 2 && x.size(-1) == weight.size(1), "linear_cross_entropy: x (..., ", x.size(-1),
              ") against a weight of sizes ", weight.sizes());
  const at::Tensor x2 = x.reshape({-1, x.size(-1)});
  const at::Tensor t = targets.reshape({-1});
  TORCH_CHECK(t.size(0) == x2.size(0), "linear_cross_entropy: ", t.size(0), " targets for ", x2.size(0), " rows");
  const int64_t chunk = chunk_rows > 0 ? chunk_rows : chunk_rows_for(x2.size(0), x2.size(1), weight.size(0));
  const bool grad = torch::GradMode::is_enabled() && (x.requires_grad() || weight.requires_grad());
  if (!grad) return run(x2, weight, t, chunk, ignore_index, false).loss;
  return LinearCrossEntropyFunction::apply(x2, weight, t, chunk, ignore_index);
}

}  // namespace frugal
