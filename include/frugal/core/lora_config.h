// [lora] — low-rank adapters over a frozen base (model/lora.h, docs/lora.md): the configuration
// struct, apart from config.h only to keep each header short. Plain data, no torch types.
#pragma once

#include <cstdint>
#include <string>

namespace frugal {

struct LoraConfig {
  // The adapters' rank r; 0 = no adapters (a full fine-tune, or train.freeze's choice).
  int64_t rank = 0;
  // The update is scaled by alpha / rank (PEFT's lora_alpha), or alpha / sqrt(rank) with rslora.
  double alpha = 16;
  bool rslora = false;
  double dropout = 0;  // on the adapters' input, in training
  // The products adapted, as PEFT's target_modules names them (q_proj, ..., down_proj; c_attn,
  // c_proj, c_fc): comma-separated; "all-linear" = every projection in the blocks.
  std::string targets = "all-linear";
  // An adapter directory PEFT wrote (adapter_config.json + adapter_model.safetensors) to start
  // from; its rank, alpha, targets and DoRA setting apply.
  std::string init_from;
  // DoRA: each adapted product's rows rescaled by a trained magnitude over their norm.
  bool dora = false;
  // The dtype the frozen weights of the adapted products are held in: bf16 halves their bytes
  // (under fp32 compute they are widened per product); fp32 keeps them exact; nf4 (QLoRA) holds
  // them in 4 bits with double-quantised block scales (0.26x bf16's bytes), dequantised per product.
  enum class BaseDtype { kBf16, kFp32, kNf4 };
  BaseDtype base_dtype = BaseDtype::kBf16;
};

// Whether the run trains adapters: a rank or an adapter to start from.
inline bool lora_enabled(const LoraConfig& l) { return l.rank > 0 || !l.init_from.empty(); }

}  // namespace frugal
