// frugal's CUDA kernels (src/kernels) against the ATen operators they replace, at the GPT-2 124M
// shape of one micro-batch of 16 (16,384 rows, 768 wide, vocabulary 50257 padded to 50304; the
// MLP 3072 wide), and the Llama family's kernels and the fp8 cast at the GPU bench's Llama shape
// (768 wide, SwiGLU 2048), on one GPU. Each case: the median of --reps timed calls (CUDA events), inputs rotating over
// 4 sets so the 50 MB L2 does not hold them; bytes moved at the kernel's own minimum (every input read once, every
// output written once); and that as a fraction of this GPU's device-to-device copy rate measured here (the memory
// floor). ATen's side is what frugal's GPU step ran before the kernels: the loss on a float copy of the logits,
// LayerNorm in fp32 followed by a bf16 cast.
//
//   build/kernel_bench [--reps N] [--rows N] [--json FILE]
//
// Prints a table and, with --json, writes the figures (bench/results/<date>-gpu-<card>/).
// Exits 2 without a CUDA device or a build with the kernels.
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "frugal/model/fp8.h"
#include "frugal/model/fused_llama.h"
#include "frugal/model/kernel_ops.h"
#include "frugal/model/rope.h"
#include "kernels/kernels.h"

namespace {
namespace kn = frugal::kernels;

// Median milliseconds of `reps` calls of fn(i), i = 0, 1, ... (the caller rotates inputs by i).
double time_ms(int reps, const std::function<void(int)>& fn) {
  for (int i = 0; i < 3; ++i) fn(i);  // warm-up
  std::vector<double> ms;
  auto stream = at::cuda::getCurrentCUDAStream();
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  for (int i = 0; i < reps; ++i) {
    cudaEventRecord(a, stream);
    fn(i);
    cudaEventRecord(b, stream);
    cudaEventSynchronize(b);
    float t = 0;
    cudaEventElapsedTime(&t, a, b);
    ms.push_back(t);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

void check(int status, const char* what) {
  if (status != 0) throw std::runtime_error(fmt::format("{}: {}", what, kn::kernel_error_text(status)));
}

using AddCase = std::function<void(const std::string&, double, double, double)>;
constexpr int kSets = 4;

// The GPT-2 MLP's bias and GELU (tanh form, 3072 wide, bf16; the bias fp32), forward and
// backward. ATen's side: its linear adds the bias in the matmul's epilogue, so the forward is
// the GELU pass alone; the backward is gelu_backward, then the bias gradient summed from the
// written gradient (a second read of it) and cast to fp32.
void mlp_case(int reps, int64_t rows, void* stream, const AddCase& add) {
  const int64_t F = 3072;
  const auto cuda = torch::TensorOptions().device(torch::kCUDA);
  const auto f32 = cuda.dtype(torch::kFloat), bf = cuda.dtype(torch::kBFloat16);
  std::vector<at::Tensor> us, dys;
  for (int i = 0; i < kSets; ++i) {
    us.push_back(torch::randn({rows, F}, bf) * 2);
    dys.push_back(torch::randn({rows, F}, bf));
  }
  auto b = torch::randn({F}, f32) * 0.1, db = torch::empty({F}, f32);
  auto y = torch::empty({rows, F}, bf), du = torch::empty({rows, F}, bf);
  auto scratch = torch::empty({static_cast<int64_t>(kn::bias_gelu_backward_scratch_floats(rows, F))}, f32);
  const double fr = time_ms(reps, [&](int i) {
    check(kn::bias_gelu_forward(y.data_ptr(), us[i % kSets].data_ptr(), kn::Dtype::kBf16, b.data_ptr<float>(), rows, F,
                                true, stream),
          "bias_gelu_forward");
    check(
        kn::bias_gelu_backward(du.data_ptr(), db.data_ptr<float>(), dys[i % kSets].data_ptr(), us[i % kSets].data_ptr(),
                               kn::Dtype::kBf16, b.data_ptr<float>(), scratch.data_ptr<float>(), rows, F, true, stream),
        "bias_gelu_backward");
  });
  const double at = time_ms(reps, [&](int i) {
    (void)at::gelu(us[i % kSets], "tanh");
    const at::Tensor d = at::gelu_backward(dys[i % kSets], us[i % kSets], "tanh");
    (void)d.sum(0).to(torch::kFloat);
  });
  // forward: u read, y written; backward: dy and u read, du written (the bias sums in registers).
  add("bias + gelu fwd+bwd (bf16)", rows * F * 2.0 * 5, fr, at);
}

// The Llama family's kernels at gpu_bench.py's Llama shape (768 wide, SwiGLU 2048) and the fp8
// cast of one operand (768 wide, bf16 -> e4m3). ATen's side: fused_llama.h's reference (what a
// GPU runs without the kernels) and fp8.h's scale_of + quantize.
void llama_and_fp8_cases(int reps, int64_t rows, void* stream, const AddCase& add) {
  const int64_t C = 768, F = 2048;
  const auto cuda = torch::TensorOptions().device(torch::kCUDA);
  const auto f32 = cuda.dtype(torch::kFloat), bf = cuda.dtype(torch::kBFloat16);
  std::vector<at::Tensor> xs, dys, gus, dacts;
  for (int i = 0; i < kSets; ++i) {
    xs.push_back(torch::randn({rows, C}, f32));
    dys.push_back(torch::randn({rows, C}, bf));
    gus.push_back(torch::randn({rows, 2 * F}, bf));
    dacts.push_back(torch::randn({rows, F}, bf));
  }
  auto w = 1 + 0.1 * torch::randn({C}, f32);
  auto out = torch::empty({rows, C}, bf), rstd = torch::empty({rows}, f32);
  const double fr = time_ms(reps, [&](int i) {
    check(kn::rmsnorm_forward(out.data_ptr(), kn::Dtype::kBf16, rstd.data_ptr<float>(), xs[i % kSets].data_ptr(),
                              kn::Dtype::kF32, w.data_ptr<float>(), rows, C, 1e-5f, stream),
          "rmsnorm_forward");
  });
  const double at =
      time_ms(reps, [&](int i) { frugal::rms_norm_reference(xs[i % kSets], w, 1e-5).to(torch::kBFloat16); });
  add("rmsnorm fwd (fp32 -> bf16)", rows * C * (4.0 + 2.0), fr, at);

  auto h = torch::empty({rows, C}, f32);
  const double fr1 = time_ms(reps, [&](int i) {
    check(kn::residual_rmsnorm_forward(h.data_ptr(), out.data_ptr(), kn::Dtype::kBf16, rstd.data_ptr<float>(),
                                       xs[i % kSets].data_ptr(), dys[i % kSets].data_ptr(), kn::Dtype::kF32,
                                       w.data_ptr<float>(), rows, C, 1e-5f, stream),
          "residual_rmsnorm_forward");
  });
  const double at1 = time_ms(
      reps, [&](int i) { frugal::rms_norm_reference(xs[i % kSets] + dys[i % kSets], w, 1e-5).to(torch::kBFloat16); });
  add("residual + rmsnorm fwd", rows * C * (4.0 + 2.0 + 4.0 + 2.0), fr1, at1);

  auto dx = torch::empty({rows, C}, f32), dw = torch::empty({C}, f32);
  auto scratch = torch::empty({static_cast<int64_t>(kn::rmsnorm_backward_scratch_floats(rows, C))}, f32);
  const double fr2 = time_ms(reps, [&](int i) {
    check(kn::rmsnorm_backward(dx.data_ptr(), nullptr, dys[i % kSets].data_ptr(), kn::Dtype::kBf16, nullptr,
                               xs[i % kSets].data_ptr(), kn::Dtype::kF32, w.data_ptr<float>(), rstd.data_ptr<float>(),
                               dw.data_ptr<float>(), scratch.data_ptr<float>(), rows, C, stream),
          "rmsnorm_backward");
  });
  const double at2 = time_ms(reps, [&](int i) {
    torch::AutoGradMode on(true);
    auto x = xs[i % kSets].detach().requires_grad_(), ww = w.detach().requires_grad_();
    frugal::rms_norm_reference(x, ww, 1e-5).to(torch::kBFloat16).backward(dys[i % kSets]);
  });
  // dy (bf16) and x (fp32) read (x twice: the row's dot product, then dx), dx written; dw's sums apart.
  add("rmsnorm bwd", rows * C * (2.0 + 4.0 + 4.0), fr2, at2);

  auto act = torch::empty({rows, F}, bf), dgu = torch::empty({rows, 2 * F}, bf);
  const double fr3 = time_ms(reps, [&](int i) {
    check(kn::swiglu_forward(act.data_ptr(), gus[i % kSets].data_ptr(), kn::Dtype::kBf16, rows, F, stream),
          "swiglu_forward");
    check(kn::swiglu_backward(dgu.data_ptr(), gus[i % kSets].data_ptr(), dacts[i % kSets].data_ptr(), kn::Dtype::kBf16,
                              rows, F, stream),
          "swiglu_backward");
  });
  const double at3 = time_ms(reps, [&](int i) {
    torch::AutoGradMode on(true);
    auto gu = gus[i % kSets].detach().requires_grad_();
    frugal::swiglu_reference(gu).backward(dacts[i % kSets]);
  });
  // forward: gate_up read, act written; backward: gate_up and dact read, dgate_up written.
  add("swiglu fwd+bwd (bf16)", rows * F * 2.0 * (2 + 1 + 2 + 1 + 2), fr3, at3);

  // The rotary embedding into the attention's layout: 12 query and 4 key/value heads of 64, the
  // rows as sequences of 1024.
  const int64_t H = 12, K = 4, D = 64, T = 1024, B = std::max<int64_t>(1, rows / T);
  frugal::ModelConfig m;
  m.arch = frugal::ModelConfig::Arch::kLlama;
  m.embd = H * D;
  m.heads = H;
  m.kv_heads = K;
  m.block = T;
  const frugal::RopeTables tables = frugal::rope_tables(m, T, torch::Device(torch::kCUDA));
  std::vector<at::Tensor> qkvs;
  for (int i = 0; i < kSets; ++i) qkvs.push_back(torch::randn({B, T, (H + 2 * K) * D}, bf));
  const double fr5 = time_ms(reps, [&](int i) { frugal::rope_split(qkvs[i % kSets], tables.cos, tables.sin, H, K); });
  const double at5 = time_ms(reps, [&](int i) {
    const at::Tensor& x = qkvs[i % kSets];
    frugal::apply_rope(x.narrow(2, 0, H * D).view({B, T, H, D}), tables, 0).transpose(1, 2).contiguous();
    frugal::apply_rope(x.narrow(2, H * D, K * D).view({B, T, K, D}), tables, 0).transpose(1, 2).contiguous();
    x.narrow(2, (H + K) * D, K * D).view({B, T, K, D}).transpose(1, 2).contiguous();
  });
  add("rope into the heads' layout (bf16)", B * T * (H + 2 * K) * D * (2.0 + 2.0), fr5, at5);

  std::vector<at::Tensor> ins;
  for (int i = 0; i < kSets; ++i) ins.push_back(torch::randn({rows, C}, bf));
  const double fr4 = time_ms(reps, [&](int i) { frugal::fp8::cast(ins[i % kSets], at::kFloat8_e4m3fn, true); });
  const double at4 = time_ms(reps, [&](int i) { frugal::fp8::cast(ins[i % kSets], at::kFloat8_e4m3fn, false); });
  // The operand read twice (its absolute maximum, then the cast), a byte an element written.
  add("fp8 cast (bf16 -> e4m3, amax + cast)", rows * C * (2.0 + 2.0 + 1.0), fr4, at4);
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 50;
  int64_t rows = 16384;
  std::string json_path;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if ((a == "--reps" || a == "--rows" || a == "--json") && i + 1 < argc) {
      const std::string v = argv[++i];
      if (a == "--reps") reps = std::max(5, std::stoi(v));
      if (a == "--rows") rows = std::max<int64_t>(8, std::stoll(v));
      if (a == "--json") json_path = v;
    } else if (a == "-h" || a == "--help") {
      std::puts(
          "kernel_bench [--reps N] [--rows N] [--json FILE]: frugal's CUDA kernels against ATen "
          "(bench/kernel_bench.cpp)");
      return 0;
    } else {
      std::fprintf(stderr, "kernel_bench: unknown argument '%s' (allowed: --reps N, --rows N, --json FILE, --help)\n",
                   a.c_str());
      return 2;
    }
  }
  if (!torch::cuda::is_available()) {
    std::fprintf(stderr, "kernel_bench: no CUDA device visible\n");
    return 2;
  }
  const std::string why = frugal::cuda_kernels_unavailable(torch::Device(torch::kCUDA, 0));
  if (!why.empty()) {
    std::fprintf(stderr, "kernel_bench: %s\n", why.c_str());
    return 2;
  }
  torch::NoGradGuard no_grad;
  const auto* prop = at::cuda::getCurrentDeviceProperties();
  const int sms = prop->multiProcessorCount;
  const int64_t C = 768, V = 50257, Vp = 50304;
  void* stream = at::cuda::getCurrentCUDAStream().stream();
  const auto cuda = torch::TensorOptions().device(torch::kCUDA);
  const auto f32 = cuda.dtype(torch::kFloat), bf = cuda.dtype(torch::kBFloat16);

  // The memory floor: a 1 GiB device-to-device copy.
  auto src = torch::empty({1 << 28}, f32), dst = torch::empty({1 << 28}, f32);
  const double copy_ms = time_ms(reps, [&](int) { dst.copy_(src); });
  const double copy_gbs = 2.0 * src.numel() * 4 / (copy_ms * 1e6);
  src = dst = torch::Tensor();

  nlohmann::json cases = nlohmann::json::array();
  auto add = [&](const std::string& name, double bytes, double frugal_ms, double aten_ms) {
    const double gbs = bytes / (frugal_ms * 1e6);
    cases.push_back({{"case", name},
                     {"bytes", bytes},
                     {"frugal_ms", frugal_ms},
                     {"aten_ms", aten_ms},
                     {"speedup", aten_ms / frugal_ms},
                     {"frugal_gb_per_s", gbs},
                     {"of_copy_rate", gbs / copy_gbs}});
    std::printf("%-34s frugal %8.3f ms  aten %8.3f ms  %5.2fx  %7.0f GB/s = %3.0f%% of copy\n", name.c_str(), frugal_ms,
                aten_ms, aten_ms / frugal_ms, gbs, 100 * gbs / copy_gbs);
  };

  // ---- the classifier: loss and gradient from the padded bf16 logits ----
  {
    auto logits = torch::randn({rows, Vp}, bf) * 3;  // one set: 1.6 GB, far past L2
    auto targets = torch::randint(0, V, {rows}, cuda.dtype(torch::kLong));
    auto lse = torch::empty({rows}, f32), loss = torch::empty({rows}, f32);
    auto grad = torch::ones({}, f32), count = torch::full({}, static_cast<float>(rows), f32);
    auto d = torch::empty_like(logits);
    const double fr = time_ms(reps, [&](int) {
      check(kn::classifier_forward(logits.data_ptr(), kn::Dtype::kBf16, rows, V, Vp, targets.data_ptr<int64_t>(), -100,
                                   lse.data_ptr<float>(), loss.data_ptr<float>(), stream),
            "classifier_forward");
      check(kn::classifier_backward(d.data_ptr(), logits.data_ptr(), kn::Dtype::kBf16, rows, V, Vp,
                                    targets.data_ptr<int64_t>(), -100, lse.data_ptr<float>(), grad.data_ptr<float>(),
                                    count.data_ptr<float>(), stream),
            "classifier_backward");
    });
    const double at = time_ms(reps, [&](int) {
      torch::AutoGradMode on(true);
      auto z = logits.narrow(1, 0, V).detach().requires_grad_();
      auto l = torch::nn::functional::cross_entropy(z.to(torch::kFloat), targets);
      l.backward();
    });
    add("classifier fwd+bwd (bf16 logits)", 3.0 * rows * Vp * 2, fr, at);
  }
  // ---- LayerNorm: fp32 residual stream in, bf16 out (what feeds the bf16 matmuls) ----
  {
    std::vector<at::Tensor> xs, ys, dys;
    for (int i = 0; i < kSets; ++i) {
      xs.push_back(torch::randn({rows, C}, f32));
      ys.push_back(torch::randn({rows, C}, bf));
      dys.push_back(torch::randn({rows, C}, bf));
    }
    auto w = torch::randn({C}, f32), b = torch::randn({C}, f32);
    auto out = torch::empty({rows, C}, bf), h = torch::empty({rows, C}, f32);
    auto mean = torch::empty({rows}, f32), rstd = torch::empty({rows}, f32);
    const double fr = time_ms(reps, [&](int i) {
      check(kn::layernorm_forward(out.data_ptr(), kn::Dtype::kBf16, mean.data_ptr<float>(), rstd.data_ptr<float>(),
                                  xs[i % kSets].data_ptr(), w.data_ptr(), b.data_ptr(), kn::Dtype::kF32, rows, C, 1e-5f,
                                  stream),
            "layernorm_forward");
    });
    const double at =
        time_ms(reps, [&](int i) { torch::layer_norm(xs[i % kSets], {C}, w, b, 1e-5).to(torch::kBFloat16); });
    add("layernorm fwd (fp32 -> bf16)", rows * C * (4.0 + 2.0), fr, at);

    const double fr2 = time_ms(reps, [&](int i) {
      check(kn::residual_layernorm_forward(h.data_ptr(), out.data_ptr(), mean.data_ptr<float>(), rstd.data_ptr<float>(),
                                           xs[i % kSets].data_ptr(), ys[i % kSets].data_ptr(), w.data_ptr(),
                                           b.data_ptr(), kn::Dtype::kF32, kn::Dtype::kBf16, rows, C, 1e-5f, stream),
            "residual_layernorm_forward");
    });
    const double at2 = time_ms(reps, [&](int i) {
      auto hh = xs[i % kSets] + ys[i % kSets];
      torch::layer_norm(hh, {C}, w, b, 1e-5).to(torch::kBFloat16);
    });
    add("residual + layernorm fwd", rows * C * (4.0 + 2.0 + 4.0 + 2.0), fr2, at2);

    auto dx = torch::empty({rows, C}, f32), dx_low = torch::empty({rows, C}, bf);
    auto dw = torch::empty({C}, f32), db = torch::empty({C}, f32);
    auto scratch = torch::empty({static_cast<int64_t>(kn::layernorm_backward_scratch_floats(rows, C, sms))}, f32);
    auto counter = torch::zeros({1}, cuda.dtype(torch::kInt));
    const double fr3 = time_ms(reps, [&](int i) {
      check(kn::layernorm_backward(dx.data_ptr(), dx_low.data_ptr(), dys[i % kSets].data_ptr(),
                                   xs[i % kSets].data_ptr(), xs[(i + 1) % kSets].data_ptr(), w.data_ptr(),
                                   mean.data_ptr<float>(), rstd.data_ptr<float>(), kn::Dtype::kF32, kn::Dtype::kBf16,
                                   dw.data_ptr<float>(), db.data_ptr<float>(), scratch.data_ptr<float>(),
                                   reinterpret_cast<unsigned*>(counter.data_ptr<int32_t>()), rows, C, sms, stream),
            "layernorm_backward");
    });
    auto mean2 = mean.view({rows, 1}), rstd2 = rstd.view({rows, 1});
    const double at3 = time_ms(reps, [&](int i) {
      auto r = at::native_layer_norm_backward(dys[i % kSets].to(torch::kFloat), xs[(i + 1) % kSets], {C}, mean2, rstd2,
                                              w, b, {true, true, true});
      auto sum = std::get<0>(r) + xs[i % kSets];  // the residual gradient's add, which the kernel folds in
      (void)sum.to(torch::kBFloat16);
    });
    // dout (bf16), x (fp32), dresid (fp32) read; dx (fp32) and dx in bf16 written.
    add("layernorm bwd (+ residual grad)", rows * C * (2.0 + 4.0 + 4.0 + 4.0 + 2.0), fr3, at3);
  }

  mlp_case(reps, rows, stream, add);
  llama_and_fp8_cases(reps, rows, stream, add);

  std::printf("device-to-device copy: %.0f GB/s (%s)\n", copy_gbs, prop->name);
  if (!json_path.empty()) {
    nlohmann::json j = {{"bench", "kernel_bench"},
                        {"device_name", prop->name},
                        {"rows", rows},
                        {"embd", C},
                        {"vocab", V},
                        {"vocab_padded", Vp},
                        {"reps", reps},
                        {"copy_gb_per_s", copy_gbs},
                        {"cases", cases}};
    std::ofstream(json_path) << j.dump(2) << "\n";
  }
  return 0;
}
