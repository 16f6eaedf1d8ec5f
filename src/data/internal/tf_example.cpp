// tf.train.Example parsing; see tf_example.h.
#include "data/internal/tf_example.h"

#include "tf_example.pb.h"

namespace frugal::detail {

bool parse_tf_example(const std::string& data, std::map<std::string, TfFeature>* out) {
  tensorflow::Example e;
  if (!e.ParseFromString(data)) return false;
  out->clear();
  for (const auto& [name, f] : e.features().feature()) {
    TfFeature& t = (*out)[name];
    switch (f.kind_case()) {
      case tensorflow::Feature::kBytesList:
        t.kind = TfFeature::Kind::kBytes;
        t.bytes.assign(f.bytes_list().value().begin(), f.bytes_list().value().end());
        break;
      case tensorflow::Feature::kFloatList:
        t.kind = TfFeature::Kind::kFloats;
        t.floats.assign(f.float_list().value().begin(), f.float_list().value().end());
        break;
      case tensorflow::Feature::kInt64List:
        t.kind = TfFeature::Kind::kInts;
        t.ints.assign(f.int64_list().value().begin(), f.int64_list().value().end());
        break;
      default:
        break;
    }
  }
  return true;
}

}  // namespace frugal::detail
