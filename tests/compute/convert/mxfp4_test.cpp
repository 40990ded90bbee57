// tests/compute/convert/mxfp4_test.cpp: MXFP4 decoding (k3.md §3): E2M1
// nibbles low-first with the sign in bit 3, E8M0 scales 2^(e−127) exactly
// (e = 0 is 2^−127), and the load-time check refusing NaN scales and groups
// the shipped quantiser could not have produced, naming tensor, row and group.
#include "compute/convert/mxfp4.h"

#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "proto/error.h"

using namespace sluice;
using namespace sluice::convert;

namespace {

std::string error_of(const std::vector<uint8_t>& packed, const std::vector<uint8_t>& scales,
                     uint64_t rows) {
  std::vector<float> out(rows * 32);
  try {
    decode_mxfp4(packed.data(), scales.data(), rows, 32, "w.weight", out.data());
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("E2M1 nibbles: bits 0-2 index the magnitudes, bit 3 is the sign") {
  const float magnitudes[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  for (uint8_t n = 0; n < 16; ++n) {
    CAPTURE(int(n));
    CHECK(e2m1_to_f32(n) == (n & 8 ? -magnitudes[n & 7] : magnitudes[n & 7]));
  }
  CHECK(mxfp4_packed_name("a.w1.weight") == "a.w1.weight_packed");
  CHECK(mxfp4_scale_name("a.w1.weight") == "a.w1.weight_scale");
}

TEST_CASE("an MXFP4 row decodes exactly: element 2j in the low nibble, one scale per 32") {
  // Row 0: bytes 0x71 (elements 0.5, 6) then 0xE5 (3, -4), the rest 0x07 (6, 0); scale 2^-3.
  // Row 1: every byte 0xF6 (4, -6); scale e = 0 is 2^-127, not zero.
  std::vector<uint8_t> packed(32, 0x07);
  packed[0] = 0x71;
  packed[1] = 0xE5;
  for (int i = 16; i < 32; ++i) packed[i] = 0xF6;
  const std::vector<uint8_t> scales = {124, 0};
  std::vector<float> out(64);
  decode_mxfp4(packed.data(), scales.data(), 2, 32, "w.weight", out.data());
  CHECK(out[0] == 0.5f / 8);
  CHECK(out[1] == 6.0f / 8);
  CHECK(out[2] == 3.0f / 8);
  CHECK(out[3] == -4.0f / 8);
  CHECK(out[4] == 6.0f / 8);
  CHECK(out[5] == 0.0f);
  CHECK(out[32] == std::ldexp(4.0f, -127));
  CHECK(out[33] == std::ldexp(-6.0f, -127));
  CHECK(out[33] != 0.0f);
}

TEST_CASE("MXFP4's load-time check names tensor, row and group") {
  std::vector<uint8_t> packed(16, 0x66);  // every value 4: a group as quantised
  CHECK(error_of(packed, {127}, 1).empty());
  packed.assign(16, 0x55);  // largest 3: amax/scale just above 3 rounds here
  CHECK(error_of(packed, {127}, 1).empty());
  packed.assign(16, 0x00);  // an all-zero group carries no scale information
  CHECK(error_of(packed, {127}, 1).empty());
  packed.assign(16, 0x44);  // largest 2: the scale is too large by at least 3/2
  const std::string small = error_of(packed, {127}, 1);
  CHECK(doctest::String(small.c_str()) == doctest::Contains("w.weight: row 0 group 0"));
  packed.assign(16, 0x66);
  const std::string nan = error_of(packed, {255}, 1);
  CHECK(doctest::String(nan.c_str()) == doctest::Contains("255"));
  std::vector<float> out(16);
  CHECK_THROWS(
      decode_mxfp4(packed.data(), std::vector<uint8_t>{127}.data(), 1, 16, "w.weight", out.data()));
}
