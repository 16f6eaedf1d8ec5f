// train.cuda_graphs: the training step captured once as a CUDA graph and replayed; see
// train_step.h.
#include <torch/torch.h>

#include <fmt/format.h>

#include "frugal/core/compat.h"
#include "frugal/core/console.h"
#include "frugal/core/cuda_graph.h"
#include "frugal/core/errors.h"
#include "frugal/train/grad_clip.h"
#include "frugal/train/train_step.h"
#include "train/internal/step_lap.h"
#include "train/internal/step_parts.h"

namespace frugal {

void check_cuda_graphs(const Config& c, const c10::Device& device, int64_t world) {
  if (!c.train.cuda_graphs) return;
  auto refuse = [](const std::string& why) {
    throw ConfigError(fmt::format("train.cuda_graphs = true cannot apply: {}; set train.cuda_graphs = false", why));
  };
  if (!device.is_cuda() && !device::CudaGraph::emulated_for_tests())
    refuse("CUDA graphs capture GPU work, and run.device is " + device.str());
  if (world > 1) refuse(fmt::format("the step of a data-parallel run ({} processes) is not captured", world));
  if (c.memory.activation_checkpointing.enabled())
    refuse(
        "activation checkpointing recomputes blocks during the backward, which the graph does not capture; set "
        "memory.activation_checkpointing = \"none\"");
  if (c.lora.rank > 0 && c.lora.base_dtype == LoraConfig::BaseDtype::kNf4)
    refuse("QLoRA's nf4 base copies its level table to the GPU in every forward; set lora.base_dtype = \"bf16\"");
  if (c.train.optimizer != OptimizerKind::kFusedAdamW)
    refuse("only the default optimizer (train.optimizer = \"fused_adamw\") steps from device memory alone");
  if (c.dist.offload == Offload::kOptimizer)
    refuse("dist.offload = \"optimizer\" runs each update on the host; set dist.offload = \"none\"");
#if !FRUGAL_TORCH_AT_LEAST(2, 4)
  refuse("LibTorch before 2.4 has no fused AdamW that reads its rate from device memory");
#endif
}

// The step's device work on the graph's buffers, as accumulate() and run_step() do it with one
// difference: the optimizer reads its rate and step count from device memory.
void TrainStep::graph_body(Graph& g) {
  optimizer_->zero_grad();
  g.loss_sum.zero_();
  const double parts = static_cast<double>(g.inputs.size());
  for (const Batch& b : g.inputs) {
    at::Tensor loss;
    {
      auto autocast = precision_.enter();
      loss = loss_(*model_, b) / parts;
    }
    (g.scale.defined() ? loss * g.scale : loss).backward();
    g.loss_sum.add_(loss.detach());
  }
  const std::vector<at::Tensor> grads = optimizer_->grads();
  // Loss scaling: the flag stays on the device, where the update reads it (1: skipped).
  if (g.found_inf.defined()) scaler_.unscale_and_check(grads, g.found_inf, g.inv_scale);
  g.grad_norm.copy_(global_grad_norm(grads));
  optimizer_->step_on_device(clip_coefficient(g.grad_norm, train_.grad_clip), g.found_inf);
}

namespace {
// The step's parts: each fetched micro-batch in `chunks` equal row blocks.
std::vector<Batch> split_parts(const std::vector<Batch>& fetched, int64_t chunks) {
  std::vector<Batch> parts;
  for (const Batch& b : fetched)
    for (int64_t j = 0; j < chunks; ++j) parts.push_back(step_part(b, j, chunks));
  return parts;
}

std::string first_line(const char* text) {
  const std::string s(text);
  return s.substr(0, s.find('\n'));
}

bool same_shapes(const Batch& a, const Batch& b) {
  auto same = [](const at::Tensor& s, const at::Tensor& t) {
    return s.defined() == t.defined() && (!s.defined() || (s.sizes() == t.sizes() && s.dtype() == t.dtype()));
  };
  return same(a.x, b.x) && same(a.y, b.y) && same(a.pos, b.pos);
}

at::Tensor static_like(const at::Tensor& t, c10::Device device) {
  return t.defined() ? at::empty(t.sizes(), t.options().device(device)) : at::Tensor();
}

void copy_into(at::Tensor& dst, const at::Tensor& src) {
  if (dst.defined()) dst.copy_(src, /*non_blocking=*/true);
}
}  // namespace

void TrainStep::drop_graph(const std::string& why) {
  graph_.reset();
  graphs_on_ = false;
  Console::get().line("train.cuda_graphs: " + why + "; the run continues without CUDA graphs");
}

bool TrainStep::graphed_step(int64_t iteration, double lr, std::vector<Batch>& fetched, StepResult& r) {
  if (!graphs_on_) return false;
  if (eager_steps_ < kEagerStepsBeforeCapture) return false;  // warm-up: lazy initialisation runs eagerly
  // A log step's gradient-noise probe reads each micro-batch's gradient: eager.
  if (probe_grad_noise_ && accum_ > 1) return false;
  Lap lap(*this);
  while (static_cast<int64_t>(fetched.size()) < accum_)
    fetched.push_back(data_.train_batch(iteration * accum_ + static_cast<int64_t>(fetched.size())));
  lap("data", r.phases.data_s);
  const std::vector<Batch> parts = split_parts(fetched, chunks_);
  // A partial batch runs eagerly; the graph is captured from (and serves) full ones only.
  for (const Batch& p : parts)
    if (p.x.size(0) * chunks_ != micro_batch_) return false;
  if (graph_ && !std::equal(parts.begin(), parts.end(), graph_->inputs.begin(), graph_->inputs.end(), same_shapes))
    return false;
  // A graph captured under fp16 loss scaling after a fall-back to bf16 (on this step's path or an
  // eager step's): its casts are fp16's and its skips the scaler's, which is off now.
  if (graph_ && graph_->found_inf.defined() != scaler_.enabled()) {
    drop_graph("the captured step is fp16's, and precision fell back to bf16");
    return false;
  }
  const bool capture = !graph_;
  if (capture) {
    graph_ = std::make_unique<Graph>();
    for (const Batch& p : parts)
      graph_->inputs.push_back({static_like(p.x, device_), static_like(p.y, device_), static_like(p.pos, device_)});
    const auto f32 = torch::TensorOptions().dtype(torch::kFloat).device(device_);
    graph_->loss_sum = torch::zeros({}, f32);
    graph_->grad_norm = torch::zeros({}, f32);
    if (scaler_.enabled()) {
      graph_->scale = torch::zeros({}, f32);
      graph_->inv_scale = torch::zeros({}, f32);
      graph_->found_inf = torch::zeros({}, f32);
    }
  }
  for (size_t i = 0; i < parts.size(); ++i) {
    copy_into(graph_->inputs[i].x, parts[i].x);
    copy_into(graph_->inputs[i].y, parts[i].y);
    copy_into(graph_->inputs[i].pos, parts[i].pos);
  }
  optimizer_->set_lr(lr);  // writes to device memory, outside the graph
  if (graph_->scale.defined()) scaler_.write_scale(graph_->scale, graph_->inv_scale);
  if (capture) {
    // The step runs once on the capture stream (this step's work), then is captured.
    try {
      Graph& g = *graph_;
      g.graph.run_and_capture([this, &g] { graph_body(g); }, device_);
    } catch (const device::CaptureFailed& e) {
      graph_.reset();
      throw ConfigError(fmt::format(
          "train.cuda_graphs: step {} could not be captured as a CUDA graph ({}); the run stops here, its last "
          "checkpoint intact: set train.cuda_graphs = false and resume",
          iteration + 1, e.what()));
    } catch (const std::exception& e) {
      // The eager run before the capture failed (out of memory, say): the eager step, with its
      // back-off, takes this data from zeroed gradients.
      drop_graph(fmt::format("step {} failed before its capture ({})", iteration + 1, first_line(e.what())));
      return false;
    }
    Console::get().line(fmt::format("train.cuda_graphs: step {} captured; each step now replays it", iteration + 1));
  } else {
    graph_->graph.replay();
  }
  r.loss = graph_->loss_sum.clone();
  r.grad_norm = graph_->grad_norm.clone();
  r.tokens = 0;
  for (const Batch& b : fetched) r.tokens += b.x.size(0) * tokens_per_sample_;
  r.graphed = true;
  if (graph_->found_inf.defined()) {
    // Loss scaling: the replay's one wait, for its verdict (the host's count, the next scale).
    r.skipped = settle_loss_scale(graph_->found_inf.item<float>() != 0.0f);
  }
  if (!r.skipped) optimizer_->count_replayed_step();
  // One replay has no phase boundaries: its device time is counted as forward.
  lap("forward", r.phases.forward_s);
  return true;
}

}  // namespace frugal
