// Avro and TFRecord files as samples; see record_inputs.h.
#include "frugal/data/record_inputs.h"

#include <fmt/format.h>

#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <memory>

#include "frugal/core/atomic_file.h"
#include "frugal/core/errors.h"
#include "frugal_build_config.h"  // FRUGAL_HAVE_AVRO, FRUGAL_HAVE_TFRECORD

#if FRUGAL_HAVE_AVRO
#include <avro.h>
#endif
#if FRUGAL_HAVE_TFRECORD
#include <boost/crc.hpp>

#include "data/internal/tf_example.h"
#endif

namespace frugal {
namespace {
#if FRUGAL_HAVE_AVRO || FRUGAL_HAVE_TFRECORD
// "jpg" or "png" by the bytes' signature; "" for anything else.
std::string image_kind(const std::string& bytes) {
  if (bytes.size() >= 3 && static_cast<unsigned char>(bytes[0]) == 0xFF &&
      static_cast<unsigned char>(bytes[1]) == 0xD8 && static_cast<unsigned char>(bytes[2]) == 0xFF)
    return "jpg";
  if (bytes.size() >= 8 && std::memcmp(bytes.data(), "\x89PNG\r\n\x1a\n", 8) == 0) return "png";
  return "";
}

// One record's fields as found (a null text counts as an empty one, which prepare skips; a null
// image as absent; a null label is marked, refused beside an image): the sample prepare reads.
struct Found {
  bool has_text = false, has_image = false, has_label = false;
  bool null_label = false;  // the label field is there, null (Avro)
  std::string text, image, label;
};

TarSample sample_of(Found f, const std::string& path, int64_t index, const RecordFields& fields,
                    const std::function<std::string()>& present) {
  TarSample s;
  s.key = fmt::format("record {}", index);
  if (f.has_image) {
    const std::string kind = image_kind(f.image);
    if (kind.empty())
      throw DataError(fmt::format("{}: record {}: field '{}' holds {} bytes that are neither a JPEG nor a PNG", path,
                                  index, fields.image, f.image.size()));
    if (f.null_label || (f.has_label && f.label.empty()))
      throw DataError(fmt::format(
          "{}: record {}: label field '{}' (--label-column) is {}, expected the label of the record's image (field "
          "'{}'): an int, a long or a non-empty string; give every image record a label, or drop the record",
          path, index, fields.label, f.null_label ? "null" : "an empty string", fields.image));
    if (!f.has_label)
      throw DataError(
          fmt::format("{}: record {} has an image (field '{}') but no label: no field '{}' "
                      "(--label-column){}",
                      path, index, fields.image, fields.label, present()));
    s.members[kind] = std::move(f.image);
    s.members["cls"] = std::move(f.label);
  }
  if (f.has_text) s.members["txt"] = std::move(f.text);
  if (!f.has_text && !f.has_image)
    throw DataError(
        fmt::format("{}: record {} has neither the text field '{}' (--text-column) nor the image field "
                    "'{}' (--image-field){}",
                    path, index, fields.text, fields.image, present()));
  return s;
}
#endif

#if FRUGAL_HAVE_AVRO
[[noreturn]] void avro_fail(const std::string& path, const std::string& what) {
  throw DataError(fmt::format("{}: {}: {} (is it an Avro container file?)", path, what, avro_strerror()));
}

// The value of `field` of record `rec`, through a nullable union.
enum class Presence { kMissing, kNull, kValue };
Presence avro_field(avro_value_t* rec, const std::string& field, avro_value_t* out) {
  if (avro_value_get_by_name(rec, field.c_str(), out, nullptr) != 0) return Presence::kMissing;
  if (avro_value_get_type(out) == AVRO_UNION) {
    avro_value_t branch;
    if (avro_value_get_current_branch(out, &branch) != 0) return Presence::kNull;
    *out = branch;
  }
  return avro_value_get_type(out) == AVRO_NULL ? Presence::kNull : Presence::kValue;
}

// A string or bytes field as bytes; an int or long as its decimal text (labels). False for other
// types.
bool avro_text(avro_value_t* v, bool numbers, std::string* out) {
  switch (avro_value_get_type(v)) {
    case AVRO_STRING: {
      const char* p = nullptr;
      size_t n = 0;
      avro_value_get_string(v, &p, &n);
      out->assign(p, n > 0 ? n - 1 : 0);  // the size counts the terminating NUL
      return true;
    }
    case AVRO_BYTES: {
      const void* p = nullptr;
      size_t n = 0;
      avro_value_get_bytes(v, &p, &n);
      out->assign(static_cast<const char*>(p), n);
      return true;
    }
    case AVRO_INT32: {
      int32_t x = 0;
      avro_value_get_int(v, &x);
      *out = std::to_string(x);
      return numbers;
    }
    case AVRO_INT64: {
      int64_t x = 0;
      avro_value_get_long(v, &x);
      *out = std::to_string(x);
      return numbers;
    }
    default:
      return false;
  }
}

const char* avro_type_name(avro_type_t t) {
  switch (t) {
    case AVRO_STRING:
      return "a string";
    case AVRO_BYTES:
      return "bytes";
    case AVRO_INT32:
      return "an int";
    case AVRO_INT64:
      return "a long";
    case AVRO_FLOAT:
      return "a float";
    case AVRO_DOUBLE:
      return "a double";
    case AVRO_BOOLEAN:
      return "a boolean";
    case AVRO_NULL:
      return "null";
    case AVRO_RECORD:
      return "a record";
    case AVRO_ENUM:
      return "an enum";
    case AVRO_FIXED:
      return "a fixed";
    case AVRO_MAP:
      return "a map";
    case AVRO_ARRAY:
      return "an array";
    default:
      return "of another type";
  }
}

std::string avro_field_names(avro_schema_t schema) {
  std::string names;
  if (!is_avro_record(schema)) return names;
  for (size_t i = 0; i < avro_schema_record_size(schema); ++i)
    names +=
        fmt::format("{}'{}'", names.empty() ? "" : ", ", avro_schema_record_field_name(schema, static_cast<int>(i)));
  return names;
}
#endif

}  // namespace

std::vector<TarSample> read_avro_samples(const std::string& path, const RecordFields& fields) {
#if FRUGAL_HAVE_AVRO
  avro_file_reader_t reader = nullptr;
  if (avro_file_reader(path.c_str(), &reader) != 0) avro_fail(path, "cannot open");
  std::unique_ptr<avro_file_reader_t_, int (*)(avro_file_reader_t)> close_reader(reader, avro_file_reader_close);
  avro_schema_t schema = avro_file_reader_get_writer_schema(reader);
  if (!is_avro_record(schema))
    throw DataError(fmt::format("{}: the file's schema is not a record (its records must hold named fields)", path));
  const std::string present = fmt::format(" (the records' fields: {})", avro_field_names(schema));
  avro_value_iface_t* iface = avro_generic_class_from_schema(schema);
  if (!iface) avro_fail(path, "cannot read the writer schema");
  std::unique_ptr<avro_value_iface_t, void (*)(avro_value_iface_t*)> free_iface(
      iface, [](avro_value_iface_t* i) { avro_value_iface_decref(i); });
  avro_value_t rec;
  if (avro_generic_value_new(iface, &rec) != 0) avro_fail(path, "cannot allocate a record");
  std::unique_ptr<avro_value_t, void (*)(avro_value_t*)> free_rec(&rec, avro_value_decref);
  std::vector<TarSample> out;
  for (int64_t i = 0;; ++i) {
    const int rc = avro_file_reader_read_value(reader, &rec);
    if (rc == EOF) break;
    if (rc != 0) avro_fail(path, fmt::format("record {}", i));
    Found f;
    avro_value_t v;
    const auto take = [&](const std::string& name, bool numbers, bool* has, std::string* into) {
      const Presence p = avro_field(&rec, name, &v);
      if (p == Presence::kNull && !numbers && name == fields.text) *has = true;  // an empty document
      if (p == Presence::kNull && numbers) f.null_label = true;
      if (p != Presence::kValue) return;
      if (!avro_text(&v, numbers, into))
        throw DataError(fmt::format("{}: record {}: field '{}' is {}, expected {}", path, i, name,
                                    avro_type_name(avro_value_get_type(&v)),
                                    numbers ? "an int, a long or a string (the label)" : "a string or bytes"));
      *has = true;
    };
    take(fields.text, false, &f.has_text, &f.text);
    take(fields.image, false, &f.has_image, &f.image);
    if (f.has_image) take(fields.label, true, &f.has_label, &f.label);  // text records may carry any label
    out.push_back(sample_of(std::move(f), path, i, fields, [&] { return present; }));
    avro_value_reset(&rec);
  }
  return out;
#else
  (void)fields;
  throw ConfigError(
      fmt::format("{}: this frugal was built without Avro support (install libavro-dev and rebuild; "
                  "frugal doctor lists the features)",
                  path));
#endif
}

uint32_t tfrecord_masked_crc(const std::string& data) {
#if FRUGAL_HAVE_TFRECORD
  boost::crc_optimal<32, 0x1EDC6F41, 0xFFFFFFFF, 0xFFFFFFFF, true, true> crc;
  crc.process_bytes(data.data(), data.size());
  const uint32_t c = crc.checksum();
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
#else
  (void)data;
  throw ConfigError("TFRecord: this frugal was built without TFRecord support (frugal doctor lists the features)");
#endif
}

std::vector<std::string> read_tfrecords(const std::string& path) {
  const std::string bytes = read_file(path);
  const auto u32 = [&](size_t at) {
    uint32_t v;
    std::memcpy(&v, bytes.data() + at, 4);
    return v;
  };
  std::vector<std::string> out;
  size_t at = 0;
  for (int64_t i = 0; at < bytes.size(); ++i) {
    if (bytes.size() - at < 12)
      throw DataError(
          fmt::format("{}: record {} at byte {}: the file ends inside its 12-byte header (truncated)", path, i, at));
    uint64_t n;
    std::memcpy(&n, bytes.data() + at, 8);
    if (tfrecord_masked_crc(bytes.substr(at, 8)) != u32(at + 8))
      throw DataError(
          fmt::format("{}: record {} at byte {}: the length's CRC does not match (a corrupt file, or not "
                      "a TFRecord file)",
                      path, i, at));
    if (n > bytes.size() - at - 12 || bytes.size() - at - 12 - n < 4)
      throw DataError(
          fmt::format("{}: record {} at byte {} declares {} bytes, past the end of the file ({} bytes; "
                      "truncated)",
                      path, i, at, n, bytes.size()));
    std::string data = bytes.substr(at + 12, n);
    if (tfrecord_masked_crc(data) != u32(at + 12 + n))
      throw DataError(
          fmt::format("{}: record {} at byte {}: the data's CRC does not match (a corrupt file)", path, i, at));
    out.push_back(std::move(data));
    at += 12 + n + 4;
  }
  return out;
}

std::vector<TarSample> read_tfrecord_samples(const std::string& path, const RecordFields& fields) {
#if FRUGAL_HAVE_TFRECORD
  std::vector<TarSample> out;
  int64_t i = 0;
  for (const std::string& data : read_tfrecords(path)) {
    std::map<std::string, detail::TfFeature> features;
    if (!detail::parse_tf_example(data, &features))
      throw DataError(fmt::format("{}: record {} is not a tf.train.Example", path, i));
    const auto present = [&] {  // for the error messages only
      std::string names;
      for (const auto& [name, feature] : features) names += fmt::format("{}'{}'", names.empty() ? "" : ", ", name);
      return fmt::format(" (its features: {})", names.empty() ? "none" : names);
    };
    Found f;
    const auto take = [&](const std::string& name, bool numbers, bool* has, std::string* into) {
      auto it = features.find(name);
      if (it == features.end()) return;
      const detail::TfFeature& t = it->second;
      const size_t count = t.bytes.size() + t.ints.size() + t.floats.size();
      if (count != 1 ||
          !(t.kind == detail::TfFeature::Kind::kBytes || (numbers && t.kind == detail::TfFeature::Kind::kInts)))
        throw DataError(fmt::format(
            "{}: record {}: feature '{}' holds {} {} value{}, expected {}", path, i, name, count,
            t.kind == detail::TfFeature::Kind::kBytes    ? "bytes_list"
            : t.kind == detail::TfFeature::Kind::kInts   ? "int64_list"
            : t.kind == detail::TfFeature::Kind::kFloats ? "float_list"
                                                         : "empty",
            count == 1 ? "" : "s", numbers ? "one int64 or one bytes value (the label)" : "one bytes value"));
      *into = t.kind == detail::TfFeature::Kind::kInts ? std::to_string(t.ints[0]) : t.bytes[0];
      *has = true;
    };
    take(fields.text, false, &f.has_text, &f.text);
    take(fields.image, false, &f.has_image, &f.image);
    if (f.has_image) take(fields.label, true, &f.has_label, &f.label);  // text records may carry any label
    out.push_back(sample_of(std::move(f), path, i, fields, present));
    ++i;
  }
  return out;
#else
  (void)fields;
  throw ConfigError(
      fmt::format("{}: this frugal was built without TFRecord support (install libprotobuf-dev, "
                  "protobuf-compiler and libboost-dev and rebuild; frugal doctor lists the features)",
                  path));
#endif
}

}  // namespace frugal
