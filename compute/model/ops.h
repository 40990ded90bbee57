// compute/model/ops.h: the elementwise pieces every layer kind uses, in the
// summation order scripts/reference.py models.
#pragma once

#include <cmath>
#include <cstdint>

#include "compute/kernels/lanes.h"

namespace sluice {

// y = w ⊙ x / sqrt(mean(x²) + eps), the sum of squares in index order; y may be x.
inline void rms_norm(const float* x, const float* weight, uint32_t n, float eps, float* y) {
  float sum = 0.0f;
  for (uint32_t i = 0; i < n; ++i) sum += x[i] * x[i];
  const float inverse = 1.0f / std::sqrt(sum / static_cast<float>(n) + eps);
  for (uint32_t i = 0; i < n; ++i) y[i] = weight[i] * (x[i] * inverse);
}

// a·b over n values in 16 lanes, so the products do not wait on one running
// sum (a serial f32 sum costs an add's latency per value: attention spent
// most of its time there). Lane l sums the products at i ≡ l (mod 16) in index
// order, then the lanes fold as kernels::fold16. The same bits at every
// instruction set.
inline float lane_dot(const float* a, const float* b, uint32_t n) {
  float lanes[16] = {};
  uint32_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (uint32_t l = 0; l < 16; ++l) lanes[l] += a[i + l] * b[i + l];
  for (uint32_t l = 0; i + l < n; ++l) lanes[l] += a[i + l] * b[i + l];
  return kernels::fold16(lanes);
}

inline float silu(float v) { return v / (1.0f + std::exp(-v)); }

}  // namespace sluice
