// Reader and writer for the safetensors format (https://github.com/huggingface/safetensors,
// docs/formats/safetensors.md): an 8-byte little-endian header length N, N bytes of JSON
// {"name": {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {..}}, then the raw
// little-endian tensor bytes. Python reads our files with `safetensors.torch.load_file`.
#pragma once

#include <ATen/core/Tensor.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace frugal {

using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

// Serialises tensors (any device; copied to CPU, made contiguous) into safetensors bytes.
std::string encode_safetensors(const NamedTensors& tensors, const std::map<std::string, std::string>& metadata = {});

// Writes atomically (temp file, fsync, rename).
void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata = {});

struct SafetensorsFile {
  NamedTensors tensors;                         // in file order
  std::map<std::string, std::string> metadata;  // "__metadata__"
  const at::Tensor* find(const std::string& name) const;
};

// Parses and validates (header size, JSON, dtypes, offsets in range, no overlap, sizes match).
// Throws CheckpointError naming `origin` (a path) and the offending tensor.
SafetensorsFile decode_safetensors(const std::string& bytes, const std::string& origin);
SafetensorsFile load_safetensors(const std::string& path);

}  // namespace frugal
