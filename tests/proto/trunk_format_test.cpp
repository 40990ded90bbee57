// tests/proto/trunk_format_test.cpp: trunk tensor geometry and dequantization
// on tensors built by hand in memory.
#include "proto/trunk_format.h"

#include <doctest/doctest.h>

#include <cstring>

namespace sluice {
namespace {

TrunkTensorInfo info(TrunkFormat format, uint64_t rows, uint64_t cols) {
  return TrunkTensorInfo{.name = std::string(1, 't'),
                         .format = format,
                         .shape = {rows, cols},
                         .rows = rows,
                         .cols = cols};
}

TEST_CASE("format names round-trip and unknown names are refused") {
  for (TrunkFormat f : {TrunkFormat::kF32, TrunkFormat::kQ8G128, TrunkFormat::kQ4G128}) {
    CHECK(parse_trunk_format(trunk_format_name(f)) == f);
  }
  CHECK_FALSE(parse_trunk_format("q4g64").has_value());
  CHECK_FALSE(parse_trunk_format("").has_value());
}

TEST_CASE("geometry follows FORMAT.md") {
  const TrunkTensorInfo f32 = info(TrunkFormat::kF32, 3, 5);
  CHECK(f32.padded_cols() == 5);
  CHECK(f32.expected_bytes() == 60);
  CHECK(f32.expected_scale_bytes() == 0);
  const TrunkTensorInfo q8 = info(TrunkFormat::kQ8G128, 3, 129);
  CHECK(q8.padded_cols() == 256);
  CHECK(q8.groups_per_row() == 2);
  CHECK(q8.expected_bytes() == 3 * 256);
  CHECK(q8.expected_scale_bytes() == 3 * 2 * 2);
  const TrunkTensorInfo q4 = info(TrunkFormat::kQ4G128, 2, 128);
  CHECK(q4.padded_cols() == 128);
  CHECK(q4.expected_bytes() == 2 * 64);
  CHECK(q4.expected_scale_bytes() == 2 * 1 * 2);
}

TEST_CASE("q4g128 puts element 2i in the low nibble and drops padding") {
  // 1 row, 130 cols: 2 groups, padded to 256 → 128 bytes.
  const TrunkTensorInfo i = info(TrunkFormat::kQ4G128, 1, 130);
  REQUIRE(i.expected_bytes() == 128);
  AlignedBuffer data(128, 64);
  std::memset(data.data(), 0x88, 128);
  data.data()[0] = static_cast<uint8_t>((3 + 8) | (-8 + 8) << 4);   // q0 = 3, q1 = -8
  data.data()[64] = static_cast<uint8_t>((7 + 8) | (-1 + 8) << 4);  // q128 = 7, q129 = -1
  AlignedBuffer scales(4, 64);
  const uint16_t s[2] = {0x3800, 0x4000};  // 0.5 for group 0, 2.0 for group 1
  std::memcpy(scales.data(), s, 4);
  const TrunkTensor t(i, std::move(data), std::move(scales));
  const std::vector<float> v = dequantize(t);
  REQUIRE(v.size() == 130);
  CHECK(v[0] == 1.5f);
  CHECK(v[1] == -4.0f);
  CHECK(v[2] == 0.0f);
  CHECK(v[128] == 14.0f);
  CHECK(v[129] == -2.0f);
}

TEST_CASE("q8g128 is signed and uses each row's own group scales") {
  const TrunkTensorInfo i = info(TrunkFormat::kQ8G128, 2, 4);
  AlignedBuffer data(i.expected_bytes(), 64);
  data.data()[0] = static_cast<uint8_t>(-127);
  data.data()[128 + 3] = 100;
  AlignedBuffer scales(4, 64);
  const uint16_t s[2] = {0x3C00, 0x3400};  // 1.0 for row 0, 0.25 for row 1
  std::memcpy(scales.data(), s, 4);
  const TrunkTensor t(i, std::move(data), std::move(scales));
  const std::vector<float> v = dequantize(t);
  REQUIRE(v.size() == 8);
  CHECK(v[0] == -127.0f);
  CHECK(v[7] == 25.0f);
  CHECK(v[4] == 0.0f);
}

}  // namespace
}  // namespace sluice
