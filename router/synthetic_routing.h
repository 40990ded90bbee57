// router/synthetic_routing.h: routing that looks real, for cache and I/O
// benchmarks: a generator calibrated so its traces have a profile's
// statistics (routing_profile.h). It never runs a model; it only emits
// expert ids.
#pragma once

#include <cstdint>
#include <vector>

#include "router/routing_profile.h"
#include "router/trace.h"

namespace sluice::router {

// Each pick of a token's top-k at a layer copies an expert the same layer
// used `lag` tokens ago (lag 1 with a per-layer probability, lags 2..16 with
// shared probabilities per lag band), or else draws afresh from the layer's
// popularity weights. Calibration fits those numbers to the target by
// generating, measuring and correcting, a few rounds.
class SyntheticRouting {
 public:
  // Calibrates against `target` (deterministic for a given seed).
  SyntheticRouting(const RoutingStats& target, uint64_t seed);

  const RoutingGeometry& geometry() const { return target_.geometry; }
  // `tokens` tokens of routing, each layer's experts distinct and ascending.
  std::vector<TraceToken> generate(uint32_t tokens, uint64_t seed) const;

 private:
  static constexpr int kLagBands = 4;  // lags 2, 3-4, 5-8, 9-16

  void calibrate(uint64_t seed);

  RoutingStats target_;
  std::vector<double> copy_previous_;  // per layer
  std::vector<double> copy_band_ = std::vector<double>(kLagBands, 0.0);
  std::vector<std::vector<double>> weight_by_rank_;    // per layer, fresh-draw weights
  std::vector<std::vector<uint32_t>> expert_of_rank_;  // per layer: rank → expert id
};

// A generator calibrated for the model's geometry (profile_for), seeded.
std::vector<TraceToken> synthetic_trace(const RoutingGeometry& geometry, uint32_t tokens,
                                        uint64_t seed);

}  // namespace sluice::router
