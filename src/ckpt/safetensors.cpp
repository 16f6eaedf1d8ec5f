// safetensors encode/decode; see safetensors.h and docs/formats/safetensors.md.
#include "frugal/ckpt/safetensors.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <unordered_set>

#include <nlohmann/json.hpp>

#include "frugal/core/atomic_file.h"
#include "frugal/core/errors.h"

namespace frugal {
namespace {

struct DtypeName {
  c10::ScalarType type;
  const char* name;
};
constexpr DtypeName kDtypes[] = {
    {c10::ScalarType::Double, "F64"},    {c10::ScalarType::Float, "F32"}, {c10::ScalarType::Half, "F16"},
    {c10::ScalarType::BFloat16, "BF16"}, {c10::ScalarType::Long, "I64"},  {c10::ScalarType::Int, "I32"},
    {c10::ScalarType::Short, "I16"},     {c10::ScalarType::Char, "I8"},   {c10::ScalarType::Byte, "U8"},
    {c10::ScalarType::Bool, "BOOL"},
};

const char* dtype_name(c10::ScalarType t) {
  for (const auto& d : kDtypes)
    if (d.type == t) return d.name;
  throw CheckpointError(fmt::format("safetensors: dtype {} has no safetensors name", c10::toString(t)));
}

bool dtype_from_name(const std::string& n, c10::ScalarType* out) {
  for (const auto& d : kDtypes) {
    if (n == d.name) {
      *out = d.type;
      return true;
    }
  }
  return false;
}

void put_u64_le(std::string& s, uint64_t v) {
  for (int i = 0; i < 8; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

uint64_t get_u64_le(const std::string& s) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(static_cast<unsigned char>(s[i])) << (8 * i);
  return v;
}

}  // namespace

const at::Tensor* SafetensorsFile::find(const std::string& name) const {
  for (const auto& [n, t] : tensors)
    if (n == name) return &t;
  return nullptr;
}

std::string encode_safetensors(const NamedTensors& tensors, const std::map<std::string, std::string>& metadata) {
  // The header is written as text, in the tensors' order: building it as an ordered JSON object
  // costs a linear key search per tensor (quadratic for many tensors).
  std::string json = "{";
  if (!metadata.empty()) json += "\"__metadata__\":" + nlohmann::json(metadata).dump();
  std::unordered_set<std::string> seen;
  std::vector<at::Tensor> cpu;
  cpu.reserve(tensors.size());
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    if (name == "__metadata__" || !seen.insert(name).second)
      throw CheckpointError(fmt::format("safetensors: duplicate or reserved tensor name '{}'", name));
    at::Tensor c = t.detach().to(at::kCPU).contiguous();
    uint64_t bytes = c.numel() * c.element_size();
    const nlohmann::ordered_json entry = {
        {"dtype", dtype_name(c.scalar_type())}, {"shape", c.sizes().vec()}, {"data_offsets", {offset, offset + bytes}}};
    if (json.size() > 1) json += ',';
    json += nlohmann::json(name).dump() + ":" + entry.dump();
    offset += bytes;
    cpu.push_back(std::move(c));
  }
  json += '}';
  while (json.size() % 8 != 0) json.push_back(' ');  // align the data to 8 bytes, as the spec advises
  std::string out;
  out.reserve(8 + json.size() + offset);
  put_u64_le(out, json.size());
  out += json;
  for (const auto& c : cpu) {
    // x86 and the CUDA hosts we target are little-endian, which is what the format stores.
    out.append(static_cast<const char*>(c.data_ptr()), c.numel() * c.element_size());
  }
  return out;
}

void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata) {
  write_file_atomic(path, encode_safetensors(tensors, metadata));
}

SafetensorsFile decode_safetensors(const std::string& bytes, const std::string& origin) {
  auto fail = [&](const std::string& why) -> CheckpointError {
    return CheckpointError(fmt::format("{}: not a valid safetensors file: {}", origin, why));
  };
  if (bytes.size() < 8) throw fail(fmt::format("{} bytes, shorter than the 8-byte header length", bytes.size()));
  uint64_t n = get_u64_le(bytes);
  if (n > 100'000'000 || 8 + n > bytes.size())
    throw fail(fmt::format("header length {} does not fit in the file's {} bytes", n, bytes.size()));
  // A sorted-map JSON (O(log n) per key); the file order is recovered from the data offsets.
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(bytes.begin() + 8, bytes.begin() + 8 + static_cast<long>(n));
  } catch (const nlohmann::json::exception& e) {
    throw fail(std::string("header is not JSON: ") + e.what());
  }
  if (!header.is_object()) throw fail("header is not a JSON object");
  const uint64_t data_start = 8 + n;
  const uint64_t data_size = bytes.size() - data_start;
  SafetensorsFile out;
  struct Entry {
    std::string name;
    c10::ScalarType dtype;
    std::vector<int64_t> shape;
    uint64_t begin, end;
  };
  std::vector<Entry> entries;
  entries.reserve(header.size());
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it->is_object()) throw fail("__metadata__ must be an object of strings");
      for (auto m = it->begin(); m != it->end(); ++m) {
        if (!m->is_string()) throw fail("__metadata__ values must be strings");
        out.metadata[m.key()] = m->get<std::string>();
      }
      continue;
    }
    const auto& e = *it;
    Entry x{it.key(), c10::ScalarType::Float, {}, 0, 0};
    if (!e.is_object() || !e.contains("dtype") || !e["dtype"].is_string() ||
        !dtype_from_name(e["dtype"].get<std::string>(), &x.dtype))
      throw fail(fmt::format("tensor '{}' has a missing or unsupported dtype", it.key()));
    if (!e.contains("shape") || !e["shape"].is_array() || !e.contains("data_offsets") ||
        !e["data_offsets"].is_array() || e["data_offsets"].size() != 2 || !e["data_offsets"][0].is_number_unsigned() ||
        !e["data_offsets"][1].is_number_unsigned())
      throw fail(fmt::format("tensor '{}' lacks shape or data_offsets (two non-negative integers)", it.key()));
    // Element and byte counts are checked for overflow: a shape whose product wraps around could
    // otherwise match a small data range.
    uint64_t numel = 1;
    bool too_many = false;  // the product passed the file size (a later 0 does not undo that)
    const uint64_t max_bytes = bytes.size();
    for (const auto& d : e["shape"]) {
      if (!d.is_number_unsigned()) throw fail(fmt::format("tensor '{}' has a bad shape", it.key()));
      const uint64_t dim = d.get<uint64_t>();
      if (dim > static_cast<uint64_t>(INT64_MAX))
        throw fail(fmt::format("tensor '{}' has a dimension of {}, over the largest a tensor can have ({})", it.key(),
                               dim, INT64_MAX));
      if (dim != 0 && numel > max_bytes / dim)
        too_many = true;
      else
        numel *= dim;
      x.shape.push_back(static_cast<int64_t>(dim));
    }
    if (too_many)  // even with a 0 further on: such a shape overflows sizes computed along the way
      throw fail(fmt::format("tensor '{}' has shape {}, whose dimensions multiply past the {} bytes of the file",
                             it.key(), e["shape"].dump(), max_bytes));
    x.begin = e["data_offsets"][0].get<uint64_t>();
    x.end = e["data_offsets"][1].get<uint64_t>();
    if (x.begin > x.end || x.end > data_size)
      throw fail(fmt::format("tensor '{}' data [{}, {}) lies outside the {} data bytes (truncated?)", it.key(), x.begin,
                             x.end, data_size));
    if (numel * c10::elementSize(x.dtype) != x.end - x.begin)  // numel <= file size: no overflow
      throw fail(fmt::format("tensor '{}' has {} bytes but its shape {} needs {}", it.key(), x.end - x.begin,
                             e["shape"].dump(), numel * c10::elementSize(x.dtype)));
    entries.push_back(std::move(x));
  }
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end != b.end ? a.end < b.end : a.name < b.name;
  });
  for (size_t i = 1; i < entries.size(); ++i)
    if (entries[i].begin < entries[i - 1].end) throw fail("tensor data ranges overlap");
  out.tensors.reserve(entries.size());
  for (auto& x : entries) {
    at::Tensor t = at::empty(x.shape, at::TensorOptions().dtype(x.dtype));
    if (x.end > x.begin) std::memcpy(t.data_ptr(), bytes.data() + data_start + x.begin, x.end - x.begin);
    out.tensors.emplace_back(std::move(x.name), std::move(t));
  }
  return out;
}

SafetensorsFile load_safetensors(const std::string& path) {
  std::string bytes;
  try {
    bytes = read_file(path);
  } catch (const IoError& e) {
    throw CheckpointError(e.what());
  }
  return decode_safetensors(bytes, path);
}

}  // namespace frugal
