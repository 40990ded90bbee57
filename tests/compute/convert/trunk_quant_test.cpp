// tests/compute/convert/trunk_quant_test.cpp: q8g128 / q6g128 / q4g128
// against the FORMAT.md formulas written out here independently: byte layout,
// nibble and bit order, padding, round-half-even, and the error on Gaussian
// weights.
#include "compute/convert/trunk_quant.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <tuple>

#include <doctest/doctest.h>

#include "proto/f16.h"
#include "tests/compute/convert/test_util.h"

namespace sluice::convert {
namespace {

std::vector<float> gaussian(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  std::vector<float> w(n);
  for (float& x : w) x = normal(rng);
  return w;
}

double relative_error(const std::vector<float>& w, const std::vector<float>& w_hat) {
  double e = 0, n = 0;
  for (size_t i = 0; i < w.size(); ++i) {
    e += (double{w[i]} - w_hat[i]) * (double{w[i]} - w_hat[i]);
    n += double{w[i]} * w[i];
  }
  return std::sqrt(e / n);
}

GroupQuantized quantized(TrunkFormat format, const std::vector<float>& w, size_t rows, size_t cols,
                         ErrorSums* sums = nullptr) {
  GroupQuantized q = allocate_grouped(format, rows, cols);
  const ErrorSums e = quantize_grouped_rows(format, w.data(), cols, 0, rows, q, "t");
  if (sums != nullptr) *sums = e;
  return q;
}

TEST_CASE("Gaussian weights: q8 under 1%, q6 about 3%, q4 about 12%") {
  const size_t rows = 64, cols = 1000;
  const auto w = gaussian(rows * cols, 1);
  ErrorSums e8, e6, e4;
  const GroupQuantized q8 = quantized(TrunkFormat::kQ8G128, w, rows, cols, &e8);
  const GroupQuantized q6 = quantized(TrunkFormat::kQ6G128, w, rows, cols, &e6);
  const GroupQuantized q4 = quantized(TrunkFormat::kQ4G128, w, rows, cols, &e4);
  const double r8 = relative_error(w, dequantize_grouped(TrunkFormat::kQ8G128, q8, rows, cols));
  const double r6 = relative_error(w, dequantize_grouped(TrunkFormat::kQ6G128, q6, rows, cols));
  const double r4 = relative_error(w, dequantize_grouped(TrunkFormat::kQ4G128, q4, rows, cols));
  MESSAGE("relative error q8g128 " << r8 << ", q6g128 " << r6 << ", q4g128 " << r4);
  CHECK(r8 < 0.01);
  CHECK(r6 > 0.02);  // 4.4 times q8's step, a quarter of q4's
  CHECK(r6 < 0.04);
  CHECK(r4 > 0.08);
  CHECK(r4 < 0.16);
  CHECK(e8.relative() == doctest::Approx(r8).epsilon(1e-6));
  CHECK(e6.relative() == doctest::Approx(r6).epsilon(1e-6));
  CHECK(e4.relative() == doctest::Approx(r4).epsilon(1e-6));
}

TEST_CASE("q8g128 bytes follow the formula, padding is zero") {
  const size_t rows = 3, cols = 200;  // two groups, the second one padded
  auto w = gaussian(rows * cols, 2);
  std::fill(w.begin() + 2 * cols, w.end(), 0.0f);  // an all-zero row
  const GroupQuantized q = quantized(TrunkFormat::kQ8G128, w, rows, cols);
  REQUIRE(q.data.size() == rows * 256);
  REQUIRE(q.scales.size() == rows * 2);
  for (size_t r = 0; r < rows; ++r) {
    for (size_t g = 0; g < 2; ++g) {
      float amax = 0;
      for (size_t c = g * 128; c < std::min(cols, g * 128 + 128); ++c) amax = std::max(amax, std::fabs(w[r * cols + c]));
      const uint16_t scale = f32_to_f16(amax / 127.0f);
      CHECK(q.scales[r * 2 + g] == scale);
      const float s = f16_to_f32(scale);
      for (size_t c = g * 128; c < g * 128 + 128; ++c) {
        int expected = 0;
        if (c < cols && s != 0.0f) expected = static_cast<int>(std::clamp(std::nearbyint(w[r * cols + c] / s), -127.0f, 127.0f));
        REQUIRE(static_cast<int8_t>(q.data[r * 256 + c]) == expected);
      }
    }
  }
  CHECK(q.scales[4] == 0);
  const auto back = dequantize_grouped(TrunkFormat::kQ8G128, q, rows, cols);
  for (size_t c = 0; c < cols; ++c) {
    CHECK(back[c] == static_cast<float>(static_cast<int8_t>(q.data[c])) * f16_to_f32(q.scales[c / 128]));
  }
}

TEST_CASE("q4g128 packs element 2i low and 2i+1 high, padding nibble 8") {
  const size_t cols = 130;
  std::vector<float> w(cols, 0.0f);
  w[0] = 7.0f;   // scale = 7/7 = 1 exactly
  w[1] = -8.0f;  // clamps to -8 (amax is 8 → scale 8/7; see below)
  w[2] = 2.5f;
  w[3] = 3.5f;
  w[128] = 0.5f;
  const GroupQuantized q = quantized(TrunkFormat::kQ4G128, w, 1, cols);
  REQUIRE(q.data.size() == 128);
  const float s = f16_to_f32(f32_to_f16(8.0f / 7.0f));
  CHECK(q.scales[0] == f32_to_f16(8.0f / 7.0f));
  auto nibble = [&](size_t i) { return (q.data[i / 2] >> (4 * (i % 2))) & 0xf; };
  for (size_t i = 0; i < 4; ++i) {
    CHECK(nibble(i) == static_cast<int>(std::clamp(std::nearbyint(w[i] / s), -8.0f, 7.0f)) + 8);
  }
  CHECK(q.data[0] == (nibble(0) | nibble(1) << 4));
  // Second group: amax 0.5 → scale 0.5/7; 0.5 → 7; the rest are padding.
  CHECK(nibble(128) == 15);
  for (size_t i = 130; i < 256; ++i) REQUIRE(nibble(i) == 8);
}

TEST_CASE("q6g128: low nibbles of columns i and 16 + i share byte i, the top bits of j, j+8, j+16, j+24 byte 16 + j") {
  const size_t rows = 2, cols = 200;  // two groups, the second one padded
  const auto w = gaussian(rows * cols, 3);
  const GroupQuantized q = quantized(TrunkFormat::kQ6G128, w, rows, cols);
  REQUIRE(q.data.size() == rows * 256 / 32 * 24);
  REQUIRE(q.scales.size() == rows * 2);
  for (size_t r = 0; r < rows; ++r) {
    const uint8_t* row = q.data.data() + r * 192;
    for (size_t c = 0; c < 256; ++c) {
      const uint8_t* block = row + c / 32 * 24;
      const size_t p = c % 32;
      const int low = p < 16 ? block[p] & 0x0f : block[p - 16] >> 4;
      const int high = (block[16 + p % 8] >> (2 * (p / 8))) & 0x03;
      const int stored = (low | high << 4) - 32;
      int expected = 0;
      if (c < cols) {
        float amax = 0;
        for (size_t k = c / 128 * 128; k < std::min(cols, c / 128 * 128 + 128); ++k)
          amax = std::max(amax, std::fabs(w[r * cols + k]));
        const uint16_t scale = f32_to_f16(amax / 31.0f);
        REQUIRE(q.scales[r * 2 + c / 128] == scale);
        expected = static_cast<int>(std::clamp(std::nearbyint(w[r * cols + c] / f16_to_f32(scale)), -32.0f, 31.0f));
      }
      REQUIRE(stored == expected);
    }
  }
  const auto back = dequantize_grouped(TrunkFormat::kQ6G128, q, rows, cols);
  CHECK(back[5] == static_cast<float>(((q.data[5] & 0x0f) | ((q.data[21] >> 0) & 3) << 4) - 32) * f16_to_f32(q.scales[0]));
}

TEST_CASE("q6g128 and q4g128 store every value of their range without touching a neighbour") {
  for (const auto& [format, lo, hi] : {std::tuple{TrunkFormat::kQ6G128, -32, 31}, std::tuple{TrunkFormat::kQ4G128, -8, 7}}) {
    CAPTURE(trunk_format_name(format));
    std::vector<uint8_t> row(trunk_row_bytes(format, 128));
    std::vector<int> values(128);
    for (size_t c = 0; c < 128; ++c) {
      values[c] = lo + static_cast<int>((c * 37) % static_cast<size_t>(hi - lo + 1));
      set_trunk_integer(format, row.data(), c, values[c]);
    }
    for (size_t c = 0; c < 128; c += 7) {  // overwrite some in place: the others must stay
      values[c] = hi - (values[c] - lo);
      set_trunk_integer(format, row.data(), c, values[c]);
    }
    for (size_t c = 0; c < 128; ++c) REQUIRE(trunk_integer(format, row.data(), c) == values[c]);
  }
}

TEST_CASE("rounding is half to even") {
  std::vector<float> w(128, 0.0f);
  w[0] = 127.0f;  // scale 1.0
  w[1] = 2.5f;
  w[2] = 3.5f;
  w[3] = -2.5f;
  w[4] = 0.5f;
  const GroupQuantized q = quantized(TrunkFormat::kQ8G128, w, 1, 128);
  CHECK(f16_to_f32(q.scales[0]) == 1.0f);
  CHECK(static_cast<int8_t>(q.data[1]) == 2);
  CHECK(static_cast<int8_t>(q.data[2]) == 4);
  CHECK(static_cast<int8_t>(q.data[3]) == -2);
  CHECK(static_cast<int8_t>(q.data[4]) == 0);
}

TEST_CASE("a group maximum that overflows an f16 scale is refused by tensor name") {
  std::vector<float> w(128, 1.0f);
  w[5] = 1e9f;
  GroupQuantized q = allocate_grouped(TrunkFormat::kQ4G128, 1, 128);
  const std::string message =
      test::error_of([&] { quantize_grouped_rows(TrunkFormat::kQ4G128, w.data(), 128, 0, 1, q, "model.x.weight"); });
  CHECK(test::contains(message, "tensor model.x.weight"));
}

}  // namespace
}  // namespace sluice::convert
