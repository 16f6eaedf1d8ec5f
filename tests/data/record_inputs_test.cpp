// TFRecord framing (data/record_inputs.h): the masked CRC-32C is TensorFlow's (the CRC-32C check
// value of "123456789", masked as TensorFlow masks it); frames written here read back exactly,
// empty records included; a flipped data byte, a flipped length byte and a file cut short are each
// refused naming the file, the record and its byte offset. (Files from the reference writers:
// tests/interop/avro_tfrecord_check.py.)
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

}  // namespace
}  // namespace frugal::record_inputs_test
