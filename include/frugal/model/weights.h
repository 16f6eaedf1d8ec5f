// Loading named parameters from a safetensors file, strictly: every parameter must be present
// with the same shape, and the file must hold nothing else. Errors name the file, the tensor
// and both shapes.
#pragma once

#include <string>
#include <vector>

#include "frugal/ckpt/safetensors.h"

namespace frugal {

// Copies tensors from `file` (read from `origin`) into `params` in place (dtype converted).
void load_parameters(const NamedTensors& params, const SafetensorsFile& file, const std::string& origin);

// What load_parameters would copy: `file`'s tensor for each of `params`, in their order, checked
// as it checks them (CheckpointError otherwise). For a caller that places them itself
// (Optimizer::load_weights under ZeRO-3).
std::vector<at::Tensor> matched_weights(const NamedTensors& params, const SafetensorsFile& file,
                                        const std::string& origin);

}  // namespace frugal
