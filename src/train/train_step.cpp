// The training step; see train_step.h.
#include "frugal/train/train_step.h"

#include "frugal/train/muon.h"

#include <torch/torch.h>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <unordered_map>
#include <unordered_set>

#include "frugal/core/compat.h"
#include "frugal/core/console.h"
#include "frugal/core/device.h"
#include "frugal/core/errors.h"
#include "frugal/core/phase_trace.h"
#include "frugal/model/activation_checkpointing.h"
#include "frugal/monitor/grad_noise.h"
#include "frugal/train/grad_clip.h"
#include "train/internal/step_lap.h"
#include "train/internal/step_parts.h"

namespace frugal {

void install_activation_checkpointing(CausalLm& model, const ActivationCheckpointing& spec) {
  std::vector<bool> plan = checkpoint_plan(spec, model->layers());
  if (std::none_of(plan.begin(), plan.end(), [](bool b) { return b; })) plan.clear();
  model->set_recompute(std::move(plan));
}

namespace {

// Each group split into one group per block its parameters belong to (ParamGroup::unit; -1 for
// those in no block first), each keeping the group's order and weight decay; with `bf16_copies`
// (bf16 autocast), a block's group of product weights alone is gathered as its bf16 copy.
std::vector<ParamGroup> split_by_block(const std::vector<ParamGroup>& groups, const BlockParameters& model,
                                       bool bf16_copies) {
  std::unordered_map<const c10::TensorImpl*, int64_t> block_of;
  for (size_t b = 0; b < model.blocks.size(); ++b)
    for (const auto& p : model.blocks[b]) block_of[p.unsafeGetTensorImpl()] = static_cast<int64_t>(b);
  std::unordered_set<const c10::TensorImpl*> products;
  for (const auto& w : model.product_weights) products.insert(w.unsafeGetTensorImpl());
  std::vector<ParamGroup> out;
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    const ParamGroup& g = groups[gi];
    std::map<int64_t, ParamGroup> parts;
    int64_t offset = 0;  // in the unsplit group's flat buffer
    for (const auto& p : g.params) {
      const auto it = block_of.find(p.unsafeGetTensorImpl());
      const int64_t unit = it == block_of.end() ? -1 : it->second;
      ParamGroup& part = parts[unit];
      part.weight_decay = g.weight_decay;
      part.muon = g.muon;
      part.unit = unit;
      part.origin = static_cast<int64_t>(gi);
      part.params.push_back(p);
      part.origin_offsets.push_back(offset);
      offset += p.numel();
    }
    for (auto& [unit, part] : parts) {
      part.bf16_copy = bf16_copies && unit >= 0 &&
                       std::all_of(part.params.begin(), part.params.end(),
                                   [&](const at::Tensor& p) { return products.count(p.unsafeGetTensorImpl()) > 0; });
      out.push_back(std::move(part));
    }
  }
  return out;
}

}  // namespace

TrainStep::TrainStep(const RunSetup& setup, const TrainConfig& train, const PrecisionConfig& precision,
                     std::shared_ptr<torch::nn::Module> model, LossFn loss, BatchSource& data, c10::Device device,
                     GradSync* sync, std::vector<ParamGroup> groups)
    : train_(train),
      precision_config_(precision),
      micro_batch_(setup.micro_batch),
      model_(std::move(model)),
      loss_(std::move(loss)),
      tokens_per_sample_(setup.tokens_per_sample),
      data_(data),
      device_(device),
      accum_(setup.accum),
      precision_(setup.precision),
      scaler_(setup.loss_scaling, precision),
      sync_(sync),
      events_(device) {
  if (groups.empty()) {
    groups = train.optimizer == OptimizerKind::kMuon ? muon_param_groups(*model_, train.weight_decay)
                                                     : default_param_groups(model_->parameters(), train.weight_decay);
  } else {
    check_param_groups(groups, model_->parameters(), "TaskHooks::param_groups");
  }
  const OptimizerSharding sharding = sync_ ? sync_->optimizer_sharding() : OptimizerSharding{};
  std::shared_ptr<BlockGathering> gathering;
  if (sharding.gathers_parameters) {  // dist.zero = 3: the groups split by block
    FRUGAL_CHECK(static_cast<bool>(setup.gather_blocks), ConfigError,
                 "dist.zero = 3 needs the model's blocks (TaskHooks::gather_blocks); set dist.zero = 2");
    gathering = std::make_shared<BlockGathering>();
    gathering->reshard_after_forward = setup.reshard_after_forward;
    groups = split_by_block(groups, setup.gather_blocks(gathering), setup.precision.mode() == PrecisionMode::kBf16);
  }
  optimizer_ = build_optimizer(groups, train, setup.muon_bf16, sharding, setup.offload);
  if (gathering) {
    Optimizer* opt = optimizer_.get();
    gathering->need = [opt](size_t i) { opt->gather_unit(static_cast<int64_t>(i)); };
    gathering->done = [opt](size_t i) { opt->release_unit(static_cast<int64_t>(i)); };
    gathering->prefetch = [opt](size_t i) { opt->prefetch_unit(static_cast<int64_t>(i)); };
  }
  // Several processes reduce gradients from hooks on AccumulateGrad: the copies' gradients go
  // through it there.
  if (setup.working_weights) working_bytes_ = optimizer_->keep_working_copies(precision_.dtype(), !sync_);
  if (train.cuda_graphs) {
    FRUGAL_CHECK(!data_.ragged_targets(), ConfigError,
                 "train.cuda_graphs = true cannot apply to this data: each step weighs its micro-batches by their "
                 "target counts on the host (chat and prompt-completion data); set train.cuda_graphs = false");
    FRUGAL_CHECK(optimizer_->steps_on_device(), ConfigError,
                 "train.cuda_graphs = true needs the optimizer's rate and step count in device memory, which this "
                 "device or LibTorch does not give; set train.cuda_graphs = false");
    graphs_on_ = !sync_;
  }
  if (sync_) {
    std::vector<at::Tensor> trainable;  // frozen parameters (train.freeze) have no gradient to reduce
    for (const auto& p : model_->parameters())
      if (p.requires_grad()) trainable.push_back(p);
    sync_->attach(trainable);
  }
}

TrainStep::~TrainStep() = default;

TrainStep::StateBytes TrainStep::state_bytes() const {
  StateBytes b;
  const int64_t sharded = optimizer_->parameter_bytes();  // ZeRO-3: the shards and the whole ones it keeps
  for (const auto& p : model_->parameters())
    if (sharded < 0 || !p.requires_grad()) b.parameters += p.numel() * static_cast<int64_t>(p.element_size());
  b.parameters += std::max<int64_t>(sharded, 0);
  for (const auto& g : optimizer_->grads())
    if (g.defined()) b.gradients += g.numel() * static_cast<int64_t>(g.element_size());
  b.working_weights = working_bytes_;
  b.optimizer_host = optimizer_->host_state_bytes();
  b.optimizer = optimizer_->state_bytes() - b.optimizer_host;
  return b;
}

namespace {
RunSetup single_process_setup(const Config& config, int64_t tokens_per_sample, c10::Device device) {
  TaskHooks hooks;
  hooks.tokens_per_sample = tokens_per_sample;
  return set_up_run(config, hooks, 1, PrecisionPolicy(config.precision.mode, device));
}
}  // namespace

TrainStep::TrainStep(const Config& config, std::shared_ptr<torch::nn::Module> model, LossFn loss, BatchSource& data,
                     c10::Device device, int64_t tokens_per_sample, GradSync* sync)
    : TrainStep(single_process_setup(config, tokens_per_sample, device), config.train, config.precision,
                std::move(model), std::move(loss), data, device, sync) {}

TrainStep::TrainStep(const Config& config, CausalLm model, BatchSource& data, c10::Device device, GradSync* sync)
    : TrainStep(
          config, model.ptr(),
          [m = model.get()](torch::nn::Module&, const Batch& b) { return m->loss(b.x, b.y, b.pos); }, data, device,
          config.model.block, sync) {
  install_activation_checkpointing(model, config.memory.activation_checkpointing);
}

// Device time of every pending span (one wait, for the last event): their sum goes to `r.settled`,
// and the spans of this step (from step_spans_ on) replace its host laps in `r.phases`.
void TrainStep::settle(StepResult& r) {
  r.settled = PhaseTimes{};
  if (!events_.active()) return;
  if (!spans_.empty()) {
    events_.wait(spans_.back().to);
    bool own = false;
    for (size_t i = 0; i < spans_.size(); ++i) {
      const Span& s = spans_[i];
      const double t = events_.seconds_between(s.from, s.to);
      r.settled.*s.phase += t;
      if (i < step_spans_) continue;
      if (!own) r.phases.forward_s = r.phases.backward_s = r.phases.optimizer_s = 0.0;
      own = true;
      r.phases.*s.phase += t;
    }
  }
  spans_.clear();
  events_.clear();
  step_spans_ = 0;
  r.phases_on_device = true;
}

// The end of a step: settles when asked, or when the pending events pass kMaxPendingEvents.
void TrainStep::finish_step(StepResult& r) {
  if (!events_.active()) return;
  if (settle_each_step_ || events_.recorded() >= kMaxPendingEvents) settle(r);
}

PhaseTimes TrainStep::settle_pending() {
  StepResult r;
  step_spans_ = spans_.size();  // none of them belongs to a step still to be reported
  settle(r);
  return r.settled;
}

// The forward/backward passes of one step, from zeroed gradients. `fetched` keeps the step's
// micro-batches so that a retry after an out-of-memory back-off uses the same data.
at::Tensor TrainStep::accumulate(int64_t iteration, std::vector<Batch>& fetched, StepResult& r) {
  Lap lap(*this);
  optimizer_->zero_grad();
  r.tokens = 0;
  at::Tensor loss_sum = torch::zeros({}, torch::TensorOptions().dtype(torch::kFloat).device(device_));
  const double parts = static_cast<double>(accum_ * chunks_);
  MicroBatchGradProbe probe(probe_grad_noise_ && accum_ > 1);  // gradient noise, log steps only
  std::vector<double> weights;
  if (data_.ragged_targets()) {  // the step's every micro-batch first, to count its targets
    lap("optimizer", r.phases.optimizer_s);
    while (static_cast<int64_t>(fetched.size()) < accum_)
      fetched.push_back(data_.train_batch(iteration * accum_ + static_cast<int64_t>(fetched.size())));
    weights = target_weights(fetched);
    lap("data", r.phases.data_s);  // the wait for the batches and the count's all-reduce
  }
  for (int64_t k = 0; k < accum_; ++k) {
    lap("optimizer", r.phases.optimizer_s);
    if (static_cast<int64_t>(fetched.size()) == k) fetched.push_back(data_.train_batch(iteration * accum_ + k));
    const Batch& b = fetched[static_cast<size_t>(k)];
    lap("data", r.phases.data_s);
    for (int64_t j = 0; j < chunks_; ++j) {
      const Batch part = step_part(b, j, chunks_);
      at::Tensor loss;
      {
        auto autocast = precision_.enter();
        loss = loss_(*model_, to_device(part, device_));
        if (weights.empty()) {
          loss = loss / parts;
        } else {
          const double w = weights[static_cast<size_t>(k * chunks_ + j)];
          // A part without targets weighs 0 (its mean, NaN for ATen's cross-entropy, counts nothing).
          loss = w > 0 ? loss * w : loss.nan_to_num(0.0) * 0.0;
        }
      }
      lap("forward", r.phases.forward_s);
      if (sync_) sync_->before_backward(k == accum_ - 1 && j == chunks_ - 1);
      scaler_.scale_loss(loss).backward();
      lap("backward", r.phases.backward_s);
      loss_sum += loss.detach();
    }
    if (probe.on()) {  // not training work: left out of the phase times
      // The micro-batch's own mean-loss gradient: its contribution over its weight (1 / accum, or
      // its share of the step's targets; a micro-batch without targets contributes nothing).
      double w = 1.0 / static_cast<double>(accum_);
      if (!weights.empty()) {
        w = 0;
        for (int64_t j = 0; j < chunks_; ++j) w += weights[static_cast<size_t>(k * chunks_ + j)];
      }
      probe.after_backward(optimizer_->grads(), w > 0 ? 1.0 / (w * scaler_.scale()) : 0.0, k + 1 == accum_);
      lap.restart();
    }
    r.tokens += b.x.size(0) * tokens_per_sample_;
  }
  lap("optimizer", r.phases.optimizer_s);
  r.micro_grad_sq_sum = probe.sum_sq();
  return loss_sum;
}

std::vector<double> TrainStep::target_weights(const std::vector<Batch>& fetched) const {
  std::vector<double> counts;
  double total = 0;
  for (const Batch& b : fetched) {
    const int64_t rows = b.x.size(0) / chunks_;
    for (int64_t j = 0; j < chunks_; ++j) {
      counts.push_back(static_cast<double>(count_targets(chunks_ > 1 ? b.y.narrow(0, j * rows, rows) : b.y)));
      total += counts.back();
    }
  }
  const double per_rank = sync_ ? sync_->mean(total) : total;
  for (double& c : counts) c = per_rank > 0 ? c / per_rank : 0.0;
  return counts;
}

// After an out-of-memory error: doubles the chunks when the micro-batch splits evenly again.
bool TrainStep::back_off(const std::exception& e, int64_t iteration) {
  const int64_t mb = micro_batch_;
  if (!compat::is_out_of_memory(e)) return false;
  if (mb % (2 * chunks_) != 0) {
    Console::get().line(
        fmt::format("out of memory at step {} with micro-batch {}, which does not halve "
                    "into equal chunks; lower data.micro_batch or raise memory.limit_mb",
                    iteration + 1, mb / chunks_));
    return false;
  }
  chunks_ *= 2;
  oom_backoffs_ += 1;
  if (graph_) drop_graph("out of memory: the graph's memory goes back for the smaller micro-batch");
  if (device_.is_cuda()) device::cuda_empty_cache();  // hand the failed attempt's blocks back
  Console::get().line(
      fmt::format("out of memory at step {}: micro-batch {} -> {}, accumulation {} -> {} "
                  "(the step is redone on the same data; global batch unchanged)",
                  iteration + 1, 2 * mb / chunks_, mb / chunks_, accum_ * chunks_ / 2, accum_ * chunks_));
  return true;
}

StepResult TrainStep::run(int64_t iteration, double lr) {
  step_spans_ = spans_.size();  // the spans before these belong to earlier, unsettled steps
  try {
    return run_step(iteration, lr);
  } catch (...) {
    spans_.resize(step_spans_);  // a step that failed reports no device time
    throw;
  }
}

bool TrainStep::settle_loss_scale(bool found_inf) {
  const bool skipped = scaler_.update(found_inf);
  const auto& s = scaler_.state();
  if (precision_config_.fallback_after > 0 && s.skipped_at_floor >= precision_config_.fallback_after &&
      precision_.fall_back_to_bf16(
          fmt::format("{} consecutive skipped steps at the minimum loss scale {}", s.skipped_at_floor, s.scale))) {
    scaler_ = LossScaler(false, precision_config_);
    Console::get().line("precision: " + precision_.reason() + "; continuing in bf16");
  }
  return skipped;
}

StepResult TrainStep::run_step(int64_t iteration, double lr) {
  StepResult r;
  r.device_timed = events_.active();
  std::vector<Batch> fetched;
  if (graphed_step(iteration, lr, fetched, r)) {
    ++graphed_steps_;
    finish_step(r);
    return r;
  }
  ++eager_steps_;
  at::Tensor loss_sum;
  for (;;) {
    try {
      loss_sum = accumulate(iteration, fetched, r);
      break;
    } catch (const std::exception& e) {
      if (!back_off(e, iteration)) throw;
      r.oom_backoffs += 1;
    }
  }
  Lap lap(*this);
  r.loss = loss_sum;
  if (sync_) sync_->finish(r.loss);  // gradients and loss: the mean over all ranks

  std::vector<at::Tensor> grads = optimizer_->grads();
  const at::Tensor found_inf_flag = scaler_.unscale_and_check(grads);
  r.grad_norm = global_grad_norm(grads);
  if (sync_) r.grad_norm = sync_->global_norm(r.grad_norm);
  if (scaler_.enabled()) {
    // The step's one host synchronisation under loss scaling: skipping or taking the step.
    bool found_inf = found_inf_flag.defined() && found_inf_flag.item<float>() != 0.0f;
    if (sync_) found_inf = sync_->any(found_inf);
    r.skipped = settle_loss_scale(found_inf);
    if (r.skipped) {  // no step: weights, optimizer state and the LR schedule stay put
      lap("optimizer", r.phases.optimizer_s);
      finish_step(r);
      return r;
    }
  }
  optimizer_->set_lr(lr);
  optimizer_->step(clip_coefficient(r.grad_norm, train_.grad_clip));
  lap("optimizer", r.phases.optimizer_s);
  finish_step(r);
  return r;
}

}  // namespace frugal
