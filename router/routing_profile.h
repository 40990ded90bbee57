// router/routing_profile.h: what realistic routing looks like, as numbers: the
// statistics of a routing trace (measured the way routing-stats.json defines
// them), the two recorded from real models, and a profile for any geometry
// derived from the nearest recorded one. Statistics only: no generation here.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "router/trace.h"

namespace sluice::router {

struct RoutingGeometry {
  uint32_t layers = 0;   // MoE layers
  uint32_t experts = 0;  // routed experts per layer
  uint32_t top_k = 0;    // experts per token and layer
  bool operator==(const RoutingGeometry&) const = default;
};

// Aggregate statistics of `tokens` tokens of batch-1 decode routing.
struct RoutingStats {
  std::string name;
  uint32_t tokens = 0;
  RoutingGeometry geometry;
  // Per layer: the share of a token's experts that the previous token also used.
  std::vector<double> next_token_repeat;
  // (w, share of activations whose expert the same layer used within the last w tokens).
  std::vector<std::pair<uint32_t, double>> reuse_within;
  // Per layer: how often each expert was used, most used first (fractional
  // for a derived profile).
  std::vector<std::vector<double>> counts_sorted;

  double next_token_repeat_mean() const;
  // The fewest (layer, expert) pairs whose uses cover `share` of all uses.
  uint32_t pairs_covering(double share) const;
  uint32_t distinct_pairs_touched() const;
  // Per layer: the share of its uses covered by its `rank` most used experts.
  double layer_cumulative_share(uint32_t layer, uint32_t rank) const;
};

// The statistics of a trace, for a model of `geometry` (every id < experts,
// every token the same layer count; Error otherwise). Reuse is counted from
// the second token on, over the history it has (reuse within 1 token is then
// the mean next-token repeat, as in routing-stats.json).
RoutingStats measure_routing(const std::vector<TraceToken>& trace, const RoutingGeometry& geometry,
                             const std::vector<uint32_t>& reuse_windows = {1, 2, 4, 8, 16});

// The profiles recorded from real models (routing_profile_data.cpp).
const std::vector<RoutingStats>& recorded_profiles();

// The target statistics for `geometry`: a recorded profile when the geometry
// is one, otherwise the recorded profile nearest in experts per layer, its
// layers and popularity curves stretched to the geometry (K3, 92 × 896 top-16,
// also takes its measured next-token repeat, 0.295, reference-engine.md §4).
RoutingStats profile_for(const RoutingGeometry& geometry);

}  // namespace sluice::router
