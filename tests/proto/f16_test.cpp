// Every half converts to float and back to itself; floats round to nearest
// even, including on the subnormal grid and at overflow.
#include <doctest/doctest.h>

#include <cmath>

#include "proto/f16.h"

using sluice::f16_to_f32;
using sluice::f32_to_f16;

TEST_CASE("every finite half survives a round trip through float") {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = f16_to_f32(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    CHECK(f32_to_f16(f) == h);
  }
}

TEST_CASE("known values") {
  CHECK(f16_to_f32(0x3c00) == 1.0f);
  CHECK(f16_to_f32(0xc000) == -2.0f);
  CHECK(f16_to_f32(0x7bff) == 65504.0f);
  CHECK(f16_to_f32(0x0001) == std::ldexp(1.0f, -24));
  CHECK(f32_to_f16(65520.0f) == 0x7c00);  // halfway to the next power rounds up to inf
  CHECK(f32_to_f16(std::ldexp(1.0f, -25)) == 0x0000);  // exactly half a subnormal step: ties to even
  CHECK(f32_to_f16(std::ldexp(1.5f, -25)) == 0x0001);
  CHECK(f32_to_f16(1.0f + std::ldexp(1.0f, -11)) == 0x3c00);  // tie, even mantissa stays
  CHECK(f32_to_f16(1.0f + 3 * std::ldexp(1.0f, -11)) == 0x3c02);  // tie, odd mantissa rounds up
}

TEST_CASE("rounding picks the nearest half") {
  for (uint32_t h = 0x0001; h < 0x7bff; h += 7) {
    const float lo = f16_to_f32(static_cast<uint16_t>(h));
    const float hi = f16_to_f32(static_cast<uint16_t>(h + 1));
    const float just_below_mid = lo + (hi - lo) * 0.49f;
    const float just_above_mid = lo + (hi - lo) * 0.51f;
    CHECK(f32_to_f16(just_below_mid) == h);
    CHECK(f32_to_f16(just_above_mid) == h + 1);
  }
}
