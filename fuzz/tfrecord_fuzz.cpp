// Fuzz target: TFRecord input (data/record_inputs.h, prepare --format tfrecord). The input is a
// TFRecord file of tf.train.Example messages. Half the runs first rewrite every frame's two CRCs
// (walking the lengths the frames declare), so that mutations reach the Example parser and the
// mapping of features to samples behind them instead of stopping at the first CRC.
#include <cstring>
#include <vector>

#include "frugal/core/errors.h"
#include "frugal/data/record_inputs.h"
#include "fuzz_util.h"

using namespace frugal;

namespace {
std::string u32(uint32_t v) { return std::string(reinterpret_cast<const char*>(&v), 4); }

std::string frame(const std::string& data) {
  std::string len(8, '\0');
  const uint64_t n = data.size();
  std::memcpy(len.data(), &n, 8);
  return len + u32(tfrecord_masked_crc(len)) + data + u32(tfrecord_masked_crc(data));
}

std::string repair(std::string b) {
  size_t at = 0;
  while (b.size() - at >= 16) {
    uint64_t n;
    std::memcpy(&n, b.data() + at, 8);
    if (n > b.size() - at - 16) break;
    const std::string fixed = frame(b.substr(at + 12, n));
    b.replace(at, fixed.size(), fixed);
    at += fixed.size();
  }
  return b;
}

// A serialized Example by hand (the protobuf wire format): features {name: bytes_list [value]}
// or {name: int64_list [value]}.
std::string varint(uint64_t v) {
  std::string s;
  for (; v >= 0x80; v >>= 7) s += static_cast<char>((v & 0x7F) | 0x80);
  return s + static_cast<char>(v);
}
std::string field(int number, const std::string& payload) {
  return varint(static_cast<uint64_t>(number) << 3 | 2) + varint(payload.size()) + payload;
}
std::string feature(const std::string& name, const std::string& bytes, bool as_int) {
  const std::string kind = as_int ? field(3, field(1, varint(std::stoull(bytes)))) : field(1, field(1, bytes));
  return field(1, field(1, name) + field(2, kind));  // a map entry: key 1, value 2
}
std::string example(const std::vector<std::string>& features) {
  std::string f;
  for (const auto& x : features) f += x;
  return field(1, f);
}

void write_seeds(const std::string& dir) {
  const std::string png("\x89PNG\r\n\x1a\n\0\0\0\rIHDR", 16);
  fuzz::write_whole(dir + "/text.tfrecord", frame(example({feature("text", "a document", false)})) +
                                                frame(example({feature("text", "", false)})));
  fuzz::write_whole(dir + "/image.tfrecord",
                    frame(example({feature("image", png, false), feature("label", "3", true)})) +
                        frame(example({feature("image", "\xFF\xD8\xFFjpeg", false), feature("label", "cat", false)})));
}
}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (const char* d = fuzz::seed_dir()) write_seeds(d);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string bytes(reinterpret_cast<const char*>(data), size);
  if (size > 0 && (data[0] & 1)) bytes = repair(std::move(bytes));
  const std::string path = fuzz::scratch() + "/input.tfrecord";
  fuzz::write_whole(path, bytes);
  try {
    read_tfrecord_samples(path, RecordFields{});
  } catch (const Error&) {
  }
  return 0;
}
