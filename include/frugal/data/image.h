// Images for `frugal prepare --format images|tar`: decoding JPEG (libjpeg-turbo) and PNG (libpng)
// into 8-bit RGB, resizing once to the training size, and the seeded offline augmentations
// (random crop with padding, horizontal flip, colour jitter) stored at prepare time.
//
// Everything here is a pure function of its inputs: the same bytes, size and seed give the same
// pixels on any machine and for any thread count (the augmentation draws come from SplitMix64,
// never from std:: distributions, whose output differs between standard libraries).
// Thread-safe: functions share no state.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace frugal {

// An 8-bit RGB image, row-major, channels interleaved: pixel (y, x) channel c is at
// rgb[(y * width + x) * 3 + c].
struct Image {
  int width = 0, height = 0;
  std::vector<uint8_t> rgb;
};

// The most pixels an image may declare (PIL's decompression-bomb error threshold): at 3 bytes
// per pixel a decode holds at most about 540 MB. Larger declared sizes are refused from the
// header, before any pixel memory is allocated.
inline constexpr int64_t kMaxImagePixels = 178'956'970;

// Decodes a JPEG or PNG held in memory (recognised by its signature, not by the file name).
// Grayscale is replicated to RGB; a PNG's alpha is composited on black; 16-bit PNGs are reduced
// to 8 bits. `min_side`, when positive, lets the JPEG decoder scale down by 1/2, 1/4 or 1/8 in the
// DCT (much faster for large photos) as long as both sides stay at least `min_side` pixels.
// Throws DataError naming `what` (the file, or archive:member) for anything that is not a
// complete, valid JPEG or PNG, including truncated files and libjpeg's "corrupt data" warnings,
// for a declared size over kMaxImagePixels, and for a PNG whose file is too small to hold the
// rows it declares (deflate expands at most 1032:1).
Image decode_image(std::string_view bytes, const std::string& what, int min_side = 0);

// Resizes to width x height with an antialiased bilinear (triangle) filter whose support widens
// with the downscale factor, the same filter as PIL's BILINEAR and torch's
// interpolate(mode="bilinear", antialias=True, align_corners=False). Aspect ratio is not kept.
Image resize_image(const Image& image, int width, int height);

// The offline augmentations, in this order, with draws from a stream seeded by `seed`:
//  - random crop with padding: the image is padded with `pad` black pixels on each side and a
//    window of the original size is cut at a uniform offset in [0, 2 * pad] per axis;
//  - horizontal flip with probability 1/2;
//  - colour jitter: brightness, contrast and saturation factors each uniform in
//    [1 - jitter, 1 + jitter], applied in that order (contrast and saturation around the
//    image's mean grey and each pixel's grey, grey = 0.299 R + 0.587 G + 0.114 B), then rounded
//    and clamped to [0, 255].
struct AugmentOptions {
  int pad = 4;          // pixels of padding for the random crop; 0 = no crop
  double jitter = 0.2;  // colour jitter strength; 0 = none
};
Image augment_image(const Image& image, uint64_t seed, const AugmentOptions& options);

// The image as a channel-major (C, H, W) uint8 tensor's bytes: 3 * height * width bytes.
std::vector<uint8_t> to_chw(const Image& image);

// The image as PNG file bytes (libpng, 8-bit RGB, lossless): for writing image folders that
// `frugal prepare --format images` reads, or for looking at stored samples. Throws DataError if
// the image is empty or libpng fails.
std::string encode_png(const Image& image);

}  // namespace frugal
