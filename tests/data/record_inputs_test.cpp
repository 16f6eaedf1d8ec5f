// TFRecord framing (data/record_inputs.h): the masked CRC-32C is TensorFlow's (the CRC-32C check
// value of "123456789", masked as TensorFlow masks it); frames written here read back exactly,
// empty records included; a flipped data byte, a flipped length byte and a file cut short are each
// refused naming the file, the record and its byte offset. An Avro image record whose label is
// null, or of another type, is refused naming the record, the field and the type found. (Files
// from the reference writers: tests/interop/avro_tfrecord_check.py.)
#include "frugal/data/record_inputs.h"

#include <gtest/gtest.h>

#include <cstring>

#include "frugal/core/errors.h"
#include "frugal/core/features.h"
#include "test_util.h"

namespace frugal::record_inputs_test {
namespace {

std::string frame(const std::string& data) {
  std::string len(8, '\0');
  const uint64_t n = data.size();
  std::memcpy(len.data(), &n, 8);
  const auto u32 = [](uint32_t v) { return std::string(reinterpret_cast<const char*>(&v), 4); };
  return len + u32(tfrecord_masked_crc(len)) + data + u32(tfrecord_masked_crc(data));
}

// Avro's variable-length zig-zag long, and bytes / strings as their length then their bytes.
std::string avro_long(int64_t v) {
  uint64_t z = (static_cast<uint64_t>(v) << 1) ^ static_cast<uint64_t>(v >> 63);
  std::string out;
  for (; z >= 0x80; z >>= 7) out.push_back(static_cast<char>((z & 0x7f) | 0x80));
  out.push_back(static_cast<char>(z));
  return out;
}
std::string avro_bytes(const std::string& b) { return avro_long(static_cast<int64_t>(b.size())) + b; }

// An Avro object container file (codec null, one block) of the encoded `records`.
std::string avro_file(const std::string& schema, const std::vector<std::string>& records) {
  const std::string sync(16, '\x5a');
  std::string block;
  for (const auto& r : records) block += r;
  return std::string("Obj\x01") + avro_long(2) + avro_bytes("avro.codec") + avro_bytes("null") +
         avro_bytes("avro.schema") + avro_bytes(schema) + avro_long(0) + sync +
         avro_long(static_cast<int64_t>(records.size())) + avro_long(static_cast<int64_t>(block.size())) + block + sync;
}

std::string avro_refusal(const std::string& path) {
  try {
    read_avro_samples(path, RecordFields{});
  } catch (const DataError& e) {
    return e.what();
  }
  return "";
}

// The message of the DataError that reading `path` throws ("" when none).
std::string refusal(const std::string& path) {
  try {
    read_tfrecords(path);
  } catch (const DataError& e) {
    return e.what();
  }
  return "";
}

TEST(Tfrecord, FramesReadBackAndEveryCorruptionIsNamed) {
  FRUGAL_NEED_FEATURE("tfrecord");
  const uint32_t check = 0xE3069283u;  // CRC-32C("123456789")
  EXPECT_EQ(tfrecord_masked_crc("123456789"), ((check >> 15) | (check << 17)) + 0xa282ead8u);
  test::TempDir dir;
  const std::vector<std::string> records{"first", "", std::string(300, 'x') + std::string(1, '\0') + "tail"};
  std::string file;
  for (const auto& r : records) file += frame(r);
  test::write_text(dir.file("a.tfrecord"), file);
  EXPECT_EQ(read_tfrecords(dir.file("a.tfrecord")), records);

  const size_t second = frame(records[0]).size(), third = second + frame(records[1]).size();
  std::string data = file;
  data[third + 12 + 100] ^= 0x01;  // a byte of record 2's data
  test::write_text(dir.file("data.tfrecord"), data);
  std::string e = refusal(dir.file("data.tfrecord"));
  EXPECT_NE(e.find("data.tfrecord: record 2 at byte " + std::to_string(third)), std::string::npos) << e;
  EXPECT_NE(e.find("data's CRC"), std::string::npos) << e;

  std::string length = file;
  length[second] ^= 0x01;  // record 1's length
  test::write_text(dir.file("length.tfrecord"), length);
  e = refusal(dir.file("length.tfrecord"));
  EXPECT_NE(e.find("record 1 at byte " + std::to_string(second)), std::string::npos) << e;
  EXPECT_NE(e.find("length's CRC"), std::string::npos) << e;

  for (size_t cut : {file.size() - 1, file.size() - 5, third + 6}) {
    test::write_text(dir.file("short.tfrecord"), file.substr(0, cut));
    e = refusal(dir.file("short.tfrecord"));
    EXPECT_NE(e.find("record 2 at byte " + std::to_string(third)), std::string::npos) << cut << ": " << e;
    EXPECT_NE(e.find("truncated"), std::string::npos) << cut << ": " << e;
  }
}

// A null label used to read as "no field 'label'" though the record has one, and a double label
// as "neither an int, a long nor a string": now each names the record, the field and what it holds.
TEST(Avro, ANullOrWrongTypedLabelIsNamedByRecordFieldAndType) {
  FRUGAL_NEED_FEATURE("avro");
  test::TempDir dir;
  const std::string jpeg = avro_bytes(std::string("\xff\xd8\xff\xe0", 4) + std::string(20, 'x'));
  const std::string nullable = R"({"type": "record", "name": "R", "fields": [{"name": "image", "type": "bytes"},)"
                               R"( {"name": "label", "type": ["null", "long"]}]})";
  // Record 0: label 1 (union branch 1); record 1: label null (branch 0).
  test::write_text(dir.file("null.avro"),
                   avro_file(nullable, {jpeg + avro_long(1) + avro_long(1), jpeg + avro_long(0)}));
  std::string e = avro_refusal(dir.file("null.avro"));
  EXPECT_NE(e.find(dir.file("null.avro") + ": record 1: label field 'label' (--label-column) is null"),
            std::string::npos)
      << e;
  EXPECT_EQ(e.find("no field 'label'"), std::string::npos) << e;
  const std::string doubles = R"({"type": "record", "name": "R", "fields": [{"name": "image", "type": "bytes"},)"
                              R"( {"name": "label", "type": "double"}]})";
  const double x = 1.5;
  std::string le(8, '\0');
  std::memcpy(le.data(), &x, 8);
  test::write_text(dir.file("double.avro"), avro_file(doubles, {jpeg + le}));
  e = avro_refusal(dir.file("double.avro"));
  EXPECT_NE(e.find(dir.file("double.avro") + ": record 0: field 'label' is a double, expected an int, a long or a "
                                             "string"),
            std::string::npos)
      << e;
}

}  // namespace
}  // namespace frugal::record_inputs_test
