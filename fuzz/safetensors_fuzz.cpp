// Fuzz target: the safetensors reader (docs/formats/safetensors.md). The input is a whole file;
// whatever decodes is also loaded into a parameter of the first tensor's shape, as a checkpoint's
// weights would be.
#include <ATen/ATen.h>

#include "frugal/ckpt/safetensors.h"
#include "frugal/core/errors.h"
#include "frugal/model/weights.h"
#include "fuzz_util.h"

using namespace frugal;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (const char* d = fuzz::seed_dir()) {
    NamedTensors t = {{"wte.weight", at::arange(12, at::kFloat).view({3, 4})},
                      {"ln.bias", at::zeros({4}, at::kBFloat16)},
                      {"steps", at::ones({2}, at::kLong)},
                      {"empty", at::zeros({0, 3})}};
    fuzz::write_whole(std::string(d) + "/model.safetensors", encode_safetensors(t, {{"format", "pt"}}));
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  try {
    SafetensorsFile f = decode_safetensors(bytes, "fuzz.safetensors");
    if (!f.tensors.empty() && f.tensors.front().second.numel() < (1 << 20)) {
      const auto& [name, t] = f.tensors.front();
      at::Tensor p = at::zeros(t.sizes(), at::kFloat);
      SafetensorsFile one;
      one.tensors.emplace_back(name, t);
      load_parameters({{name, p}}, one, "fuzz.safetensors");
    }
  } catch (const Error&) {
  }
  return 0;
}
