// The chunked output head + cross-entropy; see linear_cross_entropy.h.
#include "frugal/model/linear_cross_entropy.h"

#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/torch.h>

#include <algorithm>

#include "frugal/core/compat.h"
#include "frugal/model/kernel_ops.h"

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

// One chunk's losses added to `loss_sum` and, where `grad`, its logits' gradient (softmax -
// one_hot(target)) / count on counted rows, 0 elsewhere and on the padding columns, in the compute
// dtype: on ATen's operators in the accumulation dtype, in place of an fp32 copy of the logits.
at::Tensor chunk_on_aten(const at::Tensor& logits, int64_t V, const at::Tensor& t, const at::Tensor& ok,
                         const at::Tensor& inv_count, const Dtypes& d, bool grad, at::Tensor& loss_sum) {
  at::Tensor z = logits.to(d.acc);  // (n, padded V)
  at::Tensor g = z.narrow(1, 0, V);
  const at::Tensor lse = at::logsumexp(g, 1);
  const at::Tensor idx = at::where(ok, t, at::zeros({}, t.options())).unsqueeze(1);
  const at::Tensor okf = ok.to(d.acc);
  loss_sum.add_(((lse - g.gather(1, idx).squeeze(1)) * okf).sum());
  if (!grad) return at::Tensor();
  g.sub_(lse.unsqueeze(1)).exp_();
  g.scatter_add_(1, idx, -okf.unsqueeze(1));
  g.mul_((okf * inv_count).unsqueeze(1));
  if (z.size(1) > V) z.narrow(1, V, z.size(1) - V).zero_();
  return z.to(d.compute);
}

// The whole computation; the gradients only where `grad` (autocast excluded: the dtypes are
// chosen above, once). `pad`: the head's rows rounded up to a multiple of it for the products
// (zero rows, the padding columns of the logits taking no part); `kernels`: each chunk's softmax,
// loss and gradient on frugal's classifier kernel where it runs on the chunk's logits.
Outputs run(const at::Tensor& x2, const at::Tensor& weight, const at::Tensor& t, int64_t chunk, int64_t ignore,
            bool grad, int64_t pad, bool kernels) {
  RECORD_FUNCTION("frugal::linear_cross_entropy", std::vector<c10::IValue>());
  const Dtypes d = dtypes_for(x2, weight);
  c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
  const int64_t N = x2.size(0), V = weight.size(0);
  at::Tensor wc = weight.to(d.compute);
  if (pad > 1 && V % pad != 0) wc = at::constant_pad_nd(wc, {0, 0, 0, (V + pad - 1) / pad * pad - V});
  const at::Tensor valid = t.ne(ignore);
  // 1 / (targets counted), at least 1: a tensor, so a GPU never waits for the count.
  const at::Tensor count = valid.sum().to(d.acc);
  const at::Tensor inv_count = at::reciprocal(count.clamp_min(1));
  Outputs o;
  at::Tensor loss_sum = at::zeros({}, x2.options().dtype(d.acc));
  if (grad) {
    o.dx = at::empty_like(x2, at::MemoryFormat::Contiguous);
    o.dw = at::zeros({V, weight.size(1)}, weight.options().dtype(d.acc));
  }
  for (int64_t r0 = 0; r0 < N; r0 += chunk) {
    const int64_t n = std::min(chunk, N - r0);
    const at::Tensor xc = x2.narrow(0, r0, n).to(d.compute);
    const at::Tensor logits = at::mm(xc, wc.t());  // (n, padded V), the compute dtype
    const at::Tensor tc = t.narrow(0, r0, n);
    at::Tensor gc;
    if (kernels && classifier_block(logits, tc, V, ignore, count, grad, loss_sum))
      gc = logits;  // the kernel wrote the gradient over the logits
    else
      gc = chunk_on_aten(logits, V, tc, valid.narrow(0, r0, n), inv_count, d, grad, loss_sum);
    if (!grad) continue;
    o.dx.narrow(0, r0, n).copy_(at::mm(gc, wc));
    const at::Tensor dw = at::mm(gc.t(), xc);
    o.dw.add_(dw.size(0) == V ? dw : dw.narrow(0, 0, V));
  }
  o.loss = loss_sum * inv_count;
  return o;
}

class LinearCrossEntropyFunction : public torch::autograd::Function<LinearCrossEntropyFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x2, const at::Tensor& weight,
                            const at::Tensor& targets, int64_t chunk, int64_t ignore, int64_t pad, bool kernels) {
    Outputs o = run(x2, weight, targets, chunk, ignore, /*grad=*/true, pad, kernels);
    ctx->save_for_backward({o.dx, o.dw});
    ctx->saved_data["w_dtype"] = static_cast<int64_t>(weight.scalar_type());
    return o.loss;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& g = grad[0];
    const auto w_dtype = static_cast<c10::ScalarType>(ctx->saved_data["w_dtype"].toInt());
    return {saved[0] * g.to(saved[0].scalar_type()),
            (saved[1] * g.to(saved[1].scalar_type())).to(w_dtype),
            at::Tensor(),
            at::Tensor(),
            at::Tensor(),
            at::Tensor(),
            at::Tensor()};
  }
};

}  // namespace

int64_t chunk_rows_for(int64_t rows, int64_t width, int64_t vocab, int64_t min_logits) {
  const int64_t chunks = std::max<int64_t>(1, (vocab + width - 1) / std::max<int64_t>(width, 1));
  const int64_t floor_rows = (std::max<int64_t>(min_logits, 1) + vocab - 1) / std::max<int64_t>(vocab, 1);
  return std::clamp<int64_t>(std::max((rows + chunks - 1) / chunks, floor_rows), 1, std::max<int64_t>(rows, 1));
}

at::Tensor linear_cross_entropy(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& targets,
                                int64_t chunk_rows, int64_t ignore_index, int64_t pad_multiple, bool gpu_kernels) {
  TORCH_CHECK(weight.dim() == 2 && x.size(-1) == weight.size(1), "linear_cross_entropy: x (..., ", x.size(-1),
              ") against a weight of sizes ", weight.sizes());
  const at::Tensor x2 = x.reshape({-1, x.size(-1)});
  const at::Tensor t = targets.reshape({-1});
  TORCH_CHECK(t.size(0) == x2.size(0), "linear_cross_entropy: ", t.size(0), " targets for ", x2.size(0), " rows");
  TORCH_CHECK(pad_multiple >= 1, "linear_cross_entropy: pad_multiple must be at least 1, got ", pad_multiple);
  const int64_t min_logits = !x.is_cuda()                            ? kMinChunkLogits
                             : gpu_kernels && cuda_kernels_run_on(x) ? kMinChunkLogitsKernel
                                                                     : kMinChunkLogitsGpu;
  const int64_t chunk =
      chunk_rows > 0 ? chunk_rows : chunk_rows_for(x2.size(0), x2.size(1), weight.size(0), min_logits);
  const bool grad = torch::GradMode::is_enabled() && (x.requires_grad() || weight.requires_grad());
  if (!grad) return run(x2, weight, t, chunk, ignore_index, false, pad_multiple, gpu_kernels).loss;
  return LinearCrossEntropyFunction::apply(x2, weight, t, chunk, ignore_index, pad_multiple, gpu_kernels);
}

}  // namespace frugal
