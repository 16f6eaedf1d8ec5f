// Flat-buffer AdamW; see fused_adamw.h.
#include "frugal/train/fused_adamw.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/core/Event.h>
#include <c10/core/GradMode.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include <atomic>
#include <cmath>

#include "frugal/core/compat.h"
#include "frugal/core/errors.h"
#include "frugal/model/working_weights.h"

namespace frugal {

namespace {

struct AdamWScalars {
  float decay, b1, a1, b2, a2, bc2_sqrt, eps, neg_step, grad_scale;
};

// Elements [0, n) of the update. Separate buffers (restrict) and scalars by value, and not
// inlined into the caller (where the restrict promise is lost), so the loop vectorises.
[[gnu::noinline]] void adamw_span(float* __restrict p, const float* __restrict g, float* __restrict m,
                                  float* __restrict v, int64_t n, const AdamWScalars s) {
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i] * s.grad_scale;  // x * 1.0f == x: no branch
    const float mi = m[i] * s.b1 + s.a1 * gi;
    const float vi = v[i] * s.b2 + s.a2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    p[i] = p[i] * s.decay + s.neg_step * (mi / (std::sqrt(vi) / s.bc2_sqrt + s.eps));
  }
}

std::atomic<bool> device_scalars_on_cpu{false};

}  // namespace

void test_hooks::adamw_device_scalars_on_cpu(bool on) { device_scalars_on_cpu = on; }

void AdamWDeviceScalars::init(const c10::Device& device, double lr_value, int64_t steps) {
  lr = at::Tensor();
  step = at::Tensor();
  if (!(device.is_cuda() || (device.is_cpu() && device_scalars_on_cpu.load()))) return;
#if FRUGAL_TORCH_AT_LEAST(2, 4)  // no fused kernel with a tensor rate before it
  const auto opts = at::TensorOptions().dtype(at::kFloat).device(device);
  lr = at::full({}, lr_value, opts);
  step = at::full({}, static_cast<double>(steps), opts);
#else
  (void)lr_value, (void)steps;
#endif
}

void AdamWDeviceScalars::set_lr(double v) {
  if (on()) lr.fill_(v);
}

void AdamWDeviceScalars::set_steps(int64_t steps) {
  if (on()) step.fill_(static_cast<double>(steps));
}

void AdamWDeviceScalars::advance() {
  if (on()) step.add_(1);
}

void AdamWDeviceScalars::take_back(const at::Tensor& found_inf) {
  if (on() && found_inf.defined()) step.sub_(found_inf);
}

void adamw_update(const at::Tensor& params, const at::Tensor& grads, const at::Tensor& exp_avg,
                  const at::Tensor& exp_avg_sq, const at::Tensor& scratch, const AdamWHyper& h, double weight_decay,
                  int64_t step, const at::Tensor& grad_scale, const AdamWDeviceScalars* device,
                  const at::Tensor& found_inf) {
  if (device && device->on()) {
    // The kernel divides by its grad_scale: the coefficient's reciprocal, on the device.
    const at::Tensor divisor = grad_scale.defined() ? grad_scale.to(at::kFloat).reciprocal() : at::Tensor();
    if (compat::fused_adamw_tensor_scalars(params, grads, exp_avg, exp_avg_sq, device->step, device->lr, h.beta1,
                                           h.beta2, weight_decay, h.eps, divisor, found_inf))
      return;
  }
  TORCH_CHECK(!found_inf.defined(),
              "adamw_update: a skip decided on the device needs ATen's fused kernel with "
              "its scalars on the device (AdamWDeviceScalars, LibTorch >= 2.4)");
  const double b1 = h.beta1, b2 = h.beta2;
  const double bc1 = 1 - std::pow(b1, static_cast<double>(step));
  const double bc2 = 1 - std::pow(b2, static_cast<double>(step));
  const double step_size = h.lr / bc1;
  const double bc2_sqrt = std::sqrt(bc2);
  const bool fused = params.device().is_cpu() && params.scalar_type() == at::kFloat &&
                     grads.scalar_type() == at::kFloat && exp_avg.scalar_type() == at::kFloat &&
                     exp_avg_sq.scalar_type() == at::kFloat && params.is_contiguous() && grads.is_contiguous() &&
                     exp_avg.is_contiguous() && exp_avg_sq.is_contiguous();
  if (grad_scale.defined() && !fused) grads.mul_(grad_scale.to(grads.scalar_type()));
  // On a GPU: ATen's fused AdamW kernel, one pass over the flat buffer.
  if (params.is_cuda() &&
      compat::fused_adamw_cuda(params, grads, exp_avg, exp_avg_sq, step, h.lr, b1, b2, weight_decay, h.eps))
    return;
  if (!fused) {
    // The exact op sequence of torch::optim::AdamW::step (LibTorch 1.13 adamw.cpp).
    if (weight_decay != 0) params.mul_(1 - h.lr * weight_decay);
    exp_avg.mul_(b1).add_(grads, 1 - b1);
    exp_avg_sq.mul_(b2).addcmul_(grads, grads, 1 - b2);
    at::sqrt_out(const_cast<at::Tensor&>(scratch), exp_avg_sq).div_(bc2_sqrt).add_(h.eps);
    params.addcdiv_(exp_avg, scratch, -step_size);
    return;
  }
  // The same sequence per element, in float as ATen computes it (scalars rounded to float), in
  // one pass. Plain arithmetic the compiler vectorises without changing results: every element
  // rounds the same way whether it lands in a vector lane or a scalar tail.
  float* p = params.data_ptr<float>();
  const float* g = grads.data_ptr<float>();
  float* m = exp_avg.data_ptr<float>();
  float* v = exp_avg_sq.data_ptr<float>();
  const AdamWScalars sc{static_cast<float>(1 - h.lr * weight_decay),  // x * 1.0f == x: no branch
                        static_cast<float>(b1), static_cast<float>(1 - b1), static_cast<float>(b2),
                        static_cast<float>(1 - b2), static_cast<float>(bc2_sqrt), static_cast<float>(h.eps),
                        static_cast<float>(-step_size),
                        // The coefficient as mul_ would apply it: rounded to float.
                        grad_scale.defined() ? grad_scale.to(at::kFloat).item<float>() : 1.0f};
  at::parallel_for(0, params.numel(), 1 << 15, [&](int64_t begin, int64_t end) {
    adamw_span(p + begin, g + begin, m + begin, v + begin, end - begin, sc);
  });
}

AdamWState::AdamWState(int64_t n, const at::TensorOptions& opts, bool offload) {
  if (!offload) {
    exp_avg = at::zeros({n}, opts);
    exp_avg_sq = at::zeros({n}, opts);
    denom = at::empty({n}, opts);
    return;
  }
  const auto host = at::TensorOptions().dtype(at::kFloat).pinned_memory(opts.device().is_cuda());
  host_params = at::empty({n}, host);
  host_grads = at::empty({n}, host);
  exp_avg = at::zeros({n}, host);
  exp_avg_sq = at::zeros({n}, host);
}

void AdamWState::update(const at::Tensor& p, const at::Tensor& g, const AdamWHyper& hyper, double weight_decay,
                        int64_t step, const at::Tensor& grad_scale, const AdamWDeviceScalars* device,
                        const at::Tensor& found_inf) {
  c10::NoGradGuard no_grad;
  if (!offloaded()) {
    adamw_update(p, g, exp_avg, exp_avg_sq, denom, hyper, weight_decay, step, grad_scale, device, found_inf);
    return;
  }
  TORCH_CHECK(!found_inf.defined(), "AdamWState::update: an offloaded update takes no skip decided on the device");
  const at::Tensor &params = host_params, &grads = host_grads;
  // The result in the device tensor's dtype (a bf16 shard of a master on the host): cast here.
  const bool cast = p.scalar_type() != params.scalar_type();
  TORCH_CHECK(master_on_host_ || !cast, "AdamWState::update: a staged update needs fp32 parameters");
  if (!p.is_cuda()) {  // the same memory: the copies are plain ones
    if (!master_on_host_) params.copy_(p);
    grads.copy_(g);
    adamw_update(params, grads, exp_avg, exp_avg_sq, at::Tensor(), hyper, weight_decay, step, grad_scale);
    p.copy_(params);
    return;
  }
  // Chunk by chunk, overlapped: every chunk's copies to the host are queued first, each followed by
  // an event; the CPU updates chunk c once its event has passed, while the later chunks are still
  // in transit, and queues its copy back. The stream keeps the order: this step's copies into the
  // host buffers come after the previous step's copies out of them, so once chunk c's event has
  // passed the CPU may write the master and the cast staged for the device too.
  constexpr int64_t kChunk = int64_t{1} << 22;  // elements: 16 MB of each fp32 buffer
  const int64_t n = p.numel(), chunks = (n + kChunk - 1) / kChunk;
  if (cast && !host_out.defined())
    host_out = at::empty({n}, at::TensorOptions().dtype(p.scalar_type()).pinned_memory(true));
  // The clip coefficient as a host scalar for every chunk, read first: the gradients it was taken
  // from must be complete before they are copied anyway.
  const at::Tensor scale = grad_scale.defined() ? grad_scale.to(at::kCPU) : at::Tensor();
  const c10::Stream stream = c10::impl::VirtualGuardImpl(p.device().type()).getStream(p.device());
  std::vector<c10::Event> arrived;
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t lo = c * kChunk, len = std::min(kChunk, n - lo);
    if (!master_on_host_) params.narrow(0, lo, len).copy_(p.narrow(0, lo, len), /*non_blocking=*/true);
    grads.narrow(0, lo, len).copy_(g.narrow(0, lo, len), /*non_blocking=*/true);
    arrived.emplace_back(p.device().type());
    arrived.back().record(stream);
  }
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t lo = c * kChunk, len = std::min(kChunk, n - lo);
    arrived[static_cast<size_t>(c)].synchronize();
    adamw_update(params.narrow(0, lo, len), grads.narrow(0, lo, len), exp_avg.narrow(0, lo, len),
                 exp_avg_sq.narrow(0, lo, len), at::Tensor(), hyper, weight_decay, step, scale);
    at::Tensor out = params.narrow(0, lo, len);
    if (cast) {
      at::Tensor staged = host_out.narrow(0, lo, len);
      staged.copy_(out);
      out = staged;
    }
    p.narrow(0, lo, len).copy_(out, /*non_blocking=*/true);
  }
}

void AdamWState::keep_master_on_host(const at::Tensor& values) {
  TORCH_CHECK(offloaded(), "AdamWState::keep_master_on_host: the state is not offloaded");
  c10::NoGradGuard no_grad;
  host_params.copy_(values.reshape({-1}));
  master_on_host_ = true;
}

int64_t AdamWState::bytes() const {
  const int64_t moments = exp_avg.defined() ? 2 * exp_avg.numel() * static_cast<int64_t>(exp_avg.element_size()) : 0;
  return moments + (master_on_host_ ? host_params.numel() * static_cast<int64_t>(host_params.element_size()) : 0);
}

int64_t AdamWState::host_bytes() const { return offloaded() ? bytes() : 0; }

FusedAdamW::FusedAdamW(std::vector<Group> groups, AdamWHyper hyper, bool offload) : hyper_(hyper) {
  c10::NoGradGuard no_grad;
  for (auto& g : groups) {
    if (g.params.empty()) continue;
    const auto opts = g.params.front().options();
    int64_t total = 0;
    for (const auto& p : g.params) {
      TORCH_CHECK(p.options().dtype() == opts.dtype() && p.device() == opts.device(),
                  "FusedAdamW: parameters of a group must share dtype and device");
      total += p.numel();
    }
    Flat f;
    f.weight_decay = g.weight_decay;
    f.params = at::empty({total}, opts);
    f.grads = at::zeros({total}, opts);
    int64_t off = 0;
    for (auto& p : g.params) {
      const int64_t n = p.numel();
      at::Tensor pv = f.params.narrow(0, off, n).view(p.sizes());
      pv.copy_(p);
      p.set_data(pv);  // the parameter now lives in the flat buffer
      p.mutable_grad() = f.grads.narrow(0, off, n).view(p.sizes());
      f.members.push_back(p);
      off += n;
    }
    f.state = AdamWState(total, opts, offload);
    flats_.push_back(std::move(f));
  }
  // Offloaded, the update takes its rate and count from the host.
  if (!flats_.empty() && !offload) device_.init(flats_.front().params.device(), hyper_.lr, steps_);
}

FusedAdamW::~FusedAdamW() = default;

int64_t FusedAdamW::keep_working_copies(c10::ScalarType dtype, bool add_into_grads) {
  working_ = std::make_unique<WorkingWeights>(dtype, add_into_grads);
  for (const auto& f : flats_) working_->add(f.params, f.members);
  return working_->bytes();
}

void FusedAdamW::zero_grad() {
  for (auto& f : flats_) f.grads.zero_();
}

void FusedAdamW::step(const at::Tensor& grad_scale) {
  ++steps_;
  update(steps_, grad_scale);
}

void FusedAdamW::step_on_device(const at::Tensor& grad_scale, const at::Tensor& found_inf) {
  TORCH_CHECK(device_.on(), "FusedAdamW::step_on_device: the rate and step count are not on the device");
  // The host-side count is not read on this path: the update takes both scalars from the device.
  update(steps_ + 1, grad_scale, found_inf);
}

void FusedAdamW::update(int64_t step, const at::Tensor& grad_scale, const at::Tensor& found_inf) {
  c10::NoGradGuard no_grad;
  device_.advance();
  for (auto& f : flats_)
    f.state.update(f.params, f.grads, hyper_, f.weight_decay, step, grad_scale, &device_, found_inf);
  device_.take_back(found_inf);
  if (working_) working_->refresh();  // the CPU pass writes through raw pointers: no version moves
}

std::vector<at::Tensor> FusedAdamW::flat_grads() const {
  std::vector<at::Tensor> out;
  for (const auto& f : flats_) out.push_back(f.grads);
  return out;
}

std::vector<std::pair<std::string, at::Tensor>> FusedAdamW::state_tensors() const {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (size_t i = 0; i < flats_.size(); ++i) {
    out.emplace_back("g" + std::to_string(i) + ".exp_avg", flats_[i].state.exp_avg);
    out.emplace_back("g" + std::to_string(i) + ".exp_avg_sq", flats_[i].state.exp_avg_sq);
  }
  return out;
}

void FusedAdamW::load_state(const std::vector<std::pair<std::string, at::Tensor>>& tensors, int64_t steps) {
  c10::NoGradGuard no_grad;
  auto mine = state_tensors();
  for (const auto& [name, dst] : mine) {
    const at::Tensor* src = nullptr;
    for (const auto& [n, t] : tensors)
      if (n == name) src = &t;
    if (!src || src->numel() != dst.numel())
      throw CheckpointError("optimizer state '" + name +
                            "' is missing or has the wrong size; the model or its parameter "
                            "grouping differs from the checkpoint's");
    dst.copy_(src->reshape(dst.sizes()));
  }
  steps_ = steps;
  device_.set_steps(steps);
}

int64_t FusedAdamW::host_state_bytes() const {
  int64_t n = 0;
  for (const auto& f : flats_) n += f.state.host_bytes();
  return n;
}

int64_t FusedAdamW::state_bytes() const {
  int64_t n = 0;
  for (const auto& f : flats_) n += f.state.bytes();
  return n;
}

}  // namespace frugal
