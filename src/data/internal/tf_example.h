// tf.train.Example messages (src/data/proto/tf_example.proto) parsed by Debian's protobuf library.
// Built into a library of its own without LibTorch's include path (the wheel ships another
// protobuf's headers there), as TensorBoard's messages are; this header holds standard types only.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace frugal::detail {

// One feature of an Example: a list of byte strings, floats or 64-bit integers.
struct TfFeature {
  enum class Kind { kNone, kBytes, kFloats, kInts } kind = Kind::kNone;
  std::vector<std::string> bytes;
  std::vector<float> floats;
  std::vector<int64_t> ints;
};

// The features of the serialized Example `data` by name; false when `data` is not one.
bool parse_tf_example(const std::string& data, std::map<std::string, TfFeature>* out);

}  // namespace frugal::detail
