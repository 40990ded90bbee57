// compute/vision/bilinear.h: one axis of a half-pixel bilinear resize with
// edge clamp and no antialias (torch's interpolate, align_corners=False),
// shared by the position-grid resize and the image resample. Index math only.
#pragma once

#include <algorithm>
#include <cstdint>

namespace sluice {

// Output index `i` of `out` reads sources `lo` and `hi`, weight `frac` on hi.
struct BilinearTap {
  uint32_t lo, hi;
  float frac;
};

inline BilinearTap bilinear_tap(uint32_t i, uint32_t in, uint32_t out) {
  const double source = std::max(0.0, (i + 0.5) * in / out - 0.5);
  const auto lo = std::min(static_cast<uint32_t>(source), in - 1);
  return {lo, std::min(lo + 1, in - 1), static_cast<float>(source - lo)};
}

}  // namespace sluice
