// compute/convert/mxfp4.cpp: exact MXFP4 decoding (mxfp4.h). Every value is
// a small integer multiple of a power of two, so f32 holds it exactly.
#include "compute/convert/mxfp4.h"

#include <algorithm>
#include <cmath>

#include "proto/error.h"

namespace sluice::convert {
namespace {

constexpr float kE2M1[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
constexpr uint8_t kE8M0Nan = 255;

std::string stem(const std::string& weight) {
  constexpr std::string_view kSuffix = "weight";
  if (weight.size() < kSuffix.size() ||
      weight.compare(weight.size() - kSuffix.size(), kSuffix.size(), kSuffix) != 0) {
    fail("MXFP4: tensor name {} does not end in weight", weight);
  }
  return weight;
}

}  // namespace

std::string mxfp4_packed_name(const std::string& weight) {
  return stem(weight) + "_packed";
}
std::string mxfp4_scale_name(const std::string& weight) {
  return stem(weight) + "_scale";
}

float e2m1_to_f32(uint8_t nibble) {
  const float magnitude = kE2M1[nibble & 7];
  return nibble & 8 ? -magnitude : magnitude;
}

namespace {

// Per packed byte: its two values (low nibble first) and the larger of its two
// magnitude indices; per E8M0 byte: 2^(e−127). Built once from e2m1_to_f32.
struct DecodeTables {
  float values[256][2];
  uint8_t largest_index[256];
  float scale[256];
};

const DecodeTables& decode_tables() {
  static const DecodeTables tables = [] {
    DecodeTables t{};
    for (int byte = 0; byte < 256; ++byte) {
      t.values[byte][0] = e2m1_to_f32(static_cast<uint8_t>(byte & 0x0f));
      t.values[byte][1] = e2m1_to_f32(static_cast<uint8_t>(byte >> 4));
      t.largest_index[byte] = static_cast<uint8_t>(std::max(byte & 7, (byte >> 4) & 7));
      t.scale[byte] = std::ldexp(1.0f, byte - 127);
    }
    return t;
  }();
  return tables;
}

// Magnitude index of E2M1 3.0: the quantiser's smallest possible group maximum.
constexpr uint8_t kIndexOfThree = 5;

}  // namespace

void decode_mxfp4(const uint8_t* packed, const uint8_t* scales, uint64_t rows, uint64_t cols,
                  const std::string& tensor, float* out) {
  if (cols % kMxfp4Group != 0)
    fail("{}: MXFP4 rows of {} values are not whole groups of {}", tensor, cols, kMxfp4Group);
  const DecodeTables& tables = decode_tables();
  const uint64_t groups = cols / kMxfp4Group;
  for (uint64_t r = 0; r < rows; ++r) {
    for (uint64_t g = 0; g < groups; ++g) {
      const uint8_t e = scales[r * groups + g];
      if (e == kE8M0Nan) fail("{}: row {} group {}: E8M0 scale 255 is NaN", tensor, r, g);
      const float scale = tables.scale[e];
      const uint8_t* bytes = packed + r * (cols / 2) + g * (kMxfp4Group / 2);
      float* values = out + r * cols + g * kMxfp4Group;
      uint8_t largest = 0;
      for (uint64_t i = 0; i < kMxfp4Group / 2; ++i) {
        values[2 * i] = tables.values[bytes[i]][0] * scale;
        values[2 * i + 1] = tables.values[bytes[i]][1] * scale;
        largest = std::max(largest, tables.largest_index[bytes[i]]);
      }
      // amax/scale in (3, 6] rounds to a largest nibble of 3, 4 or 6.
      if (largest != 0 && largest < kIndexOfThree) {
        fail(
            "{}: row {} group {}: largest |E2M1| {} is below 3, but the MXFP4 quantiser puts every "
            "group's "
            "amax/scale in (3, 6] (scales misread?)",
            tensor, r, g, kE2M1[largest]);
      }
    }
  }
}

}  // namespace sluice::convert
