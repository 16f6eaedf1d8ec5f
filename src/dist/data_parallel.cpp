// Bucketed gradient all-reduce, stop agreement and the trainer's multi-process helpers; see
// data_parallel.h.
#include "frugal/dist/data_parallel.h"

#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/torch.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <map>

#include "frugal/core/errors.h"
#include "frugal/core/wall_clock.h"
#include "frugal/dist/zero_adamw.h"
#include "frugal/train/muon.h"

namespace frugal::dist {
namespace {
using Clock = std::chrono::steady_clock;
// dist.zero = 2: buckets reduced to their owners and not yet folded into the shard. Two exposed
// the reduces' latency in backward (ZeRO-2 6% slower than ZeRO-1 on 2 CPU ranks); four did not.
constexpr size_t kZero2InFlight = 4;
}  // namespace

struct DataParallel::Bucket {
  at::Tensor view;      // a contiguous range of the flat gradient buffer
  int64_t params = 0;   // parameters in the bucket
  int64_t pending = 0;  // of them, not yet accumulated in this backward
  std::unique_ptr<Pending> work;
  // dist.zero = 2: the range [lo, hi) of flat group `group`'s parameters, its members, the
  // gradients copied out of them while in flight, and the reduces to each owner of the range.
  int64_t group = -1, lo = 0, hi = 0;
  std::vector<size_t> members;
  at::Tensor staging;
  std::vector<std::unique_ptr<Pending>> works;
};

DataParallel::DataParallel(std::shared_ptr<ProcessGroup> pg, const Config& config)
    : pg_(std::move(pg)),
      config_(config.dist),
      comm_device_(pg_->backend() == "nccl" ? c10::Device(config.run.device) : c10::Device(c10::kCPU)),
      run_device_(config.run.device) {
  // The all-reduce buckets are views of gradients that stay in place from step to step: fused_adamw's
  // flat buffer, or Muon's gradient per matrix beside the flat buffer of its AdamW part.
  if (config.train.optimizer == OptimizerKind::kTorchAdamW)
    throw ConfigError(
        "multi-process training needs train.optimizer = \"fused_adamw\" or \"muon\" (their gradients stay "
        "in place, where the all-reduce buckets view them); torch_adamw is single-process only");
  if (config.train.optimizer == OptimizerKind::kMuon && config_.zero >= ZeroStage::kGradients)
    throw ConfigError(fmt::format(
        "dist.zero = {} shards the gradients, and Muon's Newton-Schulz iteration needs each matrix's whole "
        "gradient; set dist.zero = 1 (Muon's matrices are then sharded whole, each rank stepping its own) or "
        "train.optimizer = \"fused_adamw\"",
        static_cast<int64_t>(config_.zero)));
}

DataParallel::~DataParallel() = default;

OptimizerSharding DataParallel::optimizer_sharding() {
  if (config_.zero == ZeroStage::kNone) return {};  // every rank keeps the whole state
  OptimizerSharding s;
  s.rank = rank();
  s.world = world_size();
  s.broadcast = [pg = pg_](at::Tensor& x, int64_t root) { pg->broadcast(x, root); };
  s.gathers_parameters = config_.zero == ZeroStage::kParameters;
  s.adamw = [this](const std::vector<ParamGroup>& groups, const TrainConfig& t) -> std::unique_ptr<Optimizer> {
    std::vector<FusedAdamW::Group> fused;
    std::vector<GroupPlace> places;
    for (const auto& g : groups) {
      fused.push_back({g.params, g.weight_decay});
      if (config_.zero == ZeroStage::kParameters)
        places.push_back({g.unit, g.origin, g.origin_offsets, g.bf16_copy ? at::kBFloat16 : at::ScalarType::Undefined});
    }
    auto adamw = std::make_unique<ZeroAdamW>(std::move(fused), AdamWHyper{t.lr, t.beta1, t.beta2, 1e-8}, pg_,
                                             config_.zero >= ZeroStage::kGradients,
                                             config_.offload == Offload::kOptimizer, std::move(places), run_device_);
    zero_ = adamw.get();
    return adamw;
  };
  return s;
}

void DataParallel::attach(const std::vector<at::Tensor>& params) {
  const int64_t cap = std::max<int64_t>(1, static_cast<int64_t>(config_.bucket_mb * 1e6));
  struct Open {
    int64_t lo = 0, hi = 0;       // element range in the flat buffer
    std::vector<size_t> members;  // parameter indices, descending
  };
  std::map<const c10::StorageImpl*, Open> open;   // one open bucket per flat buffer (param group)
  std::vector<std::pair<Open, at::Tensor>> done;  // closed buckets and a gradient of their buffer
  auto close = [&](const c10::StorageImpl* key, const at::Tensor& g) {
    auto it = open.find(key);
    if (it == open.end()) return;
    done.emplace_back(std::move(it->second), g);
    open.erase(it);
  };
  // Backward meets the last parameters first: walk them in reverse; a bucket grows downwards
  // while the next gradient of its group sits right below it in the flat buffer (dist.zero = 2:
  // the next parameter in the flat parameter buffer, the gradients having no buffer of their own).
  shard_grads_ = zero_ && zero_->shards_gradients();
  params_ = params;
  for (size_t k = params.size(); k-- > 0;) {
    const at::Tensor& g = shard_grads_ ? params[k] : params[k].grad();
    if (!g.defined() || !g.is_contiguous() || (shard_grads_ && zero_->group_of(g.storage().unsafeGetStorageImpl()) < 0))
      throw Error(
          "data parallel: a parameter has no gradient that stays in place; the optimizer must be fused_adamw or muon");
    const auto* key = g.storage().unsafeGetStorageImpl();
    const int64_t off = g.storage_offset(), n = g.numel();
    auto it = open.find(key);
    if (it != open.end() &&
        (off + n != it->second.lo || (it->second.hi - it->second.lo) * static_cast<int64_t>(g.element_size()) >= cap)) {
      close(key, g);
      it = open.end();
    }
    if (it == open.end()) it = open.emplace(key, Open{off + n, off + n, {}}).first;
    it->second.lo = off;
    it->second.members.push_back(k);
  }
  while (!open.empty()) {
    const size_t any_member = open.begin()->second.members.front();
    close(open.begin()->first, shard_grads_ ? params[any_member] : params[any_member].grad());
  }
  // Launch order = expected completion order: a bucket is complete when its earliest parameter's
  // gradient arrives, so the bucket whose smallest index is largest goes first.
  std::sort(done.begin(), done.end(),
            [](const auto& a, const auto& b) { return a.first.members.back() > b.first.members.back(); });
  bucket_of_.assign(params.size(), 0);
  for (auto& [o, g] : done) {
    auto b = std::make_unique<Bucket>();
    if (shard_grads_) {
      b->group = zero_->group_of(g.storage().unsafeGetStorageImpl());
      b->lo = o.lo;
      b->hi = o.hi;
      b->members = o.members;
    } else {
      b->view = at::empty({0}, g.options());
      b->view.set_(g.storage(), o.lo, {o.hi - o.lo}, {1});
    }
    b->params = static_cast<int64_t>(o.members.size());
    for (size_t i : o.members) bucket_of_[i] = buckets_.size();
    buckets_.push_back(std::move(b));
  }
  for (size_t i = 0; i < params.size(); ++i) {
    auto acc = torch::autograd::impl::grad_accumulator(params[i]);
    acc->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
        [this, i](const torch::autograd::variable_list& out, const torch::autograd::variable_list&) {
          on_grad_ready(i);
          return out;
        }));
    hook_owners_.push_back(acc);
  }
}

void DataParallel::before_backward(bool last_micro_batch) {
  if (shard_grads_) {  // every micro-batch reduces: the previous one's last buckets first
    for (auto& b : buckets_) b->pending = 0;
    if (reducing_) launch_ready();
    fold_in_flight(0);
  }
  reducing_ = last_micro_batch || shard_grads_;
  if (!reducing_) return;
  next_launch_ = 0;
  for (auto& b : buckets_) b->pending = b->params;
}

void DataParallel::on_grad_ready(size_t param) {
  if (!reducing_) return;
  Bucket& b = *buckets_[bucket_of_[param]];
  if (--b.pending == 0) launch_ready();
}

// Starts complete buckets in bucket order only, so every rank issues the same collective sequence.
void DataParallel::launch_ready() {
  while (next_launch_ < buckets_.size() && buckets_[next_launch_]->pending <= 0) {
    Bucket& b = *buckets_[next_launch_++];
    if (shard_grads_) {
      launch_to_owners(b);
      in_flight_.push_back(next_launch_ - 1);
      fold_in_flight(kZero2InFlight);
      continue;
    }
    b.view.div_(static_cast<double>(pg_->world_size()));  // sum of (grad / world) = the mean
    b.work = pg_->allreduce_sum(b.view);
  }
}

// The bucket's gradients into one staging buffer (freeing them: autograd makes new ones next
// backward), divided by the world size, and each part reduced to the rank that owns it.
void DataParallel::launch_to_owners(Bucket& b) {
  torch::NoGradGuard no_grad;
  const at::Tensor& any = params_[b.members.front()];
  b.staging = at::empty({b.hi - b.lo}, any.options());
  for (size_t i : b.members) {
    at::Tensor& g = params_[i].mutable_grad();
    at::Tensor slot = b.staging.narrow(0, params_[i].storage_offset() - b.lo, params_[i].numel());
    if (g.defined()) {
      slot.copy_(g.reshape({-1}));
      g.reset();
    } else {
      slot.zero_();  // no gradient reached this parameter in this backward
    }
  }
  b.staging.div_(static_cast<double>(pg_->world_size()));
  const int64_t chunk = zero_->chunk(b.group);
  for (int64_t owner = b.lo / chunk; owner * chunk < b.hi; ++owner) {
    const int64_t a = std::max(b.lo, owner * chunk), e = std::min(b.hi, (owner + 1) * chunk);
    b.works.push_back(pg_->reduce_sum(b.staging.narrow(0, a - b.lo, e - a), owner));
  }
}

void DataParallel::fold(Bucket& b) {
  const auto t0 = Clock::now();
  for (auto& w : b.works) w->wait();
  wait_s_ += seconds_since(t0);
  b.works.clear();
  zero_->accumulate_shard(b.group, b.lo, b.staging);
  b.staging = at::Tensor();
}

void DataParallel::fold_in_flight(size_t keep) {
  while (in_flight_.size() > keep) {
    fold(*buckets_[in_flight_.front()]);
    in_flight_.erase(in_flight_.begin());
  }
}

void DataParallel::finish(at::Tensor& loss) {
  if (!reducing_) return;
  for (auto& b : buckets_) b->pending = 0;  // a parameter that got no gradient this step
  launch_ready();
  at::Tensor l = loss.reshape({1});
  if (l.device() != comm_device_) l = l.to(comm_device_);
  l.div_(static_cast<double>(pg_->world_size()));
  auto lw = pg_->allreduce_sum(l);
  fold_in_flight(0);
  const auto t0 = Clock::now();
  for (auto& b : buckets_) {
    if (!b->work) continue;  // dist.zero = 2: folded above
    b->work->wait();
    b->work.reset();
  }
  lw->wait();
  wait_s_ += seconds_since(t0);
  if (l.data_ptr() != loss.data_ptr()) loss.copy_(l.reshape({}));
  reducing_ = false;
  ++reductions_;
  // dist.zero = 3: a block whose backward did not release it (its input had no gradient).
  if (zero_) zero_->release_blocks();
}

double DataParallel::mean(double value) {
  at::Tensor t = small({value});
  pg_->allreduce_sum(t)->wait();
  return t.cpu().item<double>() / static_cast<double>(pg_->world_size());
}

at::Tensor DataParallel::global_norm(const at::Tensor& local) {
  if (!shard_grads_) return local;
  at::Tensor sq = local.to(at::kDouble).square().reshape({1}).to(comm_device_);
  pg_->allreduce_sum(sq)->wait();
  return sq.sqrt().reshape({}).to(local.device(), local.scalar_type());
}

at::Tensor DataParallel::small(std::vector<double> values) const {
  return at::tensor(values, at::TensorOptions().dtype(at::kDouble)).to(comm_device_);
}

bool DataParallel::any(bool flag) {
  at::Tensor t = small({flag ? 1.0 : 0.0});
  pg_->allreduce_max(t);
  return t.cpu().item<double>() > 0;
}

void DataParallel::broadcast_parameters(const std::vector<at::Tensor>& params) {
  torch::NoGradGuard no_grad;
  for (const auto& p : params) {
    at::Tensor d = p.detach();
    if (d.device() == comm_device_) {
      pg_->broadcast(d, 0);
    } else {
      at::Tensor c = d.to(comm_device_);
      pg_->broadcast(c, 0);
      d.copy_(c);
    }
  }
}

void DataParallel::agree(Control& control) {
  const auto t0 = Clock::now();
  const std::string prefix = fmt::format("stop/{}/", agree_seq_++);
  // The stop of the highest severity wins on every rank (core/callback.h), the kind breaking ties.
  const double code = control.should_stop()
                          ? stop_severity(control.stop_kind()) * 16.0 + static_cast<double>(control.stop_kind()) + 1
                          : 0.0;
  if (code > 0) pg_->store_set(prefix + std::to_string(rank()), fmt::format("{}|{}", code, control.stop_reason()));
  // An end moved before train.steps: the earliest any rank asks for (as -step, for the max).
  constexpr double kNoEnd = -1e18;
  const int64_t mine = control.end_at();
  at::Tensor t =
      small({code, control.checkpoint_requested() ? 1.0 : 0.0, mine > 0 ? -static_cast<double>(mine) : kNoEnd});
  pg_->allreduce_max(t);
  t = t.cpu();
  const double global = t[0].item<double>();
  if (t[1].item<double>() > 0) control.request_checkpoint();  // taken by all when asked by one
  if (t[2].item<double>() > kNoEnd) {
    const auto end = static_cast<int64_t>(-t[2].item<double>());
    if (end != mine)
      control.request_end_at(end, fmt::format("another rank's deadline guard moved the end to step {}", end));
  }
  if (global > 0 && global != code) {
    // Another rank asked for a stronger (or any) stop: adopt its kind and reason.
    std::string reason = "a stop requested by another rank";
    for (int64_t r = 0; r < world_size(); ++r) {
      const std::string key = prefix + std::to_string(r);
      if (!pg_->store_has(key)) continue;
      const std::string v = pg_->store_get(key);
      const size_t bar = v.find('|');
      if (std::stod(v.substr(0, bar)) == global) {
        reason = fmt::format("rank {}: {}", r, v.substr(bar + 1));
        break;
      }
    }
    control.agree_stop(reason, static_cast<StopKind>(static_cast<int>(global) % 16 - 1));
  }
  agree_s_ += seconds_since(t0);
}

std::vector<std::string> DataParallel::gather_strings(const std::string& mine, const std::string& tag) {
  const std::string prefix = "gather/" + tag + "/";
  if (!is_writer()) {
    pg_->store_set(prefix + std::to_string(rank()), mine);
    return {};
  }
  std::vector<std::string> all{mine};
  for (int64_t r = 1; r < world_size(); ++r) {
    const std::string key = prefix + std::to_string(r);
    all.push_back(pg_->store_get(key));
    pg_->store_delete(key);  // read once, by the writer alone: a checkpoint's exchange leaves nothing behind
  }
  return all;
}

void DataParallel::ZeroComm::add_change(const ZeroComm& from, const ZeroComm& to) {
  gather_s += to.gather_s - from.gather_s;
  block_gathers += to.block_gathers - from.block_gathers;
  block_bytes += to.block_bytes - from.block_bytes;
  block_copy_bytes += to.block_copy_bytes - from.block_copy_bytes;
}

DataParallel::ZeroComm DataParallel::zero_comm() const {
  if (!zero_) return {};
  return {zero_->gather_s() + zero_->unit_gather_s(), zero_->unit_gathers(), zero_->unit_gather_bytes(),
          zero_->unit_gather_copy_bytes()};
}

void DataParallel::begin_step() { step_start_ = zero_comm(); }

void DataParallel::end_step() { in_steps_.add_change(step_start_, zero_comm()); }

void DataParallel::add_to_summary(nlohmann::ordered_json& s, double step_s_total, int64_t steps) const {
  const double n = static_cast<double>(std::max<int64_t>(1, steps));
  // The training steps' gathers alone; those between them (an evaluation's forward passes, which
  // gather every block) are reported apart, as totals: spread over the steps they would inflate
  // the per-step figures (and comm_fraction past 1).
  const ZeroComm& in = in_steps_;
  ZeroComm outside;
  outside.add_change(in, zero_comm());
  const double comm = wait_s_ + agree_s_ + in.gather_s;
  s["dist"] = {{"world_size", world_size()},
               {"backend", pg_->backend()},
               {"zero", static_cast<int64_t>(config_.zero)},
               {"buckets", buckets_.size()},
               {"bucket_mb", config_.bucket_mb},
               {"allreduce_wait_ms_per_step", 1e3 * wait_s_ / n},
               {"zero_gather_ms_per_step", 1e3 * in.gather_s / n},
               {"block_gathers_per_step", static_cast<double>(in.block_gathers) / n},
               {"block_gather_mb_per_step", (in.block_bytes + in.block_copy_bytes) / 1e6 / n},
               {"block_gather_bf16_mb_per_step", in.block_copy_bytes / 1e6 / n},
               {"agree_ms_per_step", 1e3 * agree_s_ / n},
               {"comm_ms_per_step", 1e3 * comm / n},
               // Of the time spent in steps plus the agreement after each (which runs outside the step).
               {"comm_fraction", step_s_total + agree_s_ > 0 ? comm / (step_s_total + agree_s_) : 0.0},
               {"block_gathers_outside_steps", outside.block_gathers},
               {"gather_ms_outside_steps", 1e3 * outside.gather_s}};
}

DataParallelFactory data_parallel_factory(std::shared_ptr<ProcessGroup> pg) {
  DataParallelFactory factory;
  factory.rank = pg->rank();
  factory.make = [pg](const Config& config) -> std::unique_ptr<DataParallelism> {
    return std::make_unique<DataParallel>(pg, config);
  };
  return factory;
}

}  // namespace frugal::dist
