// compute/convert/mxfp4.cpp: exact MXFP4 decoding (mxfp4.h). Every value is
// a small integer multiple of a power of two, so f32 holds it exactly.
#include "compute/convert/mxfp4.h"

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

void decode_mxfp4(const uint8_t* packed, const uint8_t* scales, uint64_t rows, uint64_t cols,
                  const std::string& tensor, float* out) {
  if (cols % kMxfp4Group != 0)
    fail("{}: MXFP4 rows of {} values are not whole groups of {}", tensor, cols, kMxfp4Group);
  const uint64_t groups = cols / kMxfp4Group;
  for (uint64_t r = 0; r < rows; ++r) {
    for (uint64_t g = 0; g < groups; ++g) {
      const uint8_t e = scales[r * groups + g];
      if (e == kE8M0Nan) fail("{}: row {} group {}: E8M0 scale 255 is NaN", tensor, r, g);
      const float scale = std::ldexp(1.0f, int{e} - 127);
      float largest = 0.0f;
      for (uint64_t i = 0; i < kMxfp4Group; ++i) {
        const uint64_t c = g * kMxfp4Group + i;
        const uint8_t byte = packed[r * (cols / 2) + c / 2];
        const float value = e2m1_to_f32(c % 2 == 0 ? byte & 0x0f : byte >> 4);
        largest = std::max(largest, std::fabs(value));
        out[r * cols + c] = value * scale;
      }
      // amax/scale in (3, 6] rounds to a largest nibble of 3, 4 or 6.
      if (largest != 0.0f && largest < 3.0f) {
        fail(
            "{}: row {} group {}: largest |E2M1| {} is below 3, but the MXFP4 quantiser puts every "
            "group's "
            "amax/scale in (3, 6] (scales misread?)",
            tensor, r, g, largest);
      }
    }
  }
}

}  // namespace sluice::convert
