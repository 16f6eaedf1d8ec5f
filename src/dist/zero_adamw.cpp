// ZeRO-1, 2 and 3 sharded AdamW; see zero_adamw.h.
#include "frugal/dist/zero_adamw.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <string>

#include "frugal/core/compat.h"
#include "frugal/core/errors.h"
#include "frugal/core/wall_clock.h"
#include "frugal/model/fp8.h"

namespace frugal::dist {

namespace {

// A stage-3 flat buffer's memory comes and goes; its StorageImpl (which the model's views share)
// stays.
void free_storage(const at::Tensor& t) {
  c10::StorageImpl* st = t.storage().unsafeGetStorageImpl();
  st->set_data_ptr_noswap(at::DataPtr(nullptr, st->device()));
  st->set_nbytes(0);
}

void allocate_storage(const at::Tensor& t) {
  c10::StorageImpl* st = t.storage().unsafeGetStorageImpl();
  const size_t nbytes = static_cast<size_t>(t.numel()) * t.element_size();
  st->set_data_ptr_noswap(st->allocator()->allocate(nbytes));
  st->set_nbytes(nbytes);
}

}  // namespace

ZeroAdamW::ZeroAdamW(std::vector<FusedAdamW::Group> groups, AdamWHyper hyper, std::shared_ptr<ProcessGroup> pg,
                     bool shard_gradients, bool offload, std::vector<GroupPlace> places,
                     std::optional<c10::Device> device)
    : hyper_(hyper), pg_(std::move(pg)), shard_gradients_(shard_gradients) {
  c10::NoGradGuard no_grad;
  const int64_t world = pg_->world_size();
  FRUGAL_CHECK(places.empty() || places.size() == groups.size(), Error,
               fmt::format("ZeroAdamW: {} places for {} groups", places.size(), groups.size()));
  gathers_ = std::any_of(places.begin(), places.end(), [](const GroupPlace& p) { return p.unit >= 0; });
  shard_gradients_ = shard_gradients_ || gathers_;
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    auto& g = groups[gi];
    if (g.params.empty()) continue;
    const auto opts = device ? g.params.front().options().device(*device) : g.params.front().options();
    Flat f;
    f.weight_decay = g.weight_decay;
    if (!places.empty()) {
      const GroupPlace& place = places[gi];
      FRUGAL_CHECK(place.origin < 0 || place.offsets.size() == g.params.size(), Error,
                   "ZeroAdamW: a group's place names another number of parameters");
      f.unit = place.unit;
      units_ = std::max(units_, f.unit + 1);
      f.origin = place.origin;
      int64_t here = 0;
      for (size_t k = 0; place.origin >= 0 && k < g.params.size(); ++k) {
        f.spans.push_back({here, place.offsets[k], g.params[k].numel()});
        here += g.params[k].numel();
      }
    }
    for (const auto& p : g.params) f.numel += p.numel();
    f.chunk = (f.numel + world - 1) / world;
    f.params = at::zeros({f.chunk * world}, opts);  // the padding stays zero: AdamW keeps 0 at 0
    f.grads = at::zeros({shard_gradients_ ? f.chunk : f.chunk * world}, opts);
    int64_t off = 0;
    for (auto& p : g.params) {
      const int64_t n = p.numel();
      at::Tensor pv = f.params.narrow(0, off, n).view(p.sizes());
      pv.copy_(p);
      p.set_data(pv);
      if (shard_gradients_) {
        p.mutable_grad().reset();  // autograd's own gradient, reduced and freed in backward
      } else {
        p.mutable_grad() = f.grads.narrow(0, off, n).view(p.sizes());
      }
      off += n;
    }
    f.state = AdamWState(f.chunk, opts, offload);
    if (f.unit >= 0) {  // stage 3: keep this rank's chunk, free the rest
      const c10::ScalarType copy = places.empty() ? c10::ScalarType::Undefined : places[gi].copy_dtype;
      const at::Tensor own = f.params.narrow(0, pg_->rank() * f.chunk, f.chunk);
      if (offload) {  // the fp32 master in host memory; the device keeps what the gathers send
        f.state.keep_master_on_host(own);
        f.shard = own.to(copy != c10::ScalarType::Undefined ? copy : own.scalar_type(), false, /*copy=*/true);
      } else {
        f.shard = own.clone();
      }
      f.master.buf = f.params;
      free_storage(f.params);
      f.master.present = false;
      if (copy != c10::ScalarType::Undefined) {
        if (!copies_) copies_ = std::make_unique<WorkingWeights>(copy, /*add_into_grads=*/false);
        f.copy.buf = at::empty({f.chunk * world}, opts.dtype(copy));
        copies_->add_gathered(f.params, f.copy.buf, g.params);  // its views first: they check the memory
        free_storage(f.copy.buf);
        f.copy.present = false;
      }
    }
    flats_.push_back(std::move(f));
  }
  if (!flats_.empty() && !offload) device_.init(flats_.front().params.device(), hyper_.lr, steps_);
}

void ZeroAdamW::zero_grad() {
  for (auto& f : flats_) f.grads.zero_();
}

void ZeroAdamW::step() {
  c10::NoGradGuard no_grad;
  ++steps_;
  device_.advance();
  const int64_t rank = pg_->rank(), world = pg_->world_size();
  for (auto& f : flats_) {
    if (f.unit >= 0) {  // stage 3: the shard is the parameters; the next use gathers them
      release(f, /*keep_writes=*/false);
      f.state.update(f.shard, f.grads, hyper_, f.weight_decay, steps_, {}, &device_);
      continue;
    }
    at::Tensor p = f.params.narrow(0, rank * f.chunk, f.chunk);
    at::Tensor g = shard_gradients_ ? f.grads : f.grads.narrow(0, rank * f.chunk, f.chunk);
    // FusedAdamW's update, on this rank's chunk.
    f.state.update(p, g, hyper_, f.weight_decay, steps_, {}, &device_);
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<at::Tensor> out;
    for (int64_t r = 0; r < world; ++r) out.push_back(f.params.narrow(0, r * f.chunk, f.chunk));
    pg_->allgather(p.clone(), out);  // a copy: the input must not alias an output
    gather_s_ += seconds_since(t0);
  }
}

std::vector<at::Tensor> ZeroAdamW::grads() {
  std::vector<at::Tensor> out;
  for (const auto& f : flats_) out.push_back(f.grads);
  return out;
}

int64_t ZeroAdamW::group_of(const c10::StorageImpl* storage) const {
  for (size_t i = 0; i < flats_.size(); ++i)
    if (flats_[i].params.storage().unsafeGetStorageImpl() == storage) return static_cast<int64_t>(i);
  return -1;
}

void ZeroAdamW::accumulate_shard(int64_t group, int64_t lo, const at::Tensor& values) {
  c10::NoGradGuard no_grad;
  Flat& f = flats_[static_cast<size_t>(group)];
  const int64_t own_lo = pg_->rank() * f.chunk;
  const int64_t a = std::max(lo, own_lo), b = std::min(lo + values.numel(), own_lo + f.chunk);
  if (a >= b) return;
  f.grads.narrow(0, a - own_lo, b - a).add_(values.narrow(0, a - lo, b - a));
}

int64_t ZeroAdamW::gradient_bytes() const {
  int64_t n = 0;
  for (const auto& f : flats_) n += f.grads.numel() * static_cast<int64_t>(f.grads.element_size());
  return n;
}

std::string ZeroAdamW::state_name(size_t flat, const char* what) const {
  const Flat& f = flats_[flat];
  return "g" + std::to_string(f.origin >= 0 ? static_cast<size_t>(f.origin) : flat) + "." + what;
}

int64_t ZeroAdamW::origin_numel(int64_t origin) const {
  int64_t n = 0;
  for (const auto& g : flats_)
    for (const auto& sp : g.spans)
      if (g.origin == origin) n = std::max(n, sp.there + sp.numel);
  return n;
}

// Stage 3: each parameter's values from this flat's layout into its origin group's (`origin`,
// allocated at the origin's size on first use); returns `origin`. Unsplit: `full` itself.
at::Tensor ZeroAdamW::to_checkpoint_layout(size_t flat, const at::Tensor& full, at::Tensor& origin) const {
  const Flat& f = flats_[flat];
  if (f.origin < 0) return full;
  if (!origin.defined()) origin = at::zeros({origin_numel(f.origin)}, full.options());
  for (const auto& sp : f.spans) origin.narrow(0, sp.there, sp.numel).copy_(full.narrow(0, sp.here, sp.numel));
  return origin;
}

at::Tensor ZeroAdamW::from_checkpoint_layout(size_t flat, const at::Tensor& saved) const {
  const Flat& f = flats_[flat];
  const at::Tensor s = saved.reshape({-1});
  if (f.origin < 0) return s;
  if (s.numel() != origin_numel(f.origin)) return at::Tensor();  // another model or grouping
  at::Tensor out = at::zeros({f.numel}, s.options());
  for (const auto& sp : f.spans) out.narrow(0, sp.here, sp.numel).copy_(s.narrow(0, sp.there, sp.numel));
  return out;
}

std::vector<std::pair<std::string, at::Tensor>> ZeroAdamW::state_tensors() {
  std::vector<std::pair<std::string, at::Tensor>> out;
  std::map<std::string, size_t> slot;  // a name already in `out` (stage 3: split groups share one)
  const int64_t world = pg_->world_size();
  for (size_t i = 0; i < flats_.size(); ++i) {
    const Flat& f = flats_[i];
    for (const auto& [what, shard] : {std::pair<const char*, at::Tensor>{"exp_avg", f.state.exp_avg},
                                      std::pair<const char*, at::Tensor>{"exp_avg_sq", f.state.exp_avg_sq}}) {
      // Gathered on the parameters' device (an offloaded shard is a host tensor, which NCCL cannot send).
      at::Tensor full = at::empty({f.chunk * world}, f.params.options());
      std::vector<at::Tensor> parts;
      for (int64_t r = 0; r < world; ++r) parts.push_back(full.narrow(0, r * f.chunk, f.chunk));
      pg_->allgather(shard.to(f.params.device()), parts);
      const std::string name = state_name(i, what);
      const auto it = slot.find(name);
      at::Tensor origin = it == slot.end() ? at::Tensor() : out[it->second].second;
      at::Tensor laid = to_checkpoint_layout(i, full.narrow(0, 0, f.numel), origin);
      if (it == slot.end()) {
        slot[name] = out.size();
        out.emplace_back(name, laid);
      }
    }
  }
  return out;
}

// This rank's chunk of each flat buffer, as pieces of the checkpoint's layout: the chunk itself
// for an unsplit group; for a split one, the part of each parameter inside the chunk, at the
// parameter's place in its origin group.
std::vector<std::array<int64_t, 3>> ZeroAdamW::chunk_pieces(size_t flat) const {
  const Flat& f = flats_[flat];
  const int64_t lo = std::min(pg_->rank() * f.chunk, f.numel), hi = std::min(f.numel, lo + f.chunk);
  std::vector<std::array<int64_t, 3>> out;
  if (f.origin < 0) {
    if (hi > lo) out.push_back({lo, lo, hi - lo});
    return out;
  }
  for (const auto& sp : f.spans) {
    const int64_t a = std::max(lo, sp.here), b = std::min(hi, sp.here + sp.numel);
    if (b > a) out.push_back({sp.there + (a - sp.here), a, b - a});
  }
  return out;
}

StateShard ZeroAdamW::state_shard() const {
  StateShard out;
  for (size_t i = 0; i < flats_.size(); ++i) {
    const Flat& f = flats_[i];
    const int64_t lo = std::min(pg_->rank() * f.chunk, f.numel);
    const int64_t whole = f.origin < 0 ? f.numel : origin_numel(f.origin);
    for (const auto& [what, mine] : {std::pair<const char*, at::Tensor>{"exp_avg", f.state.exp_avg},
                                     std::pair<const char*, at::Tensor>{"exp_avg_sq", f.state.exp_avg_sq}}) {
      StateShard::Entry& e = out.entry(state_name(i, what), whole);
      for (const auto& [there, here, n] : chunk_pieces(i)) {
        e.pieces.emplace_back(there, n);
        e.values.push_back(mine.narrow(0, here - lo, n));
      }
    }
  }
  return out;
}

// state_shard()'s pieces read from the checkpoint's files into this rank's moments.
void ZeroAdamW::load_state_shards(const std::string& dir, const nlohmann::json& index, int64_t steps) {
  c10::NoGradGuard no_grad;
  StateShard want = state_shard();
  read_state_pieces(dir, index, want);  // the values now the checkpoint's, in the same order
  std::map<std::string, size_t> next;   // per entry, the first piece of the flat at hand
  for (size_t i = 0; i < flats_.size(); ++i) {
    Flat& f = flats_[i];
    const int64_t lo = std::min(pg_->rank() * f.chunk, f.numel);
    for (auto* dst : {&f.state.exp_avg, &f.state.exp_avg_sq}) {
      const std::string name = state_name(i, dst == &f.state.exp_avg ? "exp_avg" : "exp_avg_sq");
      const StateShard::Entry& e = want.entry(name, 0);
      size_t& k = next[name];  // state_shard() appended this flat's pieces after the earlier flats'
      dst->zero_();
      for (const auto& [there, here, n] : chunk_pieces(i)) dst->narrow(0, here - lo, n).copy_(e.values[k++]);
    }
  }
  steps_ = steps;
  device_.set_steps(steps);
}

ZeroAdamW::OwnPart ZeroAdamW::own_part(const at::Tensor& t) const {
  OwnPart p;
  p.flat = t.numel() > 0 ? group_of(t.storage().unsafeGetStorageImpl()) : -1;
  if (p.flat < 0) return p;
  const Flat& f = flats_[static_cast<size_t>(p.flat)];
  FRUGAL_CHECK(t.is_contiguous(), Error, "ZeroAdamW: a model tensor is not a contiguous view of its buffer");
  const int64_t at = t.storage_offset() - f.params.storage_offset();  // its first element in the flat buffer
  const int64_t lo = std::min(pg_->rank() * f.chunk, f.numel), hi = std::min(f.numel, lo + f.chunk);
  const int64_t a = std::max(lo, at), b = std::min(hi, at + t.numel());
  if (a < b) {
    p.in_tensor = a - at;
    p.in_chunk = a - lo;
    p.count = b - a;
  }
  return p;
}

StateShard ZeroAdamW::weights_shard(const std::vector<std::pair<std::string, at::Tensor>>& tensors) const {
  StateShard out;
  for (const auto& [name, t] : tensors) {
    StateShard::Entry& e = out.entry(name, t.numel());
    e.shape = t.sizes().vec();
    const OwnPart p = own_part(t);
    if (p.flat < 0) {  // not re-homed: whole on every rank, written by rank 0
      if (pg_->rank() == 0) {
        e.pieces.emplace_back(0, t.numel());
        e.values.push_back(t.detach().reshape({-1}));
      }
      continue;
    }
    if (p.count == 0) continue;
    const Flat& f = flats_[static_cast<size_t>(p.flat)];
    e.pieces.emplace_back(p.in_tensor, p.count);
    // Stage 3: the chunk lives in the master shard (the buffer has no memory between gathers).
    e.values.push_back(f.shard.defined() ? master_shard(f).narrow(0, p.in_chunk, p.count)
                                         : t.detach().reshape({-1}).narrow(0, p.in_tensor, p.count));
  }
  return out;
}

void ZeroAdamW::load_weights(const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                             const std::vector<at::Tensor>& values) {
  c10::NoGradGuard no_grad;
  FRUGAL_CHECK(pinned_ == 0, Error, "ZeroAdamW::load_weights inside gather_parameters()");
  for (auto& f : flats_) release(f, /*keep_writes=*/false);  // a unit still whole is only a cache
  for (size_t i = 0; i < tensors.size(); ++i) {
    const at::Tensor& t = tensors[i].second;
    const OwnPart p = own_part(t);
    if (p.flat < 0 || !flats_[static_cast<size_t>(p.flat)].shard.defined()) {  // whole on every rank
      t.copy_(values[i]);
      continue;
    }
    if (p.count > 0)
      set_master_shard(flats_[static_cast<size_t>(p.flat)], p.in_chunk,
                       values[i].reshape({-1}).narrow(0, p.in_tensor, p.count));
  }
}

void ZeroAdamW::load_state(const std::vector<std::pair<std::string, at::Tensor>>& tensors, int64_t steps) {
  c10::NoGradGuard no_grad;
  const int64_t rank = pg_->rank();
  for (size_t i = 0; i < flats_.size(); ++i) {
    Flat& f = flats_[i];
    for (auto* dst : {&f.state.exp_avg, &f.state.exp_avg_sq}) {
      const std::string name = state_name(i, dst == &f.state.exp_avg ? "exp_avg" : "exp_avg_sq");
      const at::Tensor* src = nullptr;
      for (const auto& [n, t] : tensors)
        if (n == name) src = &t;
      const at::Tensor values = src ? from_checkpoint_layout(i, *src) : at::Tensor();
      if (!values.defined() || (f.origin < 0 && values.numel() != f.numel))
        throw CheckpointError("optimizer state '" + name +
                              "' is missing or has the wrong size; the model or its parameter "
                              "grouping differs from the checkpoint's");
      dst->zero_();
      const int64_t lo = std::min(rank * f.chunk, f.numel);
      const int64_t n = std::min(f.numel, lo + f.chunk) - lo;
      if (n > 0) dst->narrow(0, 0, n).copy_(values.narrow(0, lo, n));
    }
  }
  steps_ = steps;
  device_.set_steps(steps);
}

// The model reads the working copy where autocast is on in its dtype and fp8 is off
// (working_weight()); a backward's gather runs under its forward's autocast state (causal_lm.cpp).
ZeroAdamW::Flat::Whole& ZeroAdamW::wanted(Flat& f) {
  if (!f.copy.buf.defined() || pinned_ > 0 || fp8::enabled()) return f.master;
  const c10::DeviceType dev = f.copy.buf.device().type();
  const bool read = compat::autocast_enabled(dev) && compat::autocast_dtype(dev) == f.copy.buf.scalar_type();
  return read ? f.copy : f.master;
}

void ZeroAdamW::start_gather(Flat& f, Flat::Whole& w) {
  c10::NoGradGuard no_grad;
  allocate_storage(w.buf);
  // Written through a tensor of its own: the parameters' (and the copies') version counters stay
  // where autograd saw them in the forward.
  at::Tensor target = at::empty({0}, w.buf.options());
  target.set_(w.buf.storage(), 0, {f.chunk * pg_->world_size()}, {1});
  std::vector<at::Tensor> out;
  for (int64_t r = 0; r < pg_->world_size(); ++r) out.push_back(target.narrow(0, r * f.chunk, f.chunk));
  // The device's shard where it has the dtype wanted; else the master (from host memory, offloaded), cast.
  const at::Tensor& from = w.buf.scalar_type() == f.shard.scalar_type() ? f.shard : master_shard(f);
  w.sending = from.to(w.buf.device(), w.buf.scalar_type());
  (&w == &f.copy ? gathered_copy_bytes_ : gathered_bytes_) +=
      static_cast<double>(w.buf.numel()) * static_cast<double>(w.buf.element_size());
  w.arriving = pg_->allgather_async(w.sending, out);
}

// Waits for a gather in flight; the wait is the communication not hidden behind compute.
void ZeroAdamW::finish_gather(Flat::Whole& w) {
  if (!w.arriving) return;
  const auto t0 = std::chrono::steady_clock::now();
  w.arriving->wait();
  w.arriving.reset();
  w.sending = at::Tensor();
  w.present = true;
  unit_gather_s_ += seconds_since(t0);
}

const at::Tensor& ZeroAdamW::master_shard(const Flat& f) {
  return f.state.master_on_host() ? f.state.host_params : f.shard;
}

void ZeroAdamW::set_master_shard(Flat& f, int64_t at, const at::Tensor& values) {
  c10::NoGradGuard no_grad;
  const int64_t n = values.numel();
  master_shard(f).narrow(0, at, n).copy_(values);
  if (f.state.master_on_host()) f.shard.narrow(0, at, n).copy_(f.state.host_params.narrow(0, at, n));
}

void ZeroAdamW::gather(Flat& f) {
  Flat::Whole& w = wanted(f);
  if (w.present) return;
  if (!w.arriving) start_gather(f, w);
  finish_gather(w);
}

void ZeroAdamW::release(Flat& f, bool keep_writes) {
  if (f.unit < 0) return;
  for (Flat::Whole* w : {&f.master, &f.copy}) finish_gather(*w);  // no memory is freed under a write in flight
  if (keep_writes && f.master.present) set_master_shard(f, 0, f.params.narrow(0, pg_->rank() * f.chunk, f.chunk));
  for (Flat::Whole* w : {&f.master, &f.copy})
    if (w->buf.defined() && w->present) {
      free_storage(w->buf);
      w->present = false;
    }
}

void ZeroAdamW::gather_unit(int64_t unit) {
  bool started = false;  // here, not by a prefetch
  for (auto& f : flats_)
    if (f.unit == unit && !wanted(f).present) {
      started = started || !wanted(f).arriving;
      gather(f);
    }
  unit_gathers_ += started ? 1 : 0;
}

void ZeroAdamW::prefetch_unit(int64_t unit) {
  bool started = false;
  for (auto& f : flats_)
    if (f.unit == unit && !wanted(f).present && !wanted(f).arriving) {
      start_gather(f, wanted(f));
      started = true;
    }
  unit_gathers_ += started ? 1 : 0;
}

void ZeroAdamW::release_unit(int64_t unit) {
  if (pinned_ > 0) return;  // inside gather_parameters(): whole until its release
  for (auto& f : flats_)
    if (f.unit == unit) release(f, false);
}

void ZeroAdamW::gather_parameters() {
  ++pinned_;
  for (auto& f : flats_)
    if (f.unit >= 0) gather(f);
}

void ZeroAdamW::release_parameters(bool keep_writes) {
  if (pinned_ > 0 && --pinned_ > 0) return;
  for (auto& f : flats_) release(f, keep_writes);
}

void ZeroAdamW::release_blocks() {
  if (pinned_ == 0) release_parameters(false);
}

int64_t ZeroAdamW::parameter_bytes() const {
  if (!gathers_) return -1;
  int64_t n = 0;
  for (const auto& f : flats_) {
    const at::Tensor& t = f.unit >= 0 ? f.shard : f.params;
    n += t.numel() * static_cast<int64_t>(t.element_size());
  }
  return n;
}

int64_t ZeroAdamW::host_state_bytes() const {
  int64_t n = 0;
  for (const auto& f : flats_) n += f.state.host_bytes();
  return n;
}

int64_t ZeroAdamW::state_bytes() const {
  int64_t n = 0;
  for (const auto& f : flats_) n += f.state.bytes();
  return n;
}

}  // namespace frugal::dist
