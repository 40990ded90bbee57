// compute/kernels/lanes.h: the one fold of 16 f32 lanes that every
// lane-split sum documents (the decode-once tiles, the f32 trunk kernel,
// attention's lane_dot), so the scalar and vector bodies add in the same order.
#pragma once

namespace sluice::kernels {

// ((a_l + a_{l+8}), then + 4, then + 2, then the last pair).
inline float fold16(const float* a) {
  float s[8], t[4];
  for (int l = 0; l < 8; ++l) s[l] = a[l] + a[l + 8];
  for (int l = 0; l < 4; ++l) t[l] = s[l] + s[l + 4];
  return (t[0] + t[2]) + (t[1] + t[3]);
}

}  // namespace sluice::kernels
