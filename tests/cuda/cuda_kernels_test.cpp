// frugal's CUDA kernels (src/kernels/*.cu) against ATen on the GPU (label cuda; skipped, with the
// reason, without a GPU of compute capability 8.0 or a build with the kernels). Each kernel runs on
// fresh random inputs into outputs first filled with NaN, so an element it fails to write shows;
// references are computed in double from the very inputs the kernel read. Tolerances, as
// ||out - ref|| / ||ref||: fp32 results 1e-5 (sums over 16,384 rows 1e-4), bf16 results 8e-3
// (about two bf16 ulps). Edge cases: the padded and the unpadded vocabulary, all targets ignored,
// logits of +-1e4, widths that are no multiple of the vector width, a single row.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>

#include "frugal/core/device.h"
#include "frugal/data/packing.h"
#include "frugal/model/kernel_ops.h"
#include "frugal/train/trainer.h"
#include "frugal_build_config.h"
#include "kernels/kernels.h"
#include "cuda_util.h"
#include "test_util.h"

#if FRUGAL_HAVE_KERNELS
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#endif

namespace frugal::cuda_kernels_test {
namespace {

#define FRUGAL_REQUIRE_KERNELS()                                                             \
  do {                                                                                       \
    if (!cuda_kernels_built()) GTEST_SKIP() << "frugal was built without its CUDA kernels";  \
    if (!device::cuda_available()) GTEST_SKIP() << "no CUDA device visible to this process"; \
    const std::string why = cuda_kernels_unavailable(torch::Device(torch::kCUDA, 0));        \
    if (!why.empty()) GTEST_SKIP() << why;                                                   \
  } while (0)

#if FRUGAL_HAVE_KERNELS
namespace kn = frugal::kernels;

double rel_err(const at::Tensor& got, const at::Tensor& want) {
  const auto g = got.to(torch::kCPU, torch::kDouble), w = want.to(torch::kCPU, torch::kDouble);
  const double denom = w.norm().item<double>();
  return (g - w).norm().item<double>() / (denom > 0 ? denom : 1.0);
}

bool any_nan(const at::Tensor& t) { return t.isnan().any().item<bool>(); }

kn::Dtype kdt(at::ScalarType t) { return t == torch::kBFloat16 ? kn::Dtype::kBf16 : kn::Dtype::kF32; }
void* stream() { return at::cuda::getCurrentCUDAStream().stream(); }
int sms() { return at::cuda::getCurrentDeviceProperties()->multiProcessorCount; }

struct ClassifierShape {
  at::ScalarType dtype;
  int64_t rows, vocab, ld;
};

// The classifier kernels against log-softmax in double, on the logits as the kernel saw them.
void check_classifier(const ClassifierShape& s, bool all_ignored, bool extreme) {
  SCOPED_TRACE(::testing::Message() << "dtype " << s.dtype << " rows " << s.rows << " vocab " << s.vocab << " ld "
                                    << s.ld << (all_ignored ? " all ignored" : "") << (extreme ? " extreme" : ""));
  const auto cuda = torch::TensorOptions().device(torch::kCUDA);
  auto logits = (torch::randn({s.rows, s.ld}, cuda) * 4).to(s.dtype);
  if (extreme) {
    logits.narrow(0, 0, 1).fill_(-1e4);
    logits[0][s.vocab - 1] = 1e4;
    if (s.rows > 1) logits.narrow(0, 1, 1).fill_(1e4);
  }
  auto targets = torch::randint(0, s.vocab, {s.rows}, cuda.dtype(torch::kLong));
  if (all_ignored) {
    targets.fill_(kIgnoreIndex);
  } else {
    targets.index_put_({torch::arange(0, s.rows, 7, cuda.dtype(torch::kLong))}, kIgnoreIndex);
  }
  const auto f32 = cuda.dtype(torch::kFloat);
  auto lse = torch::full({s.rows}, NAN, f32), loss = torch::full({s.rows}, NAN, f32);
  ASSERT_EQ(kn::classifier_forward(logits.data_ptr(), kdt(s.dtype), s.rows, s.vocab, s.ld, targets.data_ptr<int64_t>(),
                                   kIgnoreIndex, lse.data_ptr<float>(), loss.data_ptr<float>(), stream()),
            0);
  // The reference, in double.
  const auto z = logits.narrow(1, 0, s.vocab).to(torch::kDouble);
  const auto ref_lse = torch::logsumexp(z, {1});
  const auto valid = targets.ne(kIgnoreIndex);
  const auto picked = z.gather(1, targets.clamp_min(0).unsqueeze(1)).squeeze(1);
  const auto ref_loss = torch::where(valid, ref_lse - picked, torch::zeros_like(ref_lse));
  ASSERT_FALSE(any_nan(lse)) << "lse left unwritten";
  ASSERT_FALSE(any_nan(loss)) << "loss left unwritten";
  EXPECT_LT(rel_err(lse, ref_lse), 1e-5);
  EXPECT_LT((loss.to(torch::kDouble) - ref_loss).abs().max().item<double>(),
            1e-5 * (1 + ref_lse.abs().max().item<double>()));

  // The backward, out of place into a NaN-filled buffer, then in place over a copy of the logits.
  const auto count = valid.sum().to(torch::kFloat);
  const auto grad = torch::full({}, 0.37, f32);
  auto d = torch::full({s.rows, s.ld}, NAN, cuda.dtype(s.dtype));
  ASSERT_EQ(kn::classifier_backward(d.data_ptr(), logits.data_ptr(), kdt(s.dtype), s.rows, s.vocab, s.ld,
                                    targets.data_ptr<int64_t>(), kIgnoreIndex, lse.data_ptr<float>(),
                                    grad.data_ptr<float>(), count.data_ptr<float>(), stream()),
            0);
  auto ref_d = torch::exp(z - ref_lse.unsqueeze(1));
  ref_d.scatter_add_(1, targets.clamp_min(0).unsqueeze(1), -valid.to(torch::kDouble).unsqueeze(1));
  ref_d = ref_d * valid.to(torch::kDouble).unsqueeze(1) * (0.37 / std::max(1.0, count.item<double>()));
  ASSERT_FALSE(any_nan(d)) << "dlogits left unwritten";
  EXPECT_LT(rel_err(d.narrow(1, 0, s.vocab), ref_d), s.dtype == torch::kBFloat16 ? 8e-3 : 1e-5);
  if (s.ld > s.vocab) {
    EXPECT_EQ(d.narrow(1, s.vocab, s.ld - s.vocab).abs().max().item<float>(), 0.0f);
  }
  EXPECT_EQ(d.index({valid.logical_not()}).abs().sum().item<double>(), 0.0) << "an ignored row has a gradient";
  auto in_place = logits.clone();
  ASSERT_EQ(kn::classifier_backward(in_place.data_ptr(), in_place.data_ptr(), kdt(s.dtype), s.rows, s.vocab, s.ld,
                                    targets.data_ptr<int64_t>(), kIgnoreIndex, lse.data_ptr<float>(),
                                    grad.data_ptr<float>(), count.data_ptr<float>(), stream()),
            0);
  EXPECT_TRUE(torch::equal(in_place, d)) << "the in-place gradient differs from the out-of-place one";
}

TEST(Cuda, FusedClassifierMatchesLogSoftmaxInDoubleAndWritesEveryElement) {
  FRUGAL_REQUIRE_KERNELS();
  torch::manual_seed(1);
  for (const ClassifierShape& s :
       {ClassifierShape{torch::kBFloat16, 263, 50257, 50304},  // GPT-2, padded: 16-byte loads
        ClassifierShape{torch::kBFloat16, 97, 50257, 50257},   // unpadded: element loads
        ClassifierShape{torch::kFloat, 97, 50257, 50304}, ClassifierShape{torch::kBFloat16, 1, 256, 256},
        ClassifierShape{torch::kFloat, 33, 300, 301}}) {
    check_classifier(s, false, false);
    check_classifier(s, false, true);
    check_classifier(s, true, false);
  }
}

// The fused_cross_entropy Function on the GPU (kernels) against its ATen body on the CPU.
TEST(Cuda, FusedCrossEntropyOnTheGpuMatchesItsCpuReference) {
  FRUGAL_REQUIRE_KERNELS();
  torch::manual_seed(2);
  auto logits = torch::randn({130, 1024}) * 3;
  auto targets = torch::randint(0, 1000, {130}, torch::kLong);
  targets.narrow(0, 0, 10).fill_(kIgnoreIndex);
  auto cpu = logits.clone().requires_grad_();
  auto gpu = logits.to(torch::kCUDA).requires_grad_();
  auto lc = fused_cross_entropy(cpu, targets, 1000, kIgnoreIndex);
  auto lg = fused_cross_entropy(gpu, targets.to(torch::kCUDA), 1000, kIgnoreIndex);
  EXPECT_NEAR(lg.item<double>(), lc.item<double>(), 1e-5);
  (lc * 2).backward();
  (lg * 2).backward();
  EXPECT_LT(rel_err(gpu.grad(), cpu.grad()), 1e-5);
}

// The backward writes the gradient over scratch logits through a raw pointer: autograd must learn
// of it, so a second reader of those logits fails loudly instead of reading gradients.
TEST(Cuda, GradientWrittenOverScratchLogitsIsAnInPlaceWriteAutogradSees) {
  FRUGAL_REQUIRE_KERNELS();
  torch::manual_seed(4);
  const auto cuda = torch::TensorOptions().device(torch::kCUDA);
  auto w = torch::randn({64, 128}, cuda.dtype(torch::kBFloat16)).requires_grad_();
  auto targets = torch::randint(0, 128, {64}, cuda.dtype(torch::kLong));
  auto logits = w * 2;  // not a leaf: the loss may take it as scratch
  const auto before = logits._version();
  auto other = logits.pow(2).sum();  // saves the logits, and runs its backward after the loss's
  auto loss = fused_cross_entropy(logits, targets, 128, kIgnoreIndex, /*logits_are_scratch=*/true);
  try {
    (loss + other * 0).backward();
    ADD_FAILURE() << "a reader of the overwritten logits ran its backward without an error";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("inplace"), std::string::npos) << e.what();
  }
  EXPECT_GT(logits._version(), before) << "the kernel's write over the logits did not count as a change";
}

// Every launch runs on the tensors' own GPU, whichever is current (a data-parallel rank's GPU
// need not be the thread's current device). Needs two GPUs.
TEST(Cuda, KernelsRunOnTheTensorsGpuNotTheCurrentOne) {
  FRUGAL_REQUIRE_KERNELS();
  if (torch::cuda::device_count() < 2) GTEST_SKIP() << "needs two CUDA devices, this machine has one";
  const std::string why = cuda_kernels_unavailable(torch::Device(torch::kCUDA, 1));
  if (!why.empty()) GTEST_SKIP() << why;
  torch::manual_seed(5);
  const auto on1 = torch::TensorOptions().device(torch::Device(torch::kCUDA, 1));
  const c10::cuda::CUDAGuard current(0);
  auto x = torch::randn({300, 768}, on1), w = torch::randn({768}, on1), b = torch::randn({768}, on1);
  auto xg = x.clone().requires_grad_();
  auto out = fused_layer_norm(xg, w, b, 1e-5, torch::kFloat);
  EXPECT_LT(
      rel_err(out, torch::layer_norm(x.to(torch::kDouble), {768}, w.to(torch::kDouble), b.to(torch::kDouble), 1e-5)),
      1e-5);
  out.sum().backward();
  ASSERT_TRUE(xg.grad().defined());
  EXPECT_EQ(xg.grad().device(), x.device());
  auto logits = torch::randn({64, 1024}, on1).requires_grad_();
  auto targets = torch::randint(0, 1000, {64}, on1.dtype(torch::kLong));
  auto lg = fused_cross_entropy(logits, targets, 1000, kIgnoreIndex);
  auto lc = fused_cross_entropy(logits.detach().cpu(), targets.cpu(), 1000, kIgnoreIndex);
  EXPECT_NEAR(lg.item<double>(), lc.item<double>(), 1e-5);
  lg.backward();
  EXPECT_FALSE(any_nan(logits.grad()));
  EXPECT_EQ(c10::cuda::current_device(), 0) << "the current device was left changed";
}

struct NormShape {
  at::ScalarType xt, ot;
  int64_t rows, C;
};

void check_layer_norm(const NormShape& s, bool residual) {
  SCOPED_TRACE(::testing::Message() << "x " << s.xt << " out " << s.ot << " rows " << s.rows << " C " << s.C
                                    << (residual ? " residual" : ""));
  const auto cuda = torch::TensorOptions().device(torch::kCUDA);
  const auto f32 = cuda.dtype(torch::kFloat);
  auto x = (torch::randn({s.rows, s.C}, cuda) * 2 + 0.3).to(s.xt);
  auto y = torch::randn({s.rows, s.C}, cuda).to(s.ot);
  auto w = (torch::randn({s.C}, cuda) * 0.5 + 1).to(s.xt), b = torch::randn({s.C}, cuda).to(s.xt);
  auto out = torch::full({s.rows, s.C}, NAN, cuda.dtype(s.ot));
  auto h = torch::full({s.rows, s.C}, NAN, cuda.dtype(s.xt));
  auto mean = torch::full({s.rows}, NAN, f32), rstd = torch::full({s.rows}, NAN, f32);
  const float eps = 1e-5f;
  if (residual) {
    ASSERT_EQ(kn::residual_layernorm_forward(h.data_ptr(), out.data_ptr(), mean.data_ptr<float>(),
                                             rstd.data_ptr<float>(), x.data_ptr(), y.data_ptr(), w.data_ptr(),
                                             b.data_ptr(), kdt(s.xt), kdt(s.ot), s.rows, s.C, eps, stream()),
              0);
    ASSERT_FALSE(any_nan(h));
    EXPECT_TRUE(torch::equal(h, (x.to(torch::kFloat) + y.to(torch::kFloat)).to(s.xt))) << "h is not residual + y";
  } else {
    ASSERT_EQ(kn::layernorm_forward(out.data_ptr(), kdt(s.ot), mean.data_ptr<float>(), rstd.data_ptr<float>(),
                                    x.data_ptr(), w.data_ptr(), b.data_ptr(), kdt(s.xt), s.rows, s.C, eps, stream()),
              0);
    h = x;
  }
  const auto hd = h.to(torch::kDouble).requires_grad_();
  const auto wd = w.to(torch::kDouble).requires_grad_(), bd = b.to(torch::kDouble).requires_grad_();
  const auto ref = torch::layer_norm(hd, {s.C}, wd, bd, eps);
  ASSERT_FALSE(any_nan(out) || any_nan(mean) || any_nan(rstd)) << "an output left unwritten";
  EXPECT_LT(rel_err(out, ref), s.ot == torch::kBFloat16 ? 8e-3 : 1e-5);
  EXPECT_LT(rel_err(mean, hd.detach().mean(1)), 1e-5);
  EXPECT_LT(rel_err(rstd, 1.0 / torch::sqrt(hd.detach().var(1, false) + eps)), 1e-5);

  // Backward, twice: the same bits each time (no float atomics), and the counter back at 0.
  auto dout = torch::randn({s.rows, s.C}, cuda).to(s.ot);
  auto dresid = torch::randn({s.rows, s.C}, cuda).to(s.xt);
  const auto blocks = kn::layernorm_backward_scratch_floats(s.rows, s.C, sms());
  auto scratch = torch::full({static_cast<int64_t>(blocks)}, NAN, f32);
  auto counter = torch::zeros({1}, cuda.dtype(torch::kInt));
  std::vector<at::Tensor> first;
  for (int run = 0; run < 2; ++run) {
    auto dx = torch::full({s.rows, s.C}, NAN, cuda.dtype(s.xt));
    auto dx_low = torch::full({s.rows, s.C}, NAN, cuda.dtype(s.ot));
    auto dw = torch::full({s.C}, NAN, f32), db = torch::full({s.C}, NAN, f32);
    ASSERT_EQ(
        kn::layernorm_backward(dx.data_ptr(), residual ? dx_low.data_ptr() : nullptr, dout.data_ptr(),
                               residual ? dresid.data_ptr() : nullptr, h.data_ptr(), w.data_ptr(),
                               mean.data_ptr<float>(), rstd.data_ptr<float>(), kdt(s.xt), kdt(s.ot),
                               dw.data_ptr<float>(), db.data_ptr<float>(), scratch.data_ptr<float>(),
                               reinterpret_cast<unsigned*>(counter.data_ptr<int32_t>()), s.rows, s.C, sms(), stream()),
        0);
    EXPECT_EQ(counter.item<int>(), 0) << "the last block did not reset the counter";
    ASSERT_FALSE(any_nan(dx) || any_nan(dw) || any_nan(db)) << "a gradient left unwritten";
    if (run == 0) {
      auto grads = torch::autograd::grad({(ref * dout.to(torch::kDouble)).sum()}, {hd, wd, bd});
      auto want_dx = grads[0] + (residual ? dresid.to(torch::kDouble) : torch::zeros_like(grads[0]));
      const double low = s.ot == torch::kBFloat16 || s.xt == torch::kBFloat16 ? 8e-3 : 1e-5;
      EXPECT_LT(rel_err(dx, want_dx), s.xt == torch::kBFloat16 ? 8e-3 : low);
      if (residual) {
        ASSERT_FALSE(any_nan(dx_low));
        // dx and y's gradient are one float value rounded to each dtype (checked where dx is fp32).
        if (s.xt == torch::kFloat) {
          EXPECT_TRUE(torch::equal(dx_low, dx.to(torch::kFloat).to(s.ot))) << "y's gradient is not dx in its dtype";
        }
      }
      const double sums = s.ot == torch::kBFloat16 || s.xt == torch::kBFloat16 ? 8e-3 : 1e-4;
      EXPECT_LT(rel_err(dw, grads[1]), sums);
      EXPECT_LT(rel_err(db, grads[2]), sums);
      first = {dx, dw, db};
    } else {
      EXPECT_TRUE(torch::equal(dx, first[0]) && torch::equal(dw, first[1]) && torch::equal(db, first[2]))
          << "a second run of the backward gave other bits";
    }
  }
}

TEST(Cuda, LayerNormKernelsMatchAtenInDoubleAndAreDeterministic) {
  FRUGAL_REQUIRE_KERNELS();
  torch::manual_seed(3);
  for (const NormShape& s :
       {NormShape{torch::kFloat, torch::kBFloat16, 16384, 768},  // GPT-2 under bf16 autocast
        NormShape{torch::kFloat, torch::kFloat, 16384, 768}, NormShape{torch::kBFloat16, torch::kBFloat16, 300, 768},
        NormShape{torch::kFloat, torch::kFloat, 1, 100}, NormShape{torch::kFloat, torch::kBFloat16, 7, 8},
        // The register-cached path's limits: 4 groups of 8 a lane (1024), 3 and a partial last
        // one (1000), the forward's 8 with the backward's fallback (2048), neither (2056).
        NormShape{torch::kFloat, torch::kFloat, 64, 1024}, NormShape{torch::kBFloat16, torch::kFloat, 33, 1000},
        NormShape{torch::kFloat, torch::kBFloat16, 64, 2048}, NormShape{torch::kFloat, torch::kFloat, 5, 2056}}) {
    check_layer_norm(s, false);
    check_layer_norm(s, true);
  }
}

// A run on the kernels follows a run on ATen's operators: within 2% at every logged step (the
// fused classifier and the bf16 LayerNorm outputs round differently from ATen's fp32 ones).
TEST(Cuda, TrainingOnFrugalKernelsTracksTheAtenPath) {
  FRUGAL_REQUIRE_KERNELS();
  std::vector<std::vector<double>> curves;
  for (const char* k : {"model.kernels=aten", "model.kernels=frugal"}) {
    test::TempDir d;
    test::train_on_gpu(d.path(), {"precision.mode=bf16", "model.head_multiple=64", k});
    curves.push_back(test::step_losses(d.path() + "/demo/metrics.jsonl"));
  }
  test::expect_curve_tracks(curves[1], curves[0], 0.02, "the kernel path");
}

// model.kernels = "auto" runs frugal's kernels for a one-process run on a GPU they run on (with the
// bf16 working weights), and ATen's operators under LoRA adapters, which their check has not run.
TEST(Cuda, AutoKernelsAreFrugalsOnAOneProcessRunAndAtensUnderLora) {
  FRUGAL_REQUIRE_KERNELS();
  test::TempDir a, b;
  const auto plain = test::train_on_gpu(a.path(), {"precision.mode=bf16"});
  EXPECT_EQ(plain["levers"]["kernels"], "frugal") << plain["levers"].dump();
  EXPECT_EQ(plain["levers"]["working_weights"], true);
  const auto lora = test::train_on_gpu(b.path(), {"precision.mode=bf16", "lora.rank=4"});
  EXPECT_EQ(lora["levers"]["kernels"], "aten");
  EXPECT_NE(lora["levers"]["kernels_reason"].get<std::string>().find("LoRA"), std::string::npos);
}
#else
TEST(Cuda, FusedClassifierMatchesLogSoftmaxInDoubleAndWritesEveryElement) { FRUGAL_REQUIRE_KERNELS(); }
TEST(Cuda, FusedCrossEntropyOnTheGpuMatchesItsCpuReference) { FRUGAL_REQUIRE_KERNELS(); }
TEST(Cuda, GradientWrittenOverScratchLogitsIsAnInPlaceWriteAutogradSees) { FRUGAL_REQUIRE_KERNELS(); }
TEST(Cuda, KernelsRunOnTheTensorsGpuNotTheCurrentOne) { FRUGAL_REQUIRE_KERNELS(); }
TEST(Cuda, LayerNormKernelsMatchAtenInDoubleAndAreDeterministic) { FRUGAL_REQUIRE_KERNELS(); }
TEST(Cuda, TrainingOnFrugalKernelsTracksTheAtenPath) { FRUGAL_REQUIRE_KERNELS(); }
TEST(Cuda, AutoKernelsAreFrugalsOnAOneProcessRunAndAtensUnderLora) { FRUGAL_REQUIRE_KERNELS(); }
#endif

}  // namespace
}  // namespace frugal::cuda_kernels_test
