// What the decoder families share; see causal_lm.h.
#include "frugal/model/causal_lm.h"

#include <torch/torch.h>

#include <cctype>
#include <cmath>
#include <limits>
#include <string>

#include "frugal/core/compat.h"
#include "frugal/model/activation_checkpointing.h"
#include "frugal/model/lora.h"

namespace frugal {

at::Tensor document_attention_mask(const at::Tensor& positions, int64_t window) {
  const int64_t T = positions.size(1);
  const auto opts = positions.options().dtype(at::kLong);
  const at::Tensor i = at::arange(T, opts).view({1, T, 1}), j = at::arange(T, opts).view({1, 1, T});
  at::Tensor allowed = (j <= i).logical_and(j >= i - positions.unsqueeze(2));
  if (window > 0) allowed = allowed.logical_and(j > i - window);
  return allowed.unsqueeze(1);
}

at::Tensor masked_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& mask,
                            double dropout) {
#if FRUGAL_TORCH_AT_LEAST(2, 0)
  return at::scaled_dot_product_attention(q, k, v, mask, dropout, /*is_causal=*/false);
#else
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  at::Tensor att = at::matmul(q, k.transpose(-2, -1))
                       .mul(scale)
                       .masked_fill(mask.logical_not(), -std::numeric_limits<double>::infinity());
  att = at::softmax(att, -1);
  if (dropout > 0) att = at::dropout(att, dropout, /*train=*/true);
  return at::matmul(att, v);
#endif
}

namespace {

struct GatherHolder : torch::CustomClassHolder {
  std::shared_ptr<BlockGathering> gathering;
  size_t block = 0;
  // The forward's autocast state, which the backward's gather restores (as activation
  // checkpointing's recompute does): what a gather makes whole depends on it
  // (dist/zero_adamw.h: a bf16 working copy under bf16 autocast).
  c10::DeviceType device = c10::DeviceType::CPU;
  bool autocast = false;
  c10::ScalarType autocast_dtype = c10::kBFloat16;
};

// Identity functions around a block whose parameters are gathered per use (dist.zero = 3). On
// the block's output: its backward, which runs before the block's, gathers the block again. On
// its input: its backward, which runs once every node of the block has (each lies on a path from
// the input), lets the parameters go.
template <bool kGatherInBackward>
class AroundBlock : public torch::autograd::Function<AroundBlock<kGatherInBackward>> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, c10::intrusive_ptr<GatherHolder> h,
                            const at::Tensor& x) {
    ctx->saved_data["h"] = c10::IValue::make_capsule(std::move(h));
    return x;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_out) {
    auto h = c10::static_intrusive_pointer_cast<GatherHolder>(ctx->saved_data["h"].toCapsule());
    if (kGatherInBackward) {
      compat::AutocastGuard as_in_forward(h->device, h->autocast_dtype, h->autocast);
      h->gathering->need(h->block);
      if (h->block > 0 && h->gathering->prefetch) h->gathering->prefetch(h->block - 1);  // the backward's next
    } else {
      h->gathering->done(h->block);
    }
    return {at::Tensor(), grad_out[0]};
  }
};

}  // namespace

at::Tensor CausalLmImpl::run_block(size_t i, const std::function<at::Tensor(const at::Tensor&)>& fn,
                                   const at::Tensor& x, const torch::nn::Module& block) const {
  auto run = [&](const at::Tensor& in) {
    if (i >= recompute_.size() || !recompute_[i]) return fn(in);
    return checkpointed(fn, in, block.parameters());
  };
  if (!gathering_) return run(x);
  auto h = c10::make_intrusive<GatherHolder>();
  h->gathering = gathering_;
  h->block = i;
  h->device = x.device().type();
  h->autocast = compat::autocast_enabled(h->device);
  h->autocast_dtype = compat::autocast_dtype(h->device);
  // An input without gradient (a frozen embedding) has no backward to release the block in: the
  // gradient synchronisation's end of step releases every block (DataParallel::finish).
  const bool grad = torch::GradMode::is_enabled();
  gathering_->need(i);
  if (i + 1 < static_cast<size_t>(config_.layers) && gathering_->prefetch) gathering_->prefetch(i + 1);
  at::Tensor y = run(grad && x.requires_grad() ? AroundBlock<false>::apply(h, x) : x);
  const bool backward = grad && y.requires_grad();
  // The backward gathers again (the output's function below), unless the block stays whole until
  // then; without a backward to come, it is released now either way.
  if (gathering_->reshard_after_forward || !backward) gathering_->done(i);
  return backward ? AroundBlock<true>::apply(h, y) : y;
}

int64_t CausalLmImpl::head_multiple_for(const at::Tensor& x) const {
  return config_.head_multiple > 0 ? config_.head_multiple : (x.is_cuda() ? 64 : 1);
}

BlockParameters CausalLmImpl::block_parameters() {
  BlockParameters out;
  out.blocks.resize(static_cast<size_t>(config_.layers));
  const auto named = named_parameters();
  for (const auto& p : named) {
    const std::string& name = p.key();
    if (name.size() < 2 || name[0] != 'h' || !std::isdigit(static_cast<unsigned char>(name[1]))) continue;
    const size_t dot = name.find('.');
    const size_t block = std::stoul(name.substr(1, dot - 1));
    if (block < out.blocks.size()) out.blocks[block].push_back(p.value());
  }
  for (const AdaptableProduct& a : adaptable_products())
    if (const at::Tensor* w = named.find(a.weight)) out.product_weights.push_back(*w);
  return out;
}

std::vector<int64_t> CausalLmImpl::generate(const std::vector<int64_t>& prompt, int64_t max_new, double temperature,
                                            uint64_t seed, const std::function<bool(int64_t)>& stop) {
  TORCH_CHECK(!prompt.empty(), "generate: the prompt must hold at least one token");
  torch::NoGradGuard no_grad;
  const bool was_training = is_training();
  eval();
  // Decoding runs each block once per token: with gathered blocks (dist.zero = 3), all of them
  // for the whole call.
  struct Whole {
    std::shared_ptr<BlockGathering> g;
    size_t blocks;
    explicit Whole(std::shared_ptr<BlockGathering> gathering, size_t n) : g(std::move(gathering)), blocks(n) {
      for (size_t i = 0; g && i < blocks; ++i) g->need(i);
    }
    ~Whole() {
      for (size_t i = 0; g && i < blocks; ++i) g->done(i);
    }
  } whole(gathering_, static_cast<size_t>(config_.layers));
  const auto params = parameters();
  const c10::Device device = params.empty() ? c10::Device(c10::kCPU) : params.front().device();
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  const size_t blocks = static_cast<size_t>(config_.layers);
  std::vector<int64_t> tokens = prompt;
  std::vector<int64_t> out;
  std::vector<LayerKv> cache(blocks);
  int64_t cached = 0;  // positions held in the cache
  int64_t start = 0;   // token index of cache position 0
  auto feed = [&](int64_t from) {
    auto opts = torch::TensorOptions().dtype(torch::kLong);
    auto idx = torch::tensor(std::vector<int64_t>(tokens.begin() + from, tokens.end()), opts).view({1, -1}).to(device);
    auto logits = decode(idx, from - start, cache);
    cached += static_cast<int64_t>(tokens.size()) - from;
    return logits.to(torch::kCPU, torch::kFloat);
  };
  auto restart = [&]() {
    // The context is full: keep the most recent half-block and encode it again from position 0.
    start = std::max<int64_t>(0, static_cast<int64_t>(tokens.size()) - config_.block / 2);
    cache.assign(blocks, LayerKv{});
    cached = 0;
    return feed(start);
  };
  const int64_t prompt_size = static_cast<int64_t>(tokens.size());
  at::Tensor logits = prompt_tokens_used(prompt_size) < prompt_size ? restart() : feed(0);
  for (int64_t i = 0; i < max_new; ++i) {
    int64_t next;
    if (temperature <= 0) {
      next = logits.argmax().item<int64_t>();
    } else {
      auto probs = torch::softmax(logits / temperature, -1);
      next = at::multinomial(probs, 1, false, gen).item<int64_t>();
    }
    tokens.push_back(next);
    out.push_back(next);
    if (stop && stop(next)) break;
    logits = cached >= config_.block ? restart() : feed(static_cast<int64_t>(tokens.size()) - 1);
  }
  if (was_training) train();
  return out;
}

int64_t CausalLmImpl::prompt_tokens_used(int64_t prompt_tokens) const {
  // restart() keeps tokens from max(0, size - block/2): the newest block/2 of them.
  return prompt_tokens > config_.block ? std::min(prompt_tokens, config_.block / 2) : prompt_tokens;
}

std::vector<std::pair<std::string, at::Tensor>> CausalLmImpl::named_parameter_list() const {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& p : named_parameters()) out.emplace_back(p.key(), p.value());
  return out;
}

int64_t CausalLmImpl::parameter_count() const {
  int64_t n = 0;
  for (const auto& p : named_parameters()) n += weight_elements(p.key(), p.value());  // an NF4 base counts its weights
  return n;
}

}  // namespace frugal
