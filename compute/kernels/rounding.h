// compute/kernels/rounding.h: the one scalar float-to-integer rounding every
// quantizing kernel shares, matching cvtps2dq (round half to even; NaN and
// out-of-range give -2^31) so that scalar and vector paths agree bit for bit.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace sluice::kernels::detail {

inline int32_t round_clamped(float p, int32_t limit) {
  const int32_t q =
      std::fabs(p) < 2147483520.0f ? static_cast<int32_t>(std::nearbyint(p)) : INT32_MIN;
  return std::clamp(q, -limit, limit);
}

}  // namespace sluice::kernels::detail
