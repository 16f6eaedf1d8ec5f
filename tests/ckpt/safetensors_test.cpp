// safetensors: round trip of every dtype, the spec's header layout, and corruption.
#include "frugal/ckpt/safetensors.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "frugal/core/atomic_file.h"
#include "frugal/core/errors.h"
#include "test_util.h"

namespace frugal {
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

TEST(AtomicFile, ReplacesWholeAndLeavesNoTemporaryFile) {
  test::TempDir dir;
  write_file_atomic(dir.file("sub/f.txt"), "one");
  write_file_atomic(dir.file("sub/f.txt"), "two");
  EXPECT_EQ(read_file(dir.file("sub/f.txt")), "two");
  int entries = 0;
  for ([[maybe_unused]] auto& e : std::filesystem::directory_iterator(dir.file("sub"))) ++entries;
  EXPECT_EQ(entries, 1);
  EXPECT_THROW(write_file_atomic("/proc/nonexistent/x", "y"), IoError);
}

}  // namespace
}  // namespace frugal
