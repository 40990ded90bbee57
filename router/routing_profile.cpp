// router/routing_profile.cpp: measuring routing statistics, and stretching a
// recorded profile to another geometry.
#include "router/routing_profile.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "proto/error.h"

namespace sluice::router {
namespace {

// K3's previous-token reuse as the reference engine measured it (§4).
constexpr RoutingGeometry kK3{92, 896, 16};
constexpr double kK3NextTokenRepeat = 0.295;

// The cumulative share curve of sorted counts at a fractional rank x ∈ [0, 1].
double cumulative_at(const std::vector<double>& counts, double total, double x) {
  const double pos = x * double(counts.size());
  const size_t whole = std::min(counts.size(), static_cast<size_t>(pos));
  double sum =
      std::accumulate(counts.begin(), counts.begin() + static_cast<std::ptrdiff_t>(whole), 0.0);
  if (whole < counts.size()) sum += (pos - double(whole)) * counts[whole];
  return total > 0 ? sum / total : 0.0;
}

}  // namespace

double RoutingStats::next_token_repeat_mean() const {
  if (next_token_repeat.empty()) return 0.0;
  return std::accumulate(next_token_repeat.begin(), next_token_repeat.end(), 0.0) /
         double(next_token_repeat.size());
}

uint32_t RoutingStats::pairs_covering(double share) const {
  std::vector<double> all;
  for (const auto& layer : counts_sorted) all.insert(all.end(), layer.begin(), layer.end());
  std::sort(all.begin(), all.end(), std::greater<>());
  const double total = std::accumulate(all.begin(), all.end(), 0.0);
  double sum = 0;
  for (size_t i = 0; i < all.size(); ++i) {
    sum += all[i];
    if (sum >= share * total) return static_cast<uint32_t>(i + 1);
  }
  return static_cast<uint32_t>(all.size());
}

uint32_t RoutingStats::distinct_pairs_touched() const {
  uint32_t n = 0;
  for (const auto& layer : counts_sorted)
    n += std::count_if(layer.begin(), layer.end(), [](double c) { return c > 0; });
  return n;
}

double RoutingStats::layer_cumulative_share(uint32_t layer, uint32_t rank) const {
  const std::vector<double>& counts = counts_sorted.at(layer);
  const double total = std::accumulate(counts.begin(), counts.end(), 0.0);
  const size_t n = std::min<size_t>(rank, counts.size());
  const double top =
      std::accumulate(counts.begin(), counts.begin() + static_cast<std::ptrdiff_t>(n), 0.0);
  return total > 0 ? top / total : 0.0;
}

RoutingStats measure_routing(const std::vector<TraceToken>& trace, const RoutingGeometry& geometry,
                             const std::vector<uint32_t>& reuse_windows) {
  const uint32_t layers = geometry.layers, experts = geometry.experts;
  RoutingStats stats;
  stats.name = "measured";
  stats.tokens = static_cast<uint32_t>(trace.size());
  stats.geometry = geometry;
  // last_use[l][e]: the last token index that used it, or -1.
  std::vector<std::vector<int64_t>> last_use(layers, std::vector<int64_t>(experts, -1));
  std::vector<std::vector<double>> counts(layers, std::vector<double>(experts, 0.0));
  std::vector<double> repeat_sum(layers, 0.0);
  std::vector<uint64_t> reused(reuse_windows.size(), 0);
  uint64_t activations_with_history = 0;
  std::vector<uint32_t> distinct;
  for (size_t t = 0; t < trace.size(); ++t) {
    if (trace[t].layers.size() != layers) {
      fail("routing trace: token {} has {} MoE layers, the model {}", t, trace[t].layers.size(),
           layers);
    }
    for (uint32_t l = 0; l < layers; ++l) {
      distinct.clear();
      for (uint32_t e : trace[t].layers[l]) {
        if (e >= experts)
          fail("routing trace: token {} MoE layer {} expert {} is out of range ({} experts)", t, l,
               e, experts);
        if (std::find(distinct.begin(), distinct.end(), e) == distinct.end()) distinct.push_back(e);
      }
      uint32_t repeats = 0;
      for (uint32_t e : distinct) {
        counts[l][e] += 1;
        if (t == 0) continue;
        ++activations_with_history;
        const int64_t last = last_use[l][e];
        if (last == int64_t(t) - 1) ++repeats;
        for (size_t w = 0; w < reuse_windows.size(); ++w) {
          if (last >= 0 && int64_t(t) - last <= int64_t(reuse_windows[w])) ++reused[w];
        }
      }
      if (t > 0 && !distinct.empty()) repeat_sum[l] += double(repeats) / double(distinct.size());
      for (uint32_t e : distinct) last_use[l][e] = int64_t(t);
    }
  }
  const double pairs_of_tokens = trace.size() > 1 ? double(trace.size() - 1) : 1.0;
  for (uint32_t l = 0; l < layers; ++l) {
    stats.next_token_repeat.push_back(repeat_sum[l] / pairs_of_tokens);
    std::sort(counts[l].begin(), counts[l].end(), std::greater<>());
  }
  for (size_t w = 0; w < reuse_windows.size(); ++w) {
    stats.reuse_within.emplace_back(
        reuse_windows[w],
        activations_with_history ? double(reused[w]) / double(activations_with_history) : 0.0);
  }
  stats.counts_sorted = std::move(counts);
  return stats;
}

RoutingStats profile_for(const RoutingGeometry& geometry) {
  if (geometry.layers == 0 || geometry.experts == 0 || geometry.top_k == 0 ||
      geometry.top_k > geometry.experts) {
    fail("routing profile: {} layers × {} experts, top-{} is not a routing geometry",
         geometry.layers, geometry.experts, geometry.top_k);
  }
  const std::vector<RoutingStats>& recorded = recorded_profiles();
  for (const RoutingStats& p : recorded) {
    if (p.geometry == geometry) return p;
  }
  const auto distance = [&](const RoutingStats& p) {
    return std::abs(std::log(double(p.geometry.experts)) - std::log(double(geometry.experts)));
  };
  const RoutingStats& source =
      *std::min_element(recorded.begin(), recorded.end(),
                        [&](const auto& a, const auto& b) { return distance(a) < distance(b); });
  RoutingStats out;
  out.name = fmt::format("{} stretched to {} x {} top-{}", source.name, geometry.layers,
                         geometry.experts, geometry.top_k);
  out.tokens = source.tokens;
  out.geometry = geometry;
  const double total = double(source.tokens) * geometry.top_k;
  for (uint32_t l = 0; l < geometry.layers; ++l) {
    const uint32_t from =
        static_cast<uint32_t>(uint64_t{l} * source.geometry.layers / geometry.layers);
    out.next_token_repeat.push_back(source.next_token_repeat[from]);
    const std::vector<double>& counts = source.counts_sorted[from];
    const double source_total = std::accumulate(counts.begin(), counts.end(), 0.0);
    std::vector<double>& stretched = out.counts_sorted.emplace_back();
    for (uint32_t r = 0; r < geometry.experts; ++r) {
      const double lo = cumulative_at(counts, source_total, double(r) / geometry.experts);
      const double hi = cumulative_at(counts, source_total, double(r + 1) / geometry.experts);
      // No expert is used more than once per token.
      stretched.push_back(std::min(double(source.tokens), total * (hi - lo)));
    }
  }
  // Reuse within one token is the mean next-token repeat (routing-stats.json),
  // so the reuse curve must follow the repeats kept: the layers a cut selects
  // (or K3's measured repeat) have another mean than the source's. Misses at
  // every window shrink or grow alike.
  const double kept_mean = out.next_token_repeat_mean();
  const double target_mean = geometry == kK3 ? kK3NextTokenRepeat : kept_mean;
  if (kept_mean > 0)
    for (double& r : out.next_token_repeat) r *= target_mean / kept_mean;
  const double source_mean = source.next_token_repeat_mean();
  out.reuse_within = source.reuse_within;
  for (auto& [w, share] : out.reuse_within)
    share = 1.0 - (1.0 - share) * (1.0 - target_mean) / (1.0 - source_mean);
  return out;
}

}  // namespace sluice::router
