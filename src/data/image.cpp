// Image decoding, resizing and augmentation; see image.h.
//
// libjpeg reports errors by calling error_exit, which by default ends the process; here it
// longjmps back into decode_jpeg, which then throws. Only trivially destructible state and the
// output vector (declared before setjmp, in the same frame) live across the jump.
#include "frugal/data/image.h"

#include <fmt/format.h>

#include "frugal_build_config.h"  // FRUGAL_HAVE_IMAGES
#if FRUGAL_HAVE_IMAGES
#include <jpeglib.h>
#include <png.h>
#endif

#include <algorithm>
#include <cmath>
#include <csetjmp>
#include <cstring>

#include "frugal/core/errors.h"
#include "frugal/core/features.h"
#include "frugal/data/rng.h"

namespace frugal {

namespace {

#if FRUGAL_HAVE_IMAGES
// Refuses a declared size over kMaxImagePixels before the decoder allocates anything for it.
void check_declared_size(uint64_t width, uint64_t height, const std::string& what, const char* format) {
  if (width * height > static_cast<uint64_t>(kMaxImagePixels))
    throw DataError(
        fmt::format("{}: the {} declares {}x{} = {} pixels, over the limit of {} pixels "
                    "(a decompression bomb, or an image to downscale before prepare)",
                    what, format, width, height, width * height, kMaxImagePixels));
}

struct JpegError {
  jpeg_error_mgr mgr;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

void jpeg_fail(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<JpegError*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  std::longjmp(err->jump, 1);
}

// Warnings (level -1) mean libjpeg met corrupt data and guessed: never train on the guess.
void jpeg_message(j_common_ptr cinfo, int level) {
  if (level < 0) jpeg_fail(cinfo);
}

Image decode_jpeg(std::string_view bytes, const std::string& what, int min_side) {
  Image out;
  jpeg_decompress_struct cinfo;
  JpegError err;
  cinfo.err = jpeg_std_error(&err.mgr);
  err.mgr.error_exit = jpeg_fail;
  err.mgr.emit_message = jpeg_message;
  err.message[0] = '\0';
  if (setjmp(err.jump)) {
    jpeg_destroy_decompress(&cinfo);
    throw DataError(fmt::format("{}: cannot decode JPEG: {}; remove or replace the file", what, err.message));
  }
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, reinterpret_cast<const unsigned char*>(bytes.data()), static_cast<unsigned long>(bytes.size()));
  jpeg_read_header(&cinfo, TRUE);
  try {
    check_declared_size(cinfo.image_width, cinfo.image_height, what, "JPEG");
  } catch (...) {
    jpeg_destroy_decompress(&cinfo);
    throw;
  }
  cinfo.out_color_space = JCS_RGB;
  if (min_side > 0) {
    // Decode at 1/8, 1/4 or 1/2 size when the image stays large enough: the DCT does the first
    // part of the downscale almost for free.
    for (unsigned denom : {8u, 4u, 2u}) {
      if ((cinfo.image_width + denom - 1) / denom >= static_cast<unsigned>(min_side) &&
          (cinfo.image_height + denom - 1) / denom >= static_cast<unsigned>(min_side)) {
        cinfo.scale_num = 1;
        cinfo.scale_denom = denom;
        break;
      }
    }
  }
  jpeg_start_decompress(&cinfo);
  out.width = static_cast<int>(cinfo.output_width);
  out.height = static_cast<int>(cinfo.output_height);
  out.rgb.resize(static_cast<size_t>(out.width) * out.height * 3);
  while (cinfo.output_scanline < cinfo.output_height) {
    JSAMPROW row = out.rgb.data() + static_cast<size_t>(cinfo.output_scanline) * out.width * 3;
    jpeg_read_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  return out;
}

Image decode_png(std::string_view bytes, const std::string& what) {
  png_image png;
  std::memset(&png, 0, sizeof png);
  png.version = PNG_IMAGE_VERSION;
  auto fail = [&] {
    const std::string msg = png.message;
    png_image_free(&png);
    throw DataError(fmt::format("{}: cannot decode PNG: {}; remove or replace the file", what, msg));
  };
  if (!png_image_begin_read_from_memory(&png, bytes.data(), bytes.size())) fail();
  try {
    check_declared_size(png.width, png.height, what, "PNG");
    // Deflate expands at most 1032:1 and a PNG row holds at least one filter byte plus one bit
    // per pixel: a file too small to hold its declared rows is refused before allocating them.
    const uint64_t min_raw = static_cast<uint64_t>(png.height) * (1 + (static_cast<uint64_t>(png.width) + 7) / 8);
    if (min_raw > 1032 * static_cast<uint64_t>(bytes.size()) + 4096)
      throw DataError(
          fmt::format("{}: the PNG declares {}x{} pixels but its {} bytes cannot hold them "
                      "(truncated or crafted file); remove or replace the file",
                      what, png.width, png.height, bytes.size()));
  } catch (...) {
    png_image_free(&png);
    throw;
  }
  png.format = PNG_FORMAT_RGB;
  Image out;
  out.width = static_cast<int>(png.width);
  out.height = static_cast<int>(png.height);
  out.rgb.assign(PNG_IMAGE_SIZE(png), 0);  // zeros: alpha is composited onto black
  if (!png_image_finish_read(&png, nullptr, out.rgb.data(), 0, nullptr)) fail();
  png_image_free(&png);
  return out;
}
#endif  // FRUGAL_HAVE_IMAGES

// One axis of the antialiased bilinear filter (PIL's precompute_coeffs; torch's
// _compute_indices_weights_aa): output i reads inputs [first[i], first[i] + count[i]).
struct Taps {
  std::vector<int> first, count;
  std::vector<float> weights;  // `support` weights per output, zero-padded
  int support = 0;
};

Taps make_taps(int in, int out) {
  const double scale = static_cast<double>(in) / out;
  const double half = scale >= 1.0 ? scale : 1.0;  // the triangle's half-width in input pixels
  const double inv = scale >= 1.0 ? 1.0 / scale : 1.0;
  Taps t;
  t.support = static_cast<int>(std::ceil(half)) * 2 + 1;
  t.first.resize(out);
  t.count.resize(out);
  t.weights.assign(static_cast<size_t>(out) * t.support, 0.0f);
  for (int i = 0; i < out; ++i) {
    const double center = scale * (i + 0.5);
    const int lo = std::max(static_cast<int>(center - half + 0.5), 0);
    const int hi = std::min(static_cast<int>(center + half + 0.5), in);
    double total = 0;
    std::vector<double> w(static_cast<size_t>(hi - lo));
    for (int j = lo; j < hi; ++j) {
      const double x = (j - center + 0.5) * inv;
      w[j - lo] = std::max(0.0, 1.0 - std::abs(x));
      total += w[j - lo];
    }
    t.first[i] = lo;
    t.count[i] = hi - lo;
    for (int j = 0; j < hi - lo; ++j)
      t.weights[static_cast<size_t>(i) * t.support + j] = static_cast<float>(total > 0 ? w[j] / total : 0);
  }
  return t;
}

uint8_t to_byte(float v) { return static_cast<uint8_t>(std::clamp(std::nearbyint(v), 0.0f, 255.0f)); }

// A SplitMix64 stream: portable, reproducible draws for the augmentations.
class Draws {
 public:
  explicit Draws(uint64_t seed) : state_(seed) {}
  double uniform() { return static_cast<double>(splitmix64(state_++) >> 11) * 0x1p-53; }  // [0, 1)
  int integer(int n) { return std::min(static_cast<int>(uniform() * (n + 1)), n); }       // [0, n]

 private:
  uint64_t state_;
};

}  // namespace

Image decode_image(std::string_view bytes, const std::string& what, int min_side) {
  require_feature("images", fmt::format("decoding the image {}", what));
#if FRUGAL_HAVE_IMAGES
  const auto* b = reinterpret_cast<const uint8_t*>(bytes.data());
  if (bytes.size() >= 3 && b[0] == 0xff && b[1] == 0xd8 && b[2] == 0xff) return decode_jpeg(bytes, what, min_side);
  if (bytes.size() >= 8 && std::memcmp(b, "\x89PNG\r\n\x1a\n", 8) == 0) return decode_png(bytes, what);
#endif
  throw DataError(
      fmt::format("{}: not a JPEG or PNG image (unknown signature, {} bytes); remove the "
                  "file or convert it",
                  what, bytes.size()));
}

Image resize_image(const Image& im, int width, int height) {
  if (im.width == width && im.height == height) return im;
  const Taps tx = make_taps(im.width, width), ty = make_taps(im.height, height);
  // Horizontal pass into float rows, then the vertical pass: separable, as PIL and torch do.
  std::vector<float> mid(static_cast<size_t>(im.height) * width * 3);
  for (int y = 0; y < im.height; ++y) {
    const uint8_t* row = im.rgb.data() + static_cast<size_t>(y) * im.width * 3;
    float* o = mid.data() + static_cast<size_t>(y) * width * 3;
    for (int x = 0; x < width; ++x) {
      const float* w = tx.weights.data() + static_cast<size_t>(x) * tx.support;
      float acc[3] = {0, 0, 0};
      for (int k = 0; k < tx.count[x]; ++k) {
        const uint8_t* p = row + (tx.first[x] + k) * 3;
        for (int c = 0; c < 3; ++c) acc[c] += w[k] * p[c];
      }
      for (int c = 0; c < 3; ++c) o[x * 3 + c] = acc[c];
    }
  }
  Image out;
  out.width = width;
  out.height = height;
  out.rgb.resize(static_cast<size_t>(width) * height * 3);
  const size_t stride = static_cast<size_t>(width) * 3;
  for (int y = 0; y < height; ++y) {
    const float* w = ty.weights.data() + static_cast<size_t>(y) * ty.support;
    uint8_t* o = out.rgb.data() + y * stride;
    for (size_t i = 0; i < stride; ++i) {
      float acc = 0;
      for (int k = 0; k < ty.count[y]; ++k) acc += w[k] * mid[(ty.first[y] + k) * stride + i];
      o[i] = to_byte(acc);
    }
  }
  return out;
}

Image augment_image(const Image& im, uint64_t seed, const AugmentOptions& o) {
  Draws d(seed);
  const int dx = o.pad > 0 ? d.integer(2 * o.pad) - o.pad : 0;
  const int dy = o.pad > 0 ? d.integer(2 * o.pad) - o.pad : 0;
  const bool flip = d.uniform() < 0.5;
  const float brightness = static_cast<float>(1 + o.jitter * (2 * d.uniform() - 1));
  const float contrast = static_cast<float>(1 + o.jitter * (2 * d.uniform() - 1));
  const float saturation = static_cast<float>(1 + o.jitter * (2 * d.uniform() - 1));
  const int w = im.width, h = im.height;
  std::vector<float> px(static_cast<size_t>(w) * h * 3, 0.0f);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      const int sx = (flip ? w - 1 - x : x) + dx, sy = y + dy;  // crop offset, then the flip
      if (sx < 0 || sx >= w || sy < 0 || sy >= h) continue;     // the black padding
      for (int c = 0; c < 3; ++c)
        px[(static_cast<size_t>(y) * w + x) * 3 + c] = im.rgb[(static_cast<size_t>(sy) * w + sx) * 3 + c] * brightness;
    }
  auto grey = [&](size_t i) { return 0.299f * px[i] + 0.587f * px[i + 1] + 0.114f * px[i + 2]; };
  double mean = 0;
  for (size_t i = 0; i < px.size(); i += 3) mean += grey(i);
  const float m = static_cast<float>(mean / (static_cast<double>(w) * h));
  for (auto& v : px) v = (v - m) * contrast + m;
  for (size_t i = 0; i < px.size(); i += 3) {
    const float g = grey(i);
    for (int c = 0; c < 3; ++c) px[i + c] = g + (px[i + c] - g) * saturation;
  }
  Image out;
  out.width = w;
  out.height = h;
  out.rgb.resize(px.size());
  for (size_t i = 0; i < px.size(); ++i) out.rgb[i] = to_byte(px[i]);
  return out;
}

std::vector<uint8_t> to_chw(const Image& im) {
  const size_t plane = static_cast<size_t>(im.width) * im.height;
  std::vector<uint8_t> out(plane * 3);
  for (size_t p = 0; p < plane; ++p)
    for (int c = 0; c < 3; ++c) out[c * plane + p] = im.rgb[p * 3 + c];
  return out;
}

std::string encode_png(const Image& image) {
  if (image.width <= 0 || image.height <= 0 ||
      image.rgb.size() != static_cast<size_t>(image.width) * static_cast<size_t>(image.height) * 3)
    throw DataError(fmt::format(
        "encode_png: expected a non-empty {}x{} RGB image of {} bytes, got {} bytes", image.width, image.height,
        static_cast<size_t>(std::max(0, image.width)) * static_cast<size_t>(std::max(0, image.height)) * 3,
        image.rgb.size()));
  require_feature("images", "writing a PNG image");
#if FRUGAL_HAVE_IMAGES
  png_image png;
  std::memset(&png, 0, sizeof png);
  png.version = PNG_IMAGE_VERSION;
  png.width = static_cast<png_uint_32>(image.width);
  png.height = static_cast<png_uint_32>(image.height);
  png.format = PNG_FORMAT_RGB;
  png_alloc_size_t size = 0;
  std::string out;
  if (png_image_write_to_memory(&png, nullptr, &size, 0, image.rgb.data(), 0, nullptr)) {
    out.resize(size);
    if (png_image_write_to_memory(&png, out.data(), &size, 0, image.rgb.data(), 0, nullptr)) {
      out.resize(size);
      return out;
    }
  }
  const std::string msg = png.message;
  png_image_free(&png);
  throw DataError("encode_png: libpng failed: " + msg);
#else
  return {};
#endif
}

}  // namespace frugal
