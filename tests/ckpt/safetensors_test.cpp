// safetensors: round trip of every dtype, the spec's header layout, and corruption.
#include "frugal/ckpt/safetensors.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "frugal/core/atomic_file.h"
#include "frugal/core/errors.h"
#include "frugal/model/weights.h"
#include "test_util.h"

namespace frugal::safetensors_test {
namespace {

NamedTensors sample() {
  torch::manual_seed(0);
  return {{"a.weight", torch::randn({3, 4})},
          {"b", torch::randn({2, 2}).to(torch::kBFloat16)},
          {"c", torch::randn({5}).to(torch::kHalf)},
          {"d", torch::arange(6, torch::kLong).view({2, 3}).t()},  // non-contiguous
          {"e", torch::tensor({true, false})},
          {"empty", torch::zeros({0, 3})}};
}

TEST(Safetensors, RoundTripsEveryDtypeBitwise) {
  test::TempDir dir;
  save_safetensors(dir.file("m.safetensors"), sample(), {{"format", "pt"}});
  auto f = load_safetensors(dir.file("m.safetensors"));
  auto ref = sample();
  ASSERT_EQ(f.tensors.size(), ref.size());
  for (size_t i = 0; i < ref.size(); ++i) {
    EXPECT_EQ(f.tensors[i].first, ref[i].first);
    EXPECT_EQ(f.tensors[i].second.scalar_type(), ref[i].second.scalar_type());
    EXPECT_TRUE(torch::equal(f.tensors[i].second, ref[i].second)) << ref[i].first;
  }
  EXPECT_EQ(f.metadata.at("format"), "pt");
}

TEST(Safetensors, HeaderFollowsTheSpec) {
  std::string bytes = encode_safetensors({{"x", torch::ones({2}, torch::kFloat)}});
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(static_cast<unsigned char>(bytes[i])) << (8 * i);
  EXPECT_EQ(n % 8, 0u);  // data aligned to 8 bytes
  std::string header = bytes.substr(8, n);
  EXPECT_NE(header.find(R"("x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})"), std::string::npos) << header;
  EXPECT_EQ(bytes.size(), 8 + n + 8);
}

TEST(Safetensors, TruncatedFileNamesTheTensor) {
  std::string bytes = encode_safetensors(sample());
  try {
    decode_safetensors(bytes.substr(0, bytes.size() - 3), "m.safetensors");
    FAIL();
  } catch (const CheckpointError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("m.safetensors"), std::string::npos) << msg;
    EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
  }
}

TEST(Safetensors, EveryPrefixIsRejectedOrParsesCleanly) {
  // Cutting the file anywhere must never crash or read out of bounds.
  std::string bytes = encode_safetensors(sample());
  for (size_t cut = 0; cut < bytes.size(); cut += 7)
    EXPECT_THROW(decode_safetensors(bytes.substr(0, cut), "x"), CheckpointError) << cut;
}

TEST(Safetensors, GarbageHeaderIsRejected) {
  std::string bytes = encode_safetensors(sample());
  bytes[8] = '#';  // the header's opening brace
  EXPECT_THROW(decode_safetensors(bytes, "x"), CheckpointError);
  std::string huge(16, '\xff');
  EXPECT_THROW(decode_safetensors(huge, "x"), CheckpointError);
}

// A file from a header text, as a crafted file would be.
std::string with_header(const std::string& json, const std::string& data) {
  std::string h = json;
  while (h.size() % 8) h += ' ';
  std::string out;
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((h.size() >> (8 * i)) & 0xff));
  return out + h + data;
}

std::string decode_error(const std::string& bytes) {
  try {
    decode_safetensors(bytes, "crafted.safetensors");
  } catch (const CheckpointError& e) {
    return e.what();
  }
  return "(accepted)";
}

// A shape whose element count wraps around 2^64 must not match a small (here empty) data range.
TEST(Safetensors, AShapeWhoseElementCountOverflowsIsRejected) {
  const std::string msg =
      decode_error(with_header(R"({"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}})", ""));
  EXPECT_NE(msg.find("crafted.safetensors"), std::string::npos) << msg;
  EXPECT_NE(msg.find("multiply past"), std::string::npos) << msg;
  // A 0 after the overflow makes the product 0 again; the shape is still refused.
  const std::string zero =
      decode_error(with_header(R"({"w":{"dtype":"F32","shape":[4294967296,4294967296,0],"data_offsets":[0,0]}})", ""));
  EXPECT_NE(zero.find("multiply past"), std::string::npos) << zero;
  const std::string huge =
      decode_error(with_header(R"({"w":{"dtype":"F32","shape":[9223372036854775808,0],"data_offsets":[0,0]}})", ""));
  EXPECT_NE(huge.find("over the largest a tensor can have"), std::string::npos) << huge;
}

// Wrong JSON types anywhere are this file's error, named, never a raw JSON-library exception.
TEST(Safetensors, WrongTypesInTheHeaderNameTheFile) {
  for (const char* h : {R"({"w":{"dtype":"F32","shape":[1],"data_offsets":["0","4"]}})",
                        R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[-1,3]}})",
                        R"({"__metadata__":"x","w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
                        R"({"w":{"dtype":"F32","shape":"1","data_offsets":[0,4]}})"}) {
    const std::string msg = decode_error(with_header(h, std::string(4, '\0')));
    EXPECT_NE(msg.find("crafted.safetensors: not a valid safetensors file"), std::string::npos) << h << ": " << msg;
  }
}

// Many entries: the header decodes in file order however it is keyed (the header used to be
// parsed into an ordered map with a linear search per key).
TEST(Safetensors, ManyEntriesRoundTripInFileOrder) {
  NamedTensors many;
  for (int i = 0; i < 20000; ++i)
    many.emplace_back("t" + std::to_string(19999 - i), torch::full({1}, static_cast<float>(i)));
  auto f = decode_safetensors(encode_safetensors(many), "many");
  ASSERT_EQ(f.tensors.size(), many.size());
  for (size_t i = 0; i < many.size(); i += 997) {
    EXPECT_EQ(f.tensors[i].first, many[i].first);
    EXPECT_EQ(f.tensors[i].second.item<float>(), static_cast<float>(i));
  }
}

// An integer tensor under a parameter's name is not its weight: refused, not cast. Floating
// weights of another width (bf16 into fp32) load.
TEST(Safetensors, AnIntegerTensorIsNotLoadedIntoAFloatParameter) {
  at::Tensor p = torch::zeros({3});
  const NamedTensors params = {{"w", p}};
  try {
    load_parameters(
        params, decode_safetensors(encode_safetensors({{"w", torch::tensor({1, 2, 3}, torch::kInt)}}), "i.st"), "i.st");
    FAIL() << "an I32 tensor was cast into an F32 parameter";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("'w' is stored as Int but the parameter is Float"), std::string::npos)
        << e.what();
  }
  load_parameters(
      params, decode_safetensors(encode_safetensors({{"w", torch::full({3}, 2.0).to(torch::kBFloat16)}}), "b"), "b");
  EXPECT_TRUE(torch::equal(p, torch::full({3}, 2.0)));
}

}  // namespace
}  // namespace frugal::safetensors_test
