// tests/compute/vision/image_input_test.cpp: the preprocessing of k3.md §4.4
// against closed forms: the grid rule (896×896 → 32×32 = 256 tokens, 354×354
// → 24×24 = 144, long thin images capped), solid colours normalised with mean
// = std = 0.5, a resample that keeps a horizontal ramp linear, forced RGB for
// a grey PNG, and refusals that name the image: not an image, empty, a header
// claiming more than 64 Mi pixels (refused before decoding).
#include "compute/vision/image_input.h"

#include <doctest/doctest.h>
#include <stb_image_write.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "proto/error.h"

using namespace sluice;

namespace {

std::string error_of(const std::vector<uint8_t>& bytes, const std::string& name) {
  try {
    decode_image(bytes, name);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

void append(std::vector<uint8_t>& out, const void* data, int size) {
  const auto* bytes = static_cast<const uint8_t*>(data);
  out.insert(out.end(), bytes, bytes + size);
}

std::vector<uint8_t> encode_png(const std::vector<uint8_t>& pixels, int width, int height,
                                int channels) {
  std::vector<uint8_t> out;
  stbi_write_png_to_func(
      [](void* context, void* data, int size) {
        append(*static_cast<std::vector<uint8_t>*>(context), data, size);
      },
      &out, width, height, channels, pixels.data(), width * channels);
  return out;
}

}  // namespace

TEST_CASE("the grid rule of §4.4") {
  const PatchGrid big = grid_for_image(896, 896, 14);
  CHECK(big.width == 32);
  CHECK(big.height == 32);
  CHECK(big.tokens() == 256);
  const PatchGrid mid = grid_for_image(354, 354, 14);
  CHECK(mid.width == 24);
  CHECK(mid.height == 24);
  CHECK(mid.tokens() == 144);
  // Small images are never scaled up past their size, but a side has at least 2 patches.
  const PatchGrid tiny = grid_for_image(20, 10, 14);
  CHECK(tiny.width == 2);
  CHECK(tiny.height == 2);
  // 10000×20: 714 × 2 patches at scale 1 is over the cap, so the long side loses 2 at a time.
  const PatchGrid thin = grid_for_image(10000, 20, 14);
  CHECK(thin.height == 2);
  CHECK(thin.width == 512);
  CHECK(thin.patches() == 1024);
  for (uint32_t w : {15u, 333u, 1000u, 4000u}) {
    for (uint32_t h : {17u, 500u, 3000u}) {
      const PatchGrid g = grid_for_image(w, h, 14);
      CAPTURE(w);
      CAPTURE(h);
      CHECK(g.patches() <= kMaxPatches);
      CHECK(g.width % 2 == 0);
      CHECK(g.height % 2 == 0);
      CHECK(g.width >= 2);
      CHECK(g.height >= 2);
    }
  }
}

TEST_CASE("solid colours normalise to (v/255 - 0.5)/0.5 at every pixel, resampled or not") {
  const uint8_t colour[3] = {0, 51, 255};
  std::vector<uint8_t> rgb;
  for (int i = 0; i < 40 * 30; ++i) rgb.insert(rgb.end(), colour, colour + 3);
  const DecodedImage image = decode_image(encode_png(rgb, 40, 30, 3), "solid.png");
  CHECK(image.width == 40);
  CHECK(image.height == 30);
  const PatchGrid grid = grid_for_image(image.width, image.height, 14);
  const std::vector<float> pixels = image_pixels(image, grid, 14);
  REQUIRE(pixels.size() == 3u * 14 * grid.width * 14 * grid.height);
  const size_t plane = pixels.size() / 3;
  for (int c = 0; c < 3; ++c) {
    const float expected = (colour[c] / 255.0f - 0.5f) / 0.5f;
    for (size_t i = 0; i < plane; i += 7)
      REQUIRE(pixels[c * plane + i] == doctest::Approx(expected).epsilon(1e-6));
  }
}

TEST_CASE("a horizontal ramp stays a ramp through the half-pixel resample") {
  // 56 wide, 28 high → a 4×2 grid, no resize: every output pixel is its source.
  std::vector<uint8_t> grey(56 * 28);
  for (int y = 0; y < 28; ++y)
    for (int x = 0; x < 56; ++x) grey[y * 56 + x] = static_cast<uint8_t>(x * 4);
  const DecodedImage image = decode_image(encode_png(grey, 56, 28, 1), "ramp.png");
  REQUIRE(image.rgb.size() == 56u * 28 * 3);  // forced RGB
  CHECK(image.rgb[3 * 5] == 20);
  CHECK(image.rgb[3 * 5 + 2] == 20);
  const std::vector<float> same = image_pixels(image, {2, 4}, 14);
  for (int x = 0; x < 56; ++x)
    CHECK(same[10 * 56 + x] == doctest::Approx((x * 4 / 255.0f - 0.5f) / 0.5f));
  // Halved to 28 wide: output x reads source 2x + 0.5, the mean of two neighbours.
  const std::vector<float> half = image_pixels(image, {2, 2}, 14);
  for (int x = 0; x < 28; ++x) {
    const float source = (2 * x + 0.5f) * 4;
    CHECK(half[28 * 3 + x] == doctest::Approx((source / 255.0f - 0.5f) / 0.5f).epsilon(1e-5));
  }
}

TEST_CASE("images that cannot be taken are refused naming them") {
  CHECK(doctest::String(error_of({'h', 'e', 'l', 'l', 'o'}, "notes.png").c_str()) ==
        doctest::Contains("notes.png: not an image"));
  CHECK(doctest::String(error_of({}, "empty.jpg").c_str()) == doctest::Contains("empty.jpg"));
  // A BMP header claiming 8193 × 8193 pixels with no pixel data: refused by size, never decoded.
  std::vector<uint8_t> header = {'B', 'M'};
  const auto u32 = [&](uint32_t v) { append(header, &v, 4); };
  const auto u16 = [&](uint16_t v) { append(header, &v, 2); };
  u32(54), u16(0), u16(0), u32(54), u32(40), u32(8193), u32(8193), u16(1), u16(24);
  for (int i = 0; i < 6; ++i) u32(0);
  const std::string big = error_of(header, "huge.bmp");
  CHECK(doctest::String(big.c_str()) == doctest::Contains("huge.bmp: 8193x8193"));
  CHECK(doctest::String(big.c_str()) == doctest::Contains("64 Mi"));
  try {
    load_image_file("/nonexistent-dir/photo.jpg");
    FAIL("a missing file was read");
  } catch (const Error& e) {
    CHECK(doctest::String(e.what()) ==
          doctest::Contains("/nonexistent-dir/photo.jpg: cannot open"));
  }
}
