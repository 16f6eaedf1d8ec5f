// The [lora] keys (model/lora.h, docs/lora.md); the other sections are in config_keys.cpp.
#include "core/internal/schema_keys.h"

namespace frugal::schema {

void add_lora_keys(std::vector<KeySpec>& s) {
  KeyList k{s};
  k.fixed(int_key(FRUGAL_FIELD(lora, rank), 0, 4096,
                  "the adapters' rank r: the base model is frozen and only the rank-r adapters train; 0 = off"));
  k.fixed(float_key(FRUGAL_FIELD(lora, alpha), 0, 1e6,
                    "the adapters' update is scaled by alpha / rank (PEFT's lora_alpha), alpha / sqrt(rank) with "
                    "lora.rslora"));
  k.fixed(bool_key(FRUGAL_FIELD(lora, rslora), "rank-stabilised scaling, alpha / sqrt(rank) (PEFT's use_rslora)"));
  k.fixed(float_key(FRUGAL_FIELD(lora, dropout), 0, 0.99, "dropout on the adapters' input, in training"));
  k.fixed(list_key(FRUGAL_FIELD(lora, targets),
                   "the products adapted, as PEFT's target_modules names them, comma-separated or a TOML list: "
                   "q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj (Llama family), c_attn, c_proj, "
                   "c_fc (GPT); \"all-linear\" = every projection in the blocks",
                   "names"));
  k.fixed(string_key(FRUGAL_FIELD(lora, init_from),
                     "an adapter directory written by PEFT (save_pretrained) or `frugal export --adapter` to start "
                     "from: its rank, alpha, targets and DoRA setting apply; \"\" = new adapters"));
  k.fixed(enum_key<LoraConfig::BaseDtype>(
      FRUGAL_FIELD(lora, base_dtype),
      {{"bf16", LoraConfig::BaseDtype::kBf16},
       {"fp32", LoraConfig::BaseDtype::kFp32},
       {"nf4", LoraConfig::BaseDtype::kNf4}},
      "the dtype the frozen weights of the adapted projections are held in: bf16 halves their bytes (widened per "
      "product under fp32 compute), fp32 keeps them exact, nf4 (QLoRA) holds them in 4 bits with double-quantised "
      "block scales, 0.26x bf16's bytes, dequantised per product"));
  k.fixed(bool_key(FRUGAL_FIELD(lora, dora),
                   "DoRA: each adapted product's output rows rescaled by a trained magnitude over the row norms of "
                   "W + BA (PEFT's use_dora)"));
}

}  // namespace frugal::schema
