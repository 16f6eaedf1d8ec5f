// The output head and the cross-entropy in one autograd op, over chunks of rows (the fused linear
// cross-entropy of Liger-Kernel): for each chunk the logits x_c W^T are formed in fp32 (on frugal's
// classifier kernel, with model.kernels = "frugal" on a GPU, read in the products' dtype), their
// log-sum-exp and target logits give the chunk's losses, and, when a gradient is wanted, the
// logits' gradient (softmax - one-hot) / count is turned at once into the chunk's dx and its share
// of dW. So no (tokens x vocab) tensor is ever held: with Llama 3's 128,256-entry vocabulary the
// logits of 32K tokens alone would be 16.8 GB in fp32, and their gradient as much again. The
// backward only scales the gradients the forward kept by the incoming one.
//
// Under autocast the products run in autocast's dtype (the weight cast once, as autocast's linear
// would), the softmax and the sums in fp32, and dW accumulates over chunks in fp32.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace frugal {

// Mean of -log softmax(x W^T)[target] over the rows whose target is not `ignore_index`; 0 where
// every target is ignored (ATen's mean is NaN there). x: (N, C) or (..., C); weight: (V, C);
// targets: N int64 ids. chunk_rows: rows per chunk; 0 = auto (chunk_rows_for, with
// kMinChunkLogitsKernel on the classifier kernel, kMinChunkLogitsGpu elsewhere on a GPU, else
// kMinChunkLogits). pad_multiple: the products run at V rounded
// up to a multiple of it (zero rows; model.head_multiple: aligned widths take a GPU's fast matmul
// kernels), the result unchanged. gpu_kernels (model.kernels = "frugal"): each chunk's softmax,
// loss and gradient on frugal's classifier kernel, over the chunk's logits in the compute dtype
// (no fp32 copy), where it runs on them.
at::Tensor linear_cross_entropy(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& targets,
                                int64_t chunk_rows = 0, int64_t ignore_index = -100, int64_t pad_multiple = 1,
                                bool gpu_kernels = false);

// The fewest logits a chunk holds: narrower products run far below the matmul's rate. On a GPU far
// more, since there every chunk also reads and writes dW (V x C, fp32) once more and launches its
// own dozen kernels: about half a GiB of a chunk's temporaries at once, which is 2^26 logits on
// ATen's operators (fp32 logits beside two bf16 copies) and 2^28 on the classifier kernel (the
// products' bf16 logits alone).
constexpr int64_t kMinChunkLogits = int64_t{1} << 20;
constexpr int64_t kMinChunkLogitsGpu = int64_t{1} << 26;
constexpr int64_t kMinChunkLogitsKernel = int64_t{1} << 28;

// Rows per chunk for N rows of width C against V classes: Liger's rule, N / ceil(V / C) rounded
// up, so a chunk's logits are about the size of x itself, but at least `min_logits` logits; at
// least 1, at most N.
int64_t chunk_rows_for(int64_t rows, int64_t width, int64_t vocab, int64_t min_logits = kMinChunkLogits);

}  // namespace frugal
