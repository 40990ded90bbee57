// compute/model/activation.h: the gated activation of every FFN (dense MLP,
// shared and routed experts): silu(g)·u, or Kimi K3's SiTU (k3.md §2.5), a
// silu of the tanh-bounded gate times the tanh-bounded up half. Elementwise
// only; nothing here knows weights.
#pragma once

#include <cmath>
#include <cstddef>

#include "compute/model/ops.h"
#include "proto/model_config.h"

namespace sluice {

inline float situ(float g, float u, const ActivationConfig& a) {
  const float bounded = a.beta * std::tanh(g / a.beta);
  const float up = a.linear_beta > 0.0f ? a.linear_beta * std::tanh(u / a.linear_beta) : u;
  return bounded / (1.0f + std::exp(-g)) * up;
}

// out[i] = act(gate[i], up[i]) for n values; out may be gate.
inline void gated_activation(const ActivationConfig& a, const float* gate, const float* up,
                             float* out, size_t n) {
  if (a.kind == Activation::kSilu) {
    for (size_t i = 0; i < n; ++i) out[i] = silu(gate[i]) * up[i];
    return;
  }
  for (size_t i = 0; i < n; ++i) out[i] = situ(gate[i], up[i], a);
}

}  // namespace sluice
