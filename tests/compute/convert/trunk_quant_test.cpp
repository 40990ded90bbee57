// tests/compute/convert/trunk_quant_test.cpp: q8g128 / q4g128 against the
// FORMAT.md formulas written out here independently: byte layout, nibble
// order, padding, round-half-even, and the error on Gaussian weights.
#include "compute/convert/trunk_quant.h"

#include <algorithm>
#include <cmath>
#include <random>

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

TEST_CASE("Gaussian weights: q8 under 1%, q4 about 12%") {
  const size_t rows = 64, cols = 1000;
  const auto w = gaussian(rows * cols, 1);
  GroupQuantized q8 = allocate_q8g128(rows, cols), q4 = allocate_q4g128(rows, cols);
  const ErrorSums e8 = quantize_q8g128_rows(w.data(), cols, 0, rows, q8, "t");
  const ErrorSums e4 = quantize_q4g128_rows(w.data(), cols, 0, rows, q4, "t");
  const double r8 = relative_error(w, dequantize_q8g128(q8, rows, cols));
  const double r4 = relative_error(w, dequantize_q4g128(q4, rows, cols));
  MESSAGE("relative error q8g128 " << r8 << ", q4g128 " << r4);
  CHECK(r8 < 0.01);
  CHECK(r4 > 0.08);
  CHECK(r4 < 0.16);
  CHECK(e8.relative() == doctest::Approx(r8).epsilon(1e-6));
  CHECK(e4.relative() == doctest::Approx(r4).epsilon(1e-6));
}

TEST_CASE("q8g128 bytes follow the formula, padding is zero") {
  const size_t rows = 3, cols = 200;  // two groups, the second one padded
  auto w = gaussian(rows * cols, 2);
  std::fill(w.begin() + 2 * cols, w.end(), 0.0f);  // an all-zero row
  GroupQuantized q = allocate_q8g128(rows, cols);
  quantize_q8g128_rows(w.data(), cols, 0, rows, q, "t");
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
  const auto back = dequantize_q8g128(q, rows, cols);
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
  GroupQuantized q = allocate_q4g128(1, cols);
  quantize_q4g128_rows(w.data(), cols, 0, 1, q, "t");
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

TEST_CASE("rounding is half to even") {
  std::vector<float> w(128, 0.0f);
  w[0] = 127.0f;  // scale 1.0
  w[1] = 2.5f;
  w[2] = 3.5f;
  w[3] = -2.5f;
  w[4] = 0.5f;
  GroupQuantized q = allocate_q8g128(1, 128);
  quantize_q8g128_rows(w.data(), 128, 0, 1, q, "t");
  CHECK(f16_to_f32(q.scales[0]) == 1.0f);
  CHECK(static_cast<int8_t>(q.data[1]) == 2);
  CHECK(static_cast<int8_t>(q.data[2]) == 4);
  CHECK(static_cast<int8_t>(q.data[3]) == -2);
  CHECK(static_cast<int8_t>(q.data[4]) == 0);
}

TEST_CASE("a group maximum that overflows an f16 scale is refused by tensor name") {
  std::vector<float> w(128, 1.0f);
  w[5] = 1e9f;
  GroupQuantized q = allocate_q4g128(1, 128);
  const std::string message = test::error_of([&] { quantize_q4g128_rows(w.data(), 128, 0, 1, q, "model.x.weight"); });
  CHECK(test::contains(message, "tensor model.x.weight"));
}

}  // namespace
}  // namespace sluice::convert
