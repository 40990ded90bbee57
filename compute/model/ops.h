// compute/model/ops.h: the elementwise pieces every layer kind uses, in the
// summation order scripts/reference.py models.
#pragma once

#include <cmath>
#include <cstdint>

namespace sluice {

// y = w ⊙ x / sqrt(mean(x²) + eps), the sum of squares in index order; y may be x.
inline void rms_norm(const float* x, const float* weight, uint32_t n, float eps, float* y) {
  float sum = 0.0f;
  for (uint32_t i = 0; i < n; ++i) sum += x[i] * x[i];
  const float inverse = 1.0f / std::sqrt(sum / static_cast<float>(n) + eps);
  for (uint32_t i = 0; i < n; ++i) y[i] = weight[i] * (x[i] * inverse);
}

inline float silu(float v) { return v / (1.0f + std::exp(-v)); }

}  // namespace sluice
