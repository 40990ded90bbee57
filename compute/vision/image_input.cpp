// compute/vision/image_input.cpp: decoding through stb_image (Debian's
// libstb) and the §4.4 preprocessing. The size is read from the header
// before anything is decoded, so an oversized image never allocates.
#include "compute/vision/image_input.h"

#include <stb_image.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <memory>

#include "compute/vision/bilinear.h"
#include "proto/error.h"

namespace sluice {
namespace {

constexpr float kMean = 0.5f, kStd = 0.5f;  // media_proc_cfg

}  // namespace

DecodedImage load_image_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) fail("{}: cannot open the image ({})", path, std::strerror(errno));
  const std::streamoff size = in.tellg();
  if (size < 0 || static_cast<uint64_t>(size) > kMaxImageFileBytes) {
    fail("{}: the image file is over {} bytes", path, kMaxImageFileBytes);
  }
  std::vector<uint8_t> bytes(static_cast<size_t>(size));
  in.seekg(0);
  if (!in.read(reinterpret_cast<char*>(bytes.data()), size))
    fail("{}: cannot read the image", path);
  return decode_image(bytes, path);
}

DecodedImage decode_image(std::span<const uint8_t> bytes, const std::string& name,
                          uint64_t max_pixels) {
  if (bytes.empty()) fail("{}: empty, not an image", name);
  if (bytes.size() > kMaxImageFileBytes)
    fail("{}: the image is over {} bytes", name, kMaxImageFileBytes);
  const auto length = static_cast<int>(bytes.size());
  int width = 0, height = 0, channels = 0;
  if (stbi_info_from_memory(bytes.data(), length, &width, &height, &channels) == 0) {
    fail("{}: not an image stb_image can read (JPEG, PNG, BMP, GIF, PSD, TGA, PNM, HDR, PIC): {}",
         name, stbi_failure_reason());
  }
  if (width <= 0 || height <= 0) fail("{}: the image has no pixels ({}x{})", name, width, height);
  const uint64_t pixels = uint64_t(width) * uint64_t(height);
  if (pixels > kMaxImagePixels) {
    fail("{}: {}x{} is {} pixels, over the limit of {} (64 Mi)", name, width, height, pixels,
         kMaxImagePixels);
  }
  if (pixels > max_pixels) {
    fail("{}: {}x{} is {} pixels, over the {} left for this prompt's images", name, width, height,
         pixels, max_pixels);
  }
  const std::unique_ptr<stbi_uc, void (*)(void*)> decoded(
      stbi_load_from_memory(bytes.data(), length, &width, &height, &channels, 3), stbi_image_free);
  if (!decoded) fail("{}: the image cannot be decoded: {}", name, stbi_failure_reason());
  DecodedImage image{name, static_cast<uint32_t>(width), static_cast<uint32_t>(height), {}};
  image.rgb.assign(decoded.get(), decoded.get() + pixels * 3);
  return image;
}

PatchGrid grid_for_image(uint32_t width, uint32_t height, uint32_t patch, uint32_t max_patches) {
  const double scale =
      std::min(1.0, std::sqrt(double(max_patches) * patch * patch / (double(width) * height)));
  const auto side = [&](uint32_t n) {
    const auto v = std::max<uint32_t>(2, static_cast<uint32_t>(std::lround(n * scale / patch)));
    return v - v % 2;
  };
  PatchGrid grid{side(height), side(width)};
  while (grid.patches() > max_patches) (grid.width >= grid.height ? grid.width : grid.height) -= 2;
  return grid;
}

std::vector<float> image_pixels(const DecodedImage& image, PatchGrid grid, uint32_t patch) {
  const uint32_t out_w = patch * grid.width, out_h = patch * grid.height;
  if (image.rgb.size() != size_t{image.width} * image.height * 3) {
    fail("{}: {} bytes of RGB for {}x{} pixels", image.name, image.rgb.size(), image.width,
         image.height);
  }
  std::vector<BilinearTap> columns(out_w);
  for (uint32_t x = 0; x < out_w; ++x) columns[x] = bilinear_tap(x, image.width, out_w);
  const size_t plane = size_t{out_w} * out_h;
  std::vector<float> out(3 * plane);
  const auto at = [&](uint32_t y, uint32_t x, uint32_t c) {
    return static_cast<float>(image.rgb[(size_t{y} * image.width + x) * 3 + c]);
  };
  for (uint32_t y = 0; y < out_h; ++y) {
    const BilinearTap ty = bilinear_tap(y, image.height, out_h);
    for (uint32_t x = 0; x < out_w; ++x) {
      const BilinearTap& tx = columns[x];
      for (uint32_t c = 0; c < 3; ++c) {
        const float top = (1.0f - tx.frac) * at(ty.lo, tx.lo, c) + tx.frac * at(ty.lo, tx.hi, c);
        const float bottom = (1.0f - tx.frac) * at(ty.hi, tx.lo, c) + tx.frac * at(ty.hi, tx.hi, c);
        const float v = (1.0f - ty.frac) * top + ty.frac * bottom;
        out[c * plane + size_t{y} * out_w + x] = (v / 255.0f - kMean) / kStd;
      }
    }
  }
  return out;
}

}  // namespace sluice
