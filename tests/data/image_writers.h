// Test helpers: synthetic images, written as JPEG files with libjpeg directly (independently of
// the decoder under test; PNG files come from frugal::encode_png), and a reference decode + resize through torch.
#pragma once

#include <torch/torch.h>

#include "frugal_build_config.h"  // FRUGAL_HAVE_IMAGES
#if FRUGAL_HAVE_IMAGES
#include <jpeglib.h>
#endif

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "frugal/data/image.h"

namespace frugal::test {

// A smooth colour gradient with a per-image twist, so JPEG artefacts stay small.
inline Image gradient_image(int w, int h, int salt) {
  Image im;
  im.width = w;
  im.height = h;
  im.rgb.resize(static_cast<size_t>(w) * h * 3);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      uint8_t* p = &im.rgb[(static_cast<size_t>(y) * w + x) * 3];
      p[0] = static_cast<uint8_t>((x * 255) / std::max(1, w - 1));
      p[1] = static_cast<uint8_t>((y * 255) / std::max(1, h - 1));
      p[2] = static_cast<uint8_t>((salt * 37 + x * 3 + y * 5) % 256);
    }
  return im;
}

#if FRUGAL_HAVE_IMAGES  // the libjpeg writer and reference decoder
inline std::string encode_jpeg(const Image& im, int quality = 95) {
  jpeg_compress_struct c;
  jpeg_error_mgr err;
  c.err = jpeg_std_error(&err);
  jpeg_create_compress(&c);
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&c, &buf, &size);
  c.image_width = static_cast<JDIMENSION>(im.width);
  c.image_height = static_cast<JDIMENSION>(im.height);
  c.input_components = 3;
  c.in_color_space = JCS_RGB;
  jpeg_set_defaults(&c);
  jpeg_set_quality(&c, quality, TRUE);
  jpeg_start_compress(&c, TRUE);
  while (c.next_scanline < c.image_height) {
    JSAMPROW row = const_cast<uint8_t*>(im.rgb.data()) + static_cast<size_t>(c.next_scanline) * im.width * 3;
    jpeg_write_scanlines(&c, &row, 1);
  }
  jpeg_finish_compress(&c);
  jpeg_destroy_compress(&c);
  std::string out(reinterpret_cast<char*>(buf), size);
  std::free(buf);
  return out;
}

// Decodes with libjpeg directly (full size, no DCT scaling), as a reference.
inline Image reference_decode_jpeg(const std::string& bytes) {
  jpeg_decompress_struct c;
  jpeg_error_mgr err;
  c.err = jpeg_std_error(&err);
  jpeg_create_decompress(&c);
  jpeg_mem_src(&c, reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size());
  jpeg_read_header(&c, TRUE);
  c.out_color_space = JCS_RGB;
  jpeg_start_decompress(&c);
  Image im;
  im.width = static_cast<int>(c.output_width);
  im.height = static_cast<int>(c.output_height);
  im.rgb.resize(static_cast<size_t>(im.width) * im.height * 3);
  while (c.output_scanline < c.output_height) {
    JSAMPROW row = im.rgb.data() + static_cast<size_t>(c.output_scanline) * im.width * 3;
    jpeg_read_scanlines(&c, &row, 1);
  }
  jpeg_finish_decompress(&c);
  jpeg_destroy_decompress(&c);
  return im;
}
#endif

// Resize through torch's antialiased bilinear interpolation: (3, h, w) float in [0, 255].
inline torch::Tensor reference_resize(const Image& im, int w, int h) {
  torch::Tensor t = torch::from_blob(const_cast<uint8_t*>(im.rgb.data()), {im.height, im.width, 3}, torch::kUInt8)
                        .permute({2, 0, 1})
                        .to(torch::kFloat)
                        .unsqueeze(0);
  return at::_upsample_bilinear2d_aa(t, {h, w}, /*align_corners=*/false).squeeze(0);
}

inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f || std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size()) throw std::runtime_error("write " + path);
  std::fclose(f);
}

}  // namespace frugal::test
