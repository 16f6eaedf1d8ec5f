// Image decoding, resizing and augmentation: PNG decodes losslessly, JPEG decodes as libjpeg
// does, the resize equals torch's antialiased bilinear interpolation, corrupt files are errors
// that name the file, and augmentations are a pure function of the seed.
#include "frugal/data/image.h"

#include <gtest/gtest.h>

#include "frugal/core/errors.h"
#include "image_writers.h"

#if FRUGAL_HAVE_IMAGES
namespace frugal::image_test {
namespace {

using test::encode_jpeg;
using test::gradient_image;

TEST(Image, PngDecodesLosslessly) {
  const Image im = gradient_image(23, 17, 3);
  const Image back = decode_image(encode_png(im), "x.png");
  EXPECT_EQ(back.width, 23);
  EXPECT_EQ(back.height, 17);
  EXPECT_EQ(back.rgb, im.rgb);
  Image bad = im;
  bad.rgb.pop_back();  // one byte short of 23 x 17 x 3
  try {
    encode_png(bad);
    FAIL() << "encode_png accepted a short pixel buffer";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("23x17 RGB image of 1173 bytes, got 1172"), std::string::npos) << e.what();
  }
}

TEST(Image, JpegDecodesLikeLibjpegAndCloseToTheOriginal) {
  const Image im = gradient_image(40, 30, 1);
  const std::string bytes = encode_jpeg(im, 95);
  const Image back = decode_image(bytes, "x.jpg");
  EXPECT_EQ(back.rgb, test::reference_decode_jpeg(bytes).rgb);  // min_side 0: no DCT scaling
  double err = 0;
  for (size_t i = 0; i < im.rgb.size(); ++i) err += std::abs(im.rgb[i] - back.rgb[i]);
  EXPECT_LT(err / static_cast<double>(im.rgb.size()), 4.0);  // quality 95 on a smooth gradient
}

TEST(Image, JpegDctScalingKeepsAtLeastTheRequestedSide) {
  const std::string bytes = encode_jpeg(gradient_image(200, 120, 2));
  const Image small = decode_image(bytes, "x.jpg", 32);
  EXPECT_EQ(small.width, 100);  // 1/2 scale: 1/4 would give 30 rows, under 32
  EXPECT_EQ(small.height, 60);
  const Image big = decode_image(bytes, "x.jpg", 0);
  EXPECT_EQ(big.width, 200);
  EXPECT_EQ(decode_image(bytes, "x.jpg", 15).width, 25);  // 1/8 scale
}

TEST(Image, ResizeMatchesTorchAntialiasedBilinear) {
  const Image im = gradient_image(50, 37, 5);
  for (auto [w, h] : {std::pair{32, 32}, std::pair{13, 20}, std::pair{64, 48}, std::pair{50, 10}}) {
    const Image out = resize_image(im, w, h);
    const torch::Tensor ref = test::reference_resize(im, w, h);  // (3, h, w)
    ASSERT_EQ(out.width, w);
    ASSERT_EQ(out.height, h);
    float worst = 0;
    for (int y = 0; y < h; ++y)
      for (int x = 0; x < w; ++x)
        for (int c = 0; c < 3; ++c)
          worst =
              std::max(worst, std::abs(out.rgb[(static_cast<size_t>(y) * w + x) * 3 + c] - ref[c][y][x].item<float>()));
    // Ours rounds to uint8 (0.5) and accumulates in a different order (float rounding).
    EXPECT_LE(worst, 0.51f) << w << "x" << h;
  }
}

TEST(Image, CorruptFilesAreErrorsThatNameTheFile) {
  const std::string jpeg = encode_jpeg(gradient_image(64, 64, 4));
  const std::string png = encode_png(gradient_image(64, 64, 4));
  auto message = [](const std::string& bytes, const std::string& what) {
    try {
      decode_image(bytes, what);
    } catch (const DataError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(
      message(jpeg.substr(0, jpeg.size() / 2), "cats/truncated.jpg").find("cats/truncated.jpg: cannot decode JPEG"),
      std::string::npos);
  EXPECT_NE(message(png.substr(0, png.size() / 2), "dogs/truncated.png").find("dogs/truncated.png: cannot decode PNG"),
            std::string::npos);
  EXPECT_NE(message("hello, not an image", "x/readme.jpg").find("x/readme.jpg: not a JPEG or PNG"), std::string::npos);
  std::string flipped = jpeg;
  for (size_t i = jpeg.size() / 3; i < jpeg.size() / 3 + 64; ++i) flipped[i] = static_cast<char>(~flipped[i]);
  EXPECT_NE(message(flipped, "cats/flipped.jpg").find("cats/flipped.jpg"), std::string::npos);
}

// Rewrites the width and height a PNG's IHDR chunk declares (and its CRC, which libpng checks).
std::string png_declaring(std::string png, uint32_t width, uint32_t height) {
  auto put32 = [&](size_t at, uint32_t v) {
    for (int i = 0; i < 4; ++i) png[at + i] = static_cast<char>(v >> (24 - 8 * i));
  };
  put32(16, width);
  put32(20, height);
  uint32_t crc = 0xffffffffu;  // CRC-32 of the chunk type and data, bytes [12, 29)
  for (size_t i = 12; i < 29; ++i) {
    crc ^= static_cast<uint8_t>(png[i]);
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0xedb88320u & (0u - (crc & 1u)));
  }
  put32(29, ~crc);
  return png;
}

// Rewrites the height and width in a baseline JPEG's SOF0 segment.
std::string jpeg_declaring(std::string jpeg, uint16_t width, uint16_t height) {
  const size_t sof = jpeg.find("\xff\xc0");
  EXPECT_NE(sof, std::string::npos);
  jpeg[sof + 5] = static_cast<char>(height >> 8);
  jpeg[sof + 6] = static_cast<char>(height & 0xff);
  jpeg[sof + 7] = static_cast<char>(width >> 8);
  jpeg[sof + 8] = static_cast<char>(width & 0xff);
  return jpeg;
}

std::string decode_error(const std::string& bytes, const std::string& what) {
  try {
    decode_image(bytes, what);
  } catch (const DataError& e) {
    return e.what();
  }
  return "no error";
}

// A 1 KB PNG declaring 50000x50000 once cost 3.3 GB before failing: the declared size is now
// checked against kMaxImagePixels and against what the file's bytes can hold, before allocating.
TEST(Image, DeclaredSizesAreCheckedBeforeAnyPixelIsAllocated) {
  const std::string png = encode_png(gradient_image(8, 8, 1));
  ASSERT_EQ(png.substr(12, 4), "IHDR");
  EXPECT_EQ(decode_image(png_declaring(png, 8, 8), "same.png").rgb,
            decode_image(png, "x.png").rgb);  // the CRC is right
  const std::string bomb = decode_error(png_declaring(png, 50000, 50000), "bomb.png");
  EXPECT_NE(bomb.find("bomb.png: the PNG declares 50000x50000 = 2500000000 pixels, over the limit"), std::string::npos)
      << bomb;
  // Under the pixel limit, but no 100-byte file holds 8000 rows of 8000 pixels.
  const std::string lie = decode_error(png_declaring(png, 8000, 8000), "lie.png");
  EXPECT_NE(lie.find("lie.png: the PNG declares 8000x8000 pixels but its"), std::string::npos) << lie;

  const std::string jpeg = encode_jpeg(gradient_image(16, 16, 2));
  const std::string jbomb = decode_error(jpeg_declaring(jpeg, 60000, 60000), "bomb.jpg");
  EXPECT_NE(jbomb.find("bomb.jpg: the JPEG declares 60000x60000 = 3600000000 pixels, over the limit"),
            std::string::npos)
      << jbomb;
}

TEST(Image, AugmentationIsAPureFunctionOfTheSeed) {
  const Image im = gradient_image(32, 32, 6);
  const AugmentOptions o;
  EXPECT_EQ(augment_image(im, 11, o).rgb, augment_image(im, 11, o).rgb);
  int differ = 0;
  for (uint64_t s = 0; s < 8; ++s) differ += augment_image(im, s, o).rgb != augment_image(im, s + 100, o).rgb;
  EXPECT_GE(differ, 7);
}

TEST(Image, FlipOnlyAugmentationIsTheImageOrItsMirror) {
  const Image im = gradient_image(16, 8, 7);
  Image mirror = im;
  for (int y = 0; y < 8; ++y)
    for (int x = 0; x < 16; ++x)
      for (int c = 0; c < 3; ++c) mirror.rgb[(y * 16 + x) * 3 + c] = im.rgb[(y * 16 + 15 - x) * 3 + c];
  int flips = 0;
  for (uint64_t s = 0; s < 40; ++s) {
    const Image a = augment_image(im, s, {0, 0.0});
    ASSERT_TRUE(a.rgb == im.rgb || a.rgb == mirror.rgb);
    flips += a.rgb == mirror.rgb;
  }
  EXPECT_GT(flips, 5);  // p = 1/2 over 40 draws
  EXPECT_LT(flips, 35);
}

TEST(Image, ChwPutsEachChannelInItsOwnPlane) {
  const Image im = gradient_image(3, 2, 8);
  const std::vector<uint8_t> chw = to_chw(im);
  for (int c = 0; c < 3; ++c)
    for (int p = 0; p < 6; ++p) EXPECT_EQ(chw[c * 6 + p], im.rgb[p * 3 + c]);
}

}  // namespace
}  // namespace frugal::image_test

#else
TEST(Image, NeedsTheImagesFeature) {
  GTEST_SKIP() << "this build has no images (frugal doctor lists the features of a build)";
}
#endif  // FRUGAL_HAVE_IMAGES
