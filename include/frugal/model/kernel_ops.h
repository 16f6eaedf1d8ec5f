// frugal's CUDA kernels as autograd operations (model.kernels = "frugal"; docs/gpu.md): the fused
// classifier (softmax + cross-entropy + the logits' gradient, no float copy of the logits) and
// LayerNorm with the residual add folded in. The kernels themselves are src/kernels/*.cu.
//
// Each operation is one torch::autograd::Function with two bodies: frugal's kernels for CUDA
// tensors in float or bfloat16 (in a build that has them, on a GPU of compute capability 8.0 or
// newer), and the same mathematics on ATen operations for every other tensor. The second body is
// the reference the CUDA tests compare against, and the one the CPU tests check by gradcheck.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <string>
#include <utility>

#include "frugal/core/config.h"

namespace frugal {

// Whether this build compiled frugal's CUDA kernels (CMake FRUGAL_KERNELS).
bool cuda_kernels_built();
// The CUDA architectures they were compiled for (CMake FRUGAL_CUDA_ARCHITECTURES, e.g.
// "80-real;90-real;90-virtual"); "" in a build without them.
std::string cuda_kernel_architectures();

// "" when frugal's kernels run on tensors of `device`, else why not (a sentence naming what is
// missing: a CUDA device, compute capability 8.0, a build with the kernels).
std::string cuda_kernels_unavailable(const c10::Device& device);
// Whether they run on `t`'s device: a CUDA tensor on a GPU of compute capability 8.0+ that the
// build's architectures cover (asked of the driver once per GPU). Cheap enough for every call.
bool cuda_kernels_run_on(const at::Tensor& t);

// Refuses (ConfigError, exit 2) model.kernels = "frugal" where the kernels cannot run: on a device
// or build without them, in fp16 (resolved precision `precision`), or for a model that is not the
// decoders of frugal's own families (model.source). Other settings pass.
void check_model_kernels(const ModelConfig& model, const c10::Device& device, PrecisionMode precision);

// Mean cross-entropy of logits (N, W) against targets (N, int64) over the rows whose target is
// not `ignore_index`; the first `vocab` columns are the classes, the rest (W - vocab: an output
// head's padding) take no part and get a zero gradient. 0, not NaN, when every target is ignored.
// Computed in fp32 (or in double for double logits). A target outside [0, vocab) gives a NaN loss.
// `logits_are_scratch`: the backward writes the gradient over the logits and returns that memory
// (no second logits-sized buffer); only for logits nothing else reads after the loss, as the GPT's
// own. Otherwise the gradient is a new tensor.
at::Tensor fused_cross_entropy(const at::Tensor& logits, const at::Tensor& targets, int64_t vocab, int64_t ignore_index,
                               bool logits_are_scratch = false);

// The fused classifier over one block of logits (N, W) for a caller that forms its own gradients
// (the chunked output head, model/linear_cross_entropy.h): adds to `loss_sum` (0-dim fp32) the
// losses of the rows whose target is not `ignore_index`, and, where `gradient`, writes over the
// logits their gradient (softmax - one-hot) / max(count, 1) (0 on ignored rows and on the columns
// from `vocab` on); `count` is a 0-dim fp32 device tensor, the targets counted across every block.
// Runs where the classifier kernel runs on these logits (contiguous, fp32 or bf16, a capable GPU);
// elsewhere it does nothing and returns false.
bool classifier_block(const at::Tensor& logits, const at::Tensor& targets, int64_t vocab, int64_t ignore_index,
                      const at::Tensor& count, bool gradient, at::Tensor& loss_sum);

// LayerNorm over the last dimension (weight and bias of that size, in x's dtype), the result in
// `out_dtype` (float or bfloat16 for the kernels; e.g. bfloat16 where it feeds an autocast matmul).
at::Tensor fused_layer_norm(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, double eps,
                            at::ScalarType out_dtype);

// h = residual + y and LayerNorm(h) in one pass: {h (residual's dtype), LayerNorm(h) (out_dtype)}.
// y may have a lower precision than the residual (a bf16 matmul's output on an fp32 stream).
std::pair<at::Tensor, at::Tensor> fused_residual_layer_norm(const at::Tensor& residual, const at::Tensor& y,
                                                            const at::Tensor& weight, const at::Tensor& bias,
                                                            double eps, at::ScalarType out_dtype);

}  // namespace frugal
