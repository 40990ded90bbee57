// router/synthetic_routing.cpp: the copy-or-draw generator and its
// calibration loop (generate, measure, correct). Seeded and deterministic.
#include "router/synthetic_routing.h"

#include <algorithm>
#include <numeric>
#include <random>

#include "proto/error.h"

namespace sluice::router {
namespace {

constexpr uint32_t kBandLow[] = {2, 3, 5, 9};
constexpr uint32_t kBandHigh[] = {2, 4, 8, 16};
constexpr uint32_t kWindows[] = {1, 2, 4, 8, 16};
constexpr int kRounds = 30;
constexpr double kMaxCopy = 0.97;  // leave fresh draws some room: new experts appear

double window_share(const RoutingStats& stats, uint32_t w) {
  for (const auto& [window, share] : stats.reuse_within) {
    if (window == w) return share;
  }
  fail("routing profile {}: no reuse-within-{} figure", stats.name, w);
}

}  // namespace

SyntheticRouting::SyntheticRouting(const RoutingStats& target, uint64_t seed) : target_(target) {
  const RoutingGeometry& g = target_.geometry;
  if (g.layers == 0 || g.top_k == 0 || g.top_k > g.experts ||
      target_.counts_sorted.size() != g.layers || target_.next_token_repeat.size() != g.layers) {
    fail("routing profile {}: its per-layer figures do not match {} layers × {} experts, top-{}",
         target_.name, g.layers, g.experts, g.top_k);
  }
  std::mt19937_64 rng(seed);
  for (uint32_t l = 0; l < g.layers; ++l) {
    if (target_.counts_sorted[l].size() != g.experts) {
      fail("routing profile {}: layer {} has {} expert counts, not {}", target_.name, l,
           target_.counts_sorted[l].size(), g.experts);
    }
    copy_previous_.push_back(0.8 * target_.next_token_repeat[l]);
    std::vector<double>& weights = weight_by_rank_.emplace_back();
    for (double c : target_.counts_sorted[l]) weights.push_back(c + 0.5);
    std::vector<uint32_t>& ids = expert_of_rank_.emplace_back(g.experts);
    std::iota(ids.begin(), ids.end(), 0u);
    std::shuffle(ids.begin(), ids.end(), rng);
  }
  for (int b = 0; b < kLagBands; ++b) {
    copy_band_[b] = 0.5 * std::max(0.0, window_share(target_, kWindows[b + 1]) -
                                            window_share(target_, kWindows[b]));
  }
  calibrate(rng());
}

std::vector<TraceToken> SyntheticRouting::generate(uint32_t tokens, uint64_t seed) const {
  const RoutingGeometry& g = target_.geometry;
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::vector<std::vector<double>> cumulative(g.layers);
  for (uint32_t l = 0; l < g.layers; ++l) {
    cumulative[l].resize(g.experts);
    std::partial_sum(weight_by_rank_[l].begin(), weight_by_rank_[l].end(), cumulative[l].begin());
  }
  std::vector<TraceToken> trace(tokens);
  std::vector<uint8_t> taken(g.experts);
  std::vector<uint32_t> candidates;
  for (uint32_t t = 0; t < tokens; ++t) {
    trace[t].tok = t;
    trace[t].layers.resize(g.layers);
    for (uint32_t l = 0; l < g.layers; ++l) {
      std::vector<uint32_t>& chosen = trace[t].layers[l];
      std::fill(taken.begin(), taken.end(), 0);
      const std::vector<uint32_t>& ids = expert_of_rank_[l];
      const std::vector<double>& cum = cumulative[l];
      const auto take = [&](uint32_t expert) {
        taken[expert] = 1;
        chosen.push_back(expert);
      };
      while (chosen.size() < g.top_k) {
        double u = unit(rng);
        uint32_t lag = 0;
        if (u < copy_previous_[l]) {
          lag = 1;
        } else {
          u -= copy_previous_[l];
          for (int b = 0; b < kLagBands && lag == 0; ++b) {
            if (u < copy_band_[b]) {
              lag = std::uniform_int_distribution<uint32_t>(kBandLow[b], kBandHigh[b])(rng);
            }
            u -= copy_band_[b];
          }
        }
        if (lag != 0 && lag <= t) {
          candidates.clear();
          for (uint32_t e : trace[t - lag].layers[l]) {
            if (!taken[e]) candidates.push_back(e);
          }
          if (!candidates.empty()) {
            take(candidates[std::uniform_int_distribution<size_t>(0, candidates.size() - 1)(rng)]);
            continue;
          }
        }
        // A fresh draw by popularity; rejection first, an exact draw over
        // what is left when the popular experts are all taken.
        bool drawn = false;
        for (int attempt = 0; attempt < 32 && !drawn; ++attempt) {
          const double x = unit(rng) * cum.back();
          const size_t rank = std::min<size_t>(
              std::upper_bound(cum.begin(), cum.end(), x) - cum.begin(), g.experts - 1);
          if (!taken[ids[rank]]) {
            take(ids[rank]);
            drawn = true;
          }
        }
        if (drawn) continue;
        double left = 0;
        for (uint32_t r = 0; r < g.experts; ++r)
          left += taken[ids[r]] ? 0.0 : weight_by_rank_[l][r];
        double x = unit(rng) * left;
        uint32_t pick = g.experts;
        for (uint32_t r = 0; r < g.experts; ++r) {
          if (taken[ids[r]]) continue;
          pick = r;
          x -= weight_by_rank_[l][r];
          if (x <= 0) break;
        }
        take(ids[pick]);
      }
      std::sort(chosen.begin(), chosen.end());
    }
  }
  return trace;
}

void SyntheticRouting::calibrate(uint64_t seed) {
  const RoutingGeometry& g = target_.geometry;
  const uint64_t per_run = uint64_t{target_.tokens} * g.layers * g.top_k;
  const int runs =
      static_cast<int>(std::clamp<uint64_t>(150'000 / std::max<uint64_t>(per_run, 1), 2, 16));
  std::mt19937_64 rng(seed);
  for (int round = 0; round < kRounds; ++round) {
    std::vector<double> repeat(g.layers, 0.0), reuse(std::size(kWindows), 0.0);
    std::vector<std::vector<double>> counts(g.layers, std::vector<double>(g.experts, 0.0));
    for (int run = 0; run < runs; ++run) {
      const RoutingStats m = measure_routing(generate(target_.tokens, rng()), g);
      for (uint32_t l = 0; l < g.layers; ++l) {
        repeat[l] += m.next_token_repeat[l] / runs;
        for (uint32_t r = 0; r < g.experts; ++r) counts[l][r] += m.counts_sorted[l][r] / runs;
      }
      for (size_t w = 0; w < std::size(kWindows); ++w) reuse[w] += m.reuse_within[w].second / runs;
    }
    for (uint32_t l = 0; l < g.layers; ++l) {
      copy_previous_[l] = std::clamp(
          copy_previous_[l] + 0.7 * (target_.next_token_repeat[l] - repeat[l]), 0.0, kMaxCopy);
      // The weights by rank follow the sorted counts; ranks swap freely, so
      // the correction is by position in the sorted curve.
      for (uint32_t r = 0; r < g.experts; ++r) {
        weight_by_rank_[l][r] *= (target_.counts_sorted[l][r] + 0.5) / (counts[l][r] + 0.5);
      }
      // Rank r's weight must stay the r-th largest to be compared with the r-th count.
      std::sort(weight_by_rank_[l].begin(), weight_by_rank_[l].end(), std::greater<>());
    }
    for (int b = 0; b < kLagBands; ++b) {
      // Band b's lags first count in the window that ends with it.
      copy_band_[b] = std::max(
          0.0, copy_band_[b] + 0.5 * (window_share(target_, kWindows[b + 1]) - reuse[b + 1]));
    }
    const double max_previous = *std::max_element(copy_previous_.begin(), copy_previous_.end());
    const double bands = std::accumulate(copy_band_.begin(), copy_band_.end(), 0.0);
    if (max_previous + bands > kMaxCopy) {
      for (double& b : copy_band_) b *= std::max(0.0, kMaxCopy - max_previous) / bands;
    }
  }
}

std::vector<TraceToken> synthetic_trace(const RoutingGeometry& geometry, uint32_t tokens,
                                        uint64_t seed) {
  const SyntheticRouting generator(profile_for(geometry), seed);
  return generator.generate(tokens, seed ^ 0x9e3779b97f4a7c15ull);
}

}  // namespace sluice::router
