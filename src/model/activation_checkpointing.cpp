// Activation checkpointing via a custom autograd function; see activation_checkpoint.h.
// LibTorch facts this relies on (probed on 1.13): Function::apply runs forward with grad mode
// off; a std::vector<Tensor> argument must be passed as TensorList or autograd ignores it.
#include "frugal/model/activation_checkpointing.h"

#include <ATen/Context.h>
#include <torch/torch.h>

#include "frugal/core/compat.h"
#include "frugal/model/fp8.h"

namespace frugal {
namespace {

struct FnHolder : torch::CustomClassHolder {
  CheckpointedFn fn;
  at::Tensor rng_state;
  c10::Device device{c10::kCPU};
  bool autocast = false;
  c10::ScalarType autocast_dtype = c10::kBFloat16;
  bool fp8 = false, fp8_kernels = false;  // model/fp8.h
};

class CheckpointFunction : public torch::autograd::Function<CheckpointFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, c10::intrusive_ptr<FnHolder> h, const at::Tensor& x,
                            at::TensorList params) {
    h->device = x.device();
    h->rng_state = at::globalContext().defaultGenerator(x.device()).get_state();
    h->autocast = compat::autocast_enabled(x.device().type());
    h->autocast_dtype = compat::autocast_dtype(x.device().type());
    h->fp8 = fp8::enabled();
    h->fp8_kernels = fp8::cast_kernels();
    std::vector<at::Tensor> saved{x};
    saved.insert(saved.end(), params.begin(), params.end());
    ctx->save_for_backward(saved);
    ctx->saved_data["fn"] = c10::IValue::make_capsule(h);
    return h->fn(x);  // grad mode is off here: nothing is kept
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_out) {
    auto h = c10::static_intrusive_pointer_cast<FnHolder>(ctx->saved_data["fn"].toCapsule());
    auto saved = ctx->get_saved_variables();
    at::Tensor x = saved[0].detach().requires_grad_(saved[0].requires_grad());
    std::vector<at::Tensor> params(saved.begin() + 1, saved.end());

    // Recompute with the forward's RNG, autocast and fp8 state, then put the RNG back so the
    // recompute does not shift the random stream of the rest of the run.
    auto gen = at::globalContext().defaultGenerator(h->device);
    at::Tensor rng_now = gen.get_state();
    gen.set_state(h->rng_state);
    at::Tensor y;
    {
      torch::AutoGradMode enable(true);
      compat::AutocastGuard guard(h->device.type(), h->autocast_dtype, h->autocast);
      fp8::Scope fp8_linears(h->fp8, h->fp8_kernels);
      y = h->fn(x);
    }
    gen.set_state(rng_now);

    std::vector<at::Tensor> inputs;
    if (x.requires_grad()) inputs.push_back(x);
    for (auto& p : params)
      if (p.requires_grad()) inputs.push_back(p);
    auto grads = torch::autograd::grad({y}, inputs, {grad_out[0]}, /*retain_graph=*/false,
                                       /*create_graph=*/false, /*allow_unused=*/true);
    torch::autograd::variable_list out;
    out.emplace_back();  // the holder
    size_t k = 0;
    out.push_back(x.requires_grad() ? grads[k++] : at::Tensor());
    for (auto& p : params) out.push_back(p.requires_grad() ? grads[k++] : at::Tensor());
    return out;
  }
};

}  // namespace

at::Tensor checkpointed(const CheckpointedFn& fn, const at::Tensor& x, const std::vector<at::Tensor>& params) {
  if (!torch::GradMode::is_enabled()) return fn(x);
  auto h = c10::make_intrusive<FnHolder>();
  h->fn = fn;
  return CheckpointFunction::apply(h, x, at::TensorList(params));
}

std::vector<bool> checkpoint_plan(const ActivationCheckpointing& spec, int64_t layers) {
  std::vector<bool> plan(static_cast<size_t>(layers), false);
  if (spec.mode == ActivationCheckpointing::Mode::kBlocks) {
    plan.assign(plan.size(), true);
  } else if (spec.mode == ActivationCheckpointing::Mode::kEvery) {
    for (int64_t i = 0; i < layers; i += spec.every) plan[static_cast<size_t>(i)] = true;
  }
  // Never the last block: backward starts with it, so its recompute would follow its forward at
  // once, and the memory it would free is needed for that recompute anyway (the peak with it
  // checkpointed already holds one block's activations). Keeping them saves a block's forward.
  if (!plan.empty()) plan.back() = false;
  return plan;
}

}  // namespace frugal
