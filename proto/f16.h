// proto/f16.h: IEEE half <-> float conversion used by every on-disk f16
// (record scales, trunk group scales). Exact: round-to-nearest-even on the
// way down, subnormals kept (the reference engine once flushed them).
#pragma once

#include <bit>
#include <cstdint>

namespace sluice {

inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  uint32_t mantissa = h & 0x3ffu;
  uint32_t bits;
  if (exponent == 0x1f) {
    bits = sign | 0x7f800000u | (mantissa << 13);
  } else if (exponent != 0) {
    bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {
    bits = sign;
  } else {
    int shift = 0;
    while ((mantissa & 0x400u) == 0) {
      mantissa <<= 1;
      ++shift;
    }
    bits = sign | static_cast<uint32_t>(113 - shift) << 23 | ((mantissa & 0x3ffu) << 13);
  }
  return std::bit_cast<float>(bits);
}

inline uint16_t f32_to_f16(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t exponent = (bits >> 23) & 0xffu;
  uint32_t mantissa = bits & 0x7fffffu;
  if (exponent == 0xff) return sign | 0x7c00u | (mantissa ? 0x200u : 0u);
  const int unbiased = static_cast<int>(exponent) - 127;
  if (unbiased > 15) return sign | 0x7c00u;
  if (unbiased >= -14) {
    uint32_t half = (static_cast<uint32_t>(unbiased + 15) << 10) | (mantissa >> 13);
    const uint32_t rest = mantissa & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (half & 1u))) ++half;  // may carry into inf
    return sign | static_cast<uint16_t>(half);
  }
  if (unbiased < -25) return sign;
  mantissa |= 0x800000u;
  const int shift = -unbiased - 1;  // 14..24: lands the value on the subnormal grid
  uint32_t half = mantissa >> shift;
  const uint32_t rest = mantissa & ((1u << shift) - 1);
  const uint32_t halfway = 1u << (shift - 1);
  if (rest > halfway || (rest == halfway && (half & 1u))) ++half;
  return sign | static_cast<uint16_t>(half);
}

}  // namespace sluice
