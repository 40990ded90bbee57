// compute/cli/routing_fit.cpp: the fitting loop of `sluice synth --routing
// realistic`: simulate runs of the profile's length, measure them as
// routing-stats.json does, correct, repeat.
#include "compute/cli/routing_fit.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "compute/convert/kmeans.h"
#include "compute/convert/parallel.h"
#include "router/routing_profile.h"

namespace sluice::cli {
namespace {

constexpr int kRounds = 24;
constexpr int kRunsPerRound = 8;
constexpr double kStartAngle = 0.7;  // slow weight cos, fast weight sin

std::vector<router::TraceToken> as_trace(
    const std::vector<std::vector<std::vector<uint32_t>>>& runs) {
  std::vector<router::TraceToken> trace(runs.size());
  for (size_t t = 0; t < runs.size(); ++t) {
    trace[t].tok = t;
    trace[t].layers = runs[t];
  }
  return trace;
}

}  // namespace

convert::RoutingShape fit_routing_shape(const ModelConfig& config, uint64_t seed, int threads) {
  convert::RoutingShape shape = convert::initial_routing_shape(config, seed);
  const uint32_t moe_layers = static_cast<uint32_t>(shape.bias.size());
  const router::RoutingGeometry geometry{moe_layers, config.experts, config.top_k};
  const router::RoutingStats target = router::profile_for(geometry);
  const convert::RoutingSimulator simulator(shape, config.router);

  // Ties in the first round fall to a random order of experts, so popular
  // ids differ from layer to layer.
  for (uint32_t m = 0; m < moe_layers; ++m) {
    std::vector<uint32_t> order(config.experts);
    std::iota(order.begin(), order.end(), 0u);
    convert::SplitMix64 rng(convert::derive_seed(seed, 0x0dde, m));
    for (uint32_t i = config.experts; i > 1; --i) std::swap(order[i - 1], order[rng.below(i)]);
    for (uint32_t r = 0; r < config.experts; ++r) shape.bias[m][order[r]] = -1e-3f * float(r);
  }
  std::vector<double> angle(moe_layers, kStartAngle);
  for (int round = 0; round < kRounds; ++round) {
    for (uint32_t m = 0; m < moe_layers; ++m) {
      shape.slow_weight[m] = static_cast<float>(std::cos(angle[m]));
      shape.fast_weight[m] = static_cast<float>(std::sin(angle[m]));
    }
    std::vector<router::RoutingStats> runs(kRunsPerRound);
    // uses[run][m][e]: how often each expert was chosen (the stats only keep them sorted).
    std::vector<std::vector<std::vector<double>>> uses(
        kRunsPerRound,
        std::vector<std::vector<double>>(moe_layers, std::vector<double>(config.experts, 0.0)));
    convert::parallel_for(kRunsPerRound, threads, [&](size_t run) {
      const std::vector<router::TraceToken> trace =
          as_trace(simulator.decode(shape, target.tokens, convert::derive_seed(seed, round, run)));
      for (const router::TraceToken& token : trace) {
        for (uint32_t m = 0; m < moe_layers; ++m) {
          for (uint32_t e : token.layers[m]) uses[run][m][e] += 1;
        }
      }
      runs[run] = router::measure_routing(trace, geometry);
    });
    for (uint32_t m = 0; m < moe_layers; ++m) {
      double repeat = 0;
      std::vector<double> counts(config.experts, 0.0);
      for (int run = 0; run < kRunsPerRound; ++run) {
        repeat += runs[run].next_token_repeat[m] / kRunsPerRound;
        for (uint32_t e = 0; e < config.experts; ++e) counts[e] += uses[run][m][e] / kRunsPerRound;
      }
      // More weight on the slow latent, more of a token's experts carried over.
      angle[m] = std::clamp(angle[m] - 1.5 * (target.next_token_repeat[m] - repeat), 0.02, 1.55);
      // The expert now used r-th most is to be used as the profile's r-th:
      // by expert, since an expert's direction, not only its bias, sets its use.
      std::vector<uint32_t> by_use(config.experts);
      std::iota(by_use.begin(), by_use.end(), 0u);
      std::vector<float>& bias = shape.bias[m];
      std::stable_sort(by_use.begin(), by_use.end(), [&](uint32_t a, uint32_t b) {
        return counts[a] != counts[b] ? counts[a] > counts[b] : bias[a] > bias[b];
      });
      for (uint32_t r = 0; r < config.experts; ++r) {
        const uint32_t e = by_use[r];
        bias[e] += 0.5f * static_cast<float>(
                              std::log((target.counts_sorted[m][r] + 0.5) / (counts[e] + 0.5)));
      }
    }
  }
  for (uint32_t m = 0; m < moe_layers; ++m) {
    shape.slow_weight[m] = static_cast<float>(std::cos(angle[m]));
    shape.fast_weight[m] = static_cast<float>(std::sin(angle[m]));
  }
  return shape;
}

}  // namespace sluice::cli
