// Working weights; see working_weights.h.
#include "frugal/model/working_weights.h"

#include <torch/torch.h>

#include <atomic>
#include <mutex>
#include <unordered_map>

#include "frugal/core/compat.h"
#include "frugal/model/fp8.h"

namespace frugal {

struct WorkingWeights::Buffer {
  at::Tensor master, copy;
  int64_t version = -1;  // master's version counter when copied
  bool add_into_grads = false;
  bool gathered = false;  // add_gathered: written by its owner, present while its storage has memory
  std::vector<const c10::TensorImpl*> members;
};

namespace {

// A parameter's copy, keyed by the parameter's TensorImpl (stable: FusedAdamW moves a parameter's
// storage with set_data, which keeps the tensor). `version`: the parameter's own version counter
// when copied (a parameter re-homed by set_data has a counter of its own, not its buffer's).
struct Entry {
  WorkingWeights::Buffer* buffer;
  at::Tensor param, copy;
  int64_t version = -1;
};

std::mutex registry_mutex;
std::unordered_map<const c10::TensorImpl*, Entry>& registry() {
  static auto* r = new std::unordered_map<const c10::TensorImpl*, Entry>();  // outlives static destructors
  return *r;
}
std::atomic<int64_t> registered{0};

// REQUIRES: registry_mutex held.
void copy_buffer(WorkingWeights::Buffer& b) {
  c10::NoGradGuard no_grad;
  b.copy.copy_(b.master);
  b.version = b.master._version();
  for (const c10::TensorImpl* m : b.members) {
    Entry& e = registry().at(m);
    e.version = e.param._version();
  }
}

// The copy forward; backward, the bf16 gradient widened into the master's .grad (in one pass when
// the master is saved for it, else returned for AccumulateGrad as a cast's backward returns it).
struct WorkingWeightFunction : public torch::autograd::Function<WorkingWeightFunction> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& master, const at::Tensor& copy,
                            bool add_into_grad) {
    ctx->saved_data["dtype"] = static_cast<int64_t>(master.scalar_type());
    if (add_into_grad) ctx->saved_data["master"] = master;
    return copy;  // returned as a view of it, with this function as its history
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_out) {
    const at::Tensor& g = grad_out[0];
    if (!g.defined()) return {at::Tensor(), at::Tensor(), at::Tensor()};
    const auto it = ctx->saved_data.find("master");
    if (it != ctx->saved_data.end() && !torch::GradMode::is_enabled()) {
      const at::Tensor master = it->second.toTensor();
      const at::Tensor& grad = master.grad();
      if (grad.defined() && grad.sizes() == g.sizes() && grad.layout() == c10::kStrided) {
        grad.add_(g);  // fp32 += bf16, computed in fp32: AccumulateGrad's sum of the widened gradient
        return {at::Tensor(), at::Tensor(), at::Tensor()};
      }
    }
    return {g.to(static_cast<c10::ScalarType>(ctx->saved_data["dtype"].toInt())), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

WorkingWeights::WorkingWeights(c10::ScalarType dtype, bool add_into_grads)
    : dtype_(dtype), add_into_grads_(add_into_grads) {}

WorkingWeights::~WorkingWeights() {
  std::lock_guard<std::mutex> lock(registry_mutex);
  for (const auto& b : buffers_)
    for (const c10::TensorImpl* m : b->members) {
      registry().erase(m);
      registered.fetch_sub(1);
    }
}

void WorkingWeights::add(const at::Tensor& flat, const std::vector<at::Tensor>& params) {
  add_buffer(flat, at::empty_like(flat, flat.options().dtype(dtype_)), params, false);
}

void WorkingWeights::add_gathered(const at::Tensor& flat, const at::Tensor& copy,
                                  const std::vector<at::Tensor>& params) {
  TORCH_CHECK(copy.dim() == 1 && copy.numel() == flat.numel() && copy.scalar_type() == dtype_,
              "WorkingWeights::add_gathered: the copy must be flat, of the buffer's length, in ", dtype_);
  add_buffer(flat, copy, params, true);
}

void WorkingWeights::add_buffer(const at::Tensor& flat, const at::Tensor& copy, const std::vector<at::Tensor>& params,
                                bool gathered) {
  TORCH_CHECK(flat.dim() == 1 && flat.is_contiguous() && flat.scalar_type() == at::kFloat,
              "WorkingWeights::add: the buffer must be flat, contiguous fp32");
  auto b = std::make_unique<Buffer>();
  b->master = flat;
  b->copy = copy;
  b->gathered = gathered;
  b->add_into_grads = add_into_grads_;
  std::lock_guard<std::mutex> lock(registry_mutex);
  int64_t off = 0;
  for (const at::Tensor& p : params) {
    TORCH_CHECK(p.is_alias_of(flat) && p.storage_offset() == flat.storage_offset() + off && p.is_contiguous(),
                "WorkingWeights::add: parameter ", b->members.size(), " does not live at offset ", off,
                " of the buffer");
    const c10::TensorImpl* key = p.unsafeGetTensorImpl();
    TORCH_CHECK(!registry().count(key), "WorkingWeights::add: a parameter has a working copy already");
    registry().emplace(key, Entry{b.get(), p, b->copy.narrow(0, off, p.numel()).view(p.sizes())});
    b->members.push_back(key);
    registered.fetch_add(1);
    off += p.numel();
  }
  if (!gathered) copy_buffer(*b);
  buffers_.push_back(std::move(b));
}

void WorkingWeights::refresh() {
  std::lock_guard<std::mutex> lock(registry_mutex);
  for (auto& b : buffers_)
    if (!b->gathered) copy_buffer(*b);
}

int64_t WorkingWeights::bytes() const {
  int64_t n = 0;
  for (const auto& b : buffers_) n += b->copy.numel() * static_cast<int64_t>(b->copy.element_size());
  return n;
}

at::Tensor working_weight(const at::Tensor& w, bool shared) {
  if (registered.load(std::memory_order_acquire) == 0 || !w.defined()) return w;
  const c10::DeviceType dev = w.device().type();
  if (!compat::autocast_enabled(dev) || fp8::enabled()) return w;
  at::Tensor copy;
  bool add = false;
  {
    std::lock_guard<std::mutex> lock(registry_mutex);
    const auto it = registry().find(w.unsafeGetTensorImpl());
    if (it == registry().end()) return w;
    Entry& e = it->second;
    if (e.copy.scalar_type() != compat::autocast_dtype(dev)) return w;
    WorkingWeights::Buffer& b = *e.buffer;
    if (b.gathered) {
      if (e.copy.storage().nbytes() == 0) return w;  // not gathered: the parameter is whole
    } else if (b.master._version() != b.version) {
      copy_buffer(b);
    } else if (w._version() != e.version) {  // the parameter itself written (a restore, a broadcast)
      // Below the version-counting layer: the copies share one buffer and so one version counter,
      // and this write touches only this parameter's region. Moving the counter would make the
      // copies of other parameters handed out earlier in this forward (a weight's, when its bias is
      // refreshed after it) read as modified in place, which autograd refuses.
      c10::NoGradGuard no_grad;
      at::AutoDispatchBelowADInplaceOrView below_version_counting;
      e.copy.copy_(w);
      e.version = w._version();
    }
    copy = e.copy;
    add = b.add_into_grads && !shared;
  }
  if (!w.requires_grad() || !torch::GradMode::is_enabled()) return copy;
  return WorkingWeightFunction::apply(w, copy, add);
}

}  // namespace frugal
