// The entries of the family table (model_family.cpp), each defined with its family's Hugging
// Face layout: the GPT in hf_gpt2.cpp, the Llama family in llama/hf_llama.cpp.
#pragma once

#include "frugal/model/model_family.h"

namespace frugal {

const ModelFamily& gpt_family();
const ModelFamily& llama_family();

}  // namespace frugal
