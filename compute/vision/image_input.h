// compute/vision/image_input.h: an image file (or bytes) to the vision
// tower's input (k3.md §4.4): decoded by stb_image (JPEG, PNG, BMP, GIF, PSD,
// TGA, ...) into RGB, sized to a patch grid under max_patches, resampled
// bilinearly and normalised with mean = std = 0.5. It refuses by name a file
// that is missing, not an image or too large, and never decodes one it refused.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "compute/vision/vision_tower.h"

namespace sluice {

inline constexpr uint32_t kMaxPatches = kMaxImagePatches;
// Sources above this many pixels are refused before decoding.
inline constexpr uint64_t kMaxImagePixels = uint64_t{64} << 20;
// A file this large cannot be an image under the pixel cap worth decoding.
inline constexpr uint64_t kMaxImageFileBytes = uint64_t{1} << 30;

struct DecodedImage {
  std::string name;  // the file, or what the caller called the bytes
  uint32_t width = 0, height = 0;
  std::vector<uint8_t> rgb;  // height × width × 3
};

// Reads and decodes `path`, forcing RGB. Throws Error naming the file.
DecodedImage load_image_file(const std::string& path);
// Decodes an image held in memory; `name` is what errors call it. An image
// of more than `max_pixels` is refused before it is decoded.
DecodedImage decode_image(std::span<const uint8_t> bytes, const std::string& name,
                          uint64_t max_pixels = kMaxImagePixels);

// The grid of §4.4 for a width × height source: scaled down (never up) to at
// most `max_patches`, each side rounded, at least 2 and even, then 2 off the
// larger side while still over the cap.
PatchGrid grid_for_image(uint32_t width, uint32_t height, uint32_t patch,
                         uint32_t max_patches = kMaxPatches);

// The tower's input for `image` at `grid`: [3][patch·grid.height][patch·grid.width]
// f32, resampled with half-pixel centres and edge clamp (no antialias), then
// (v/255 − 0.5)/0.5 per channel.
std::vector<float> image_pixels(const DecodedImage& image, PatchGrid grid, uint32_t patch);

}  // namespace sluice
