// tests/router/synthetic_routing_test.cpp: the routing statistics on a trace
// worked by hand, and the generator's traces against the statistics recorded
// from real models (tests/router/data/routing-stats.json, read here, not the
// generator's copy): rates within ±0.03, counts within ±5%.
#include "router/synthetic_routing.h"

#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "router/routing_profile.h"

using namespace sluice::router;

namespace {

nlohmann::json recorded(const std::string& model) {
  const char* root = std::getenv("SLUICE_SOURCE_ROOT");
  REQUIRE_MESSAGE(root != nullptr, "SLUICE_SOURCE_ROOT is not set (run through meson test)");
  std::ifstream in(std::string(root) + "/tests/router/data/routing-stats.json");
  REQUIRE(in.good());
  return nlohmann::json::parse(in).at("models").at(model);
}

void check_count(double got, double want) {
  CHECK(std::abs(got - want) <= 0.05 * want);
}

void check_against_recording(const std::string& model) {
  const nlohmann::json m = recorded(model);
  const RoutingGeometry g{m["moe_layers"], m["experts"], m["top_k"]};
  const uint32_t tokens = m["tokens"];
  const SyntheticRouting generator(profile_for(g), 7);
  for (uint64_t seed : {1u, 2u}) {
    CAPTURE(model);
    CAPTURE(seed);
    // Rates are per use and the generator is stationary: measured over 8
    // recordings' length, so one short sample's noise does not decide. Counts
    // depend on the length: measured over the recorded length.
    const RoutingStats rates = measure_routing(generator.generate(8 * tokens, seed), g);
    const RoutingStats s = measure_routing(generator.generate(tokens, seed + 100), g);
    for (uint32_t l = 0; l < g.layers; ++l) {
      CAPTURE(l);
      CHECK(std::abs(rates.next_token_repeat[l] -
                     m["next_token_repeat_per_layer"][l].get<double>()) <= 0.03);
    }
    CHECK(std::abs(rates.next_token_repeat_mean() - m["next_token_repeat_mean"].get<double>()) <=
          0.03);
    for (const auto& [w, share] : rates.reuse_within) {
      CAPTURE(w);
      CHECK(std::abs(share - m["reuse_within_last_w_tokens"][std::to_string(w)].get<double>()) <=
            0.03);
    }
    // The popularity curve: per layer, the share of its uses its top r experts
    // cover, at every rank, averaged over 4 traces of the recorded length (one
    // is as noisy as the recording itself).
    std::vector<RoutingStats> samples;
    for (uint64_t k = 0; k < 4; ++k)
      samples.push_back(measure_routing(generator.generate(tokens, seed * 10 + k), g));
    for (uint32_t l = 0; l < g.layers; ++l) {
      const std::vector<double> counts = m["per_layer_expert_counts_sorted_descending"][l];
      const double total = double(tokens) * g.top_k;
      double top = 0;
      double worst = 0;
      for (uint32_t r = 0; r < g.experts; ++r) {
        top += counts[r];
        double share = 0;
        for (const RoutingStats& sample : samples)
          share += sample.layer_cumulative_share(l, r + 1) / samples.size();
        worst = std::max(worst, std::abs(share - top / total));
      }
      CAPTURE(l);
      CHECK(worst <= 0.03);
    }
    const nlohmann::json& covering = m["pairs_covering_50_80_95_percent_of_activations"];
    check_count(s.pairs_covering(0.50), covering[0]);
    check_count(s.pairs_covering(0.80), covering[1]);
    check_count(s.pairs_covering(0.95), covering[2]);
    check_count(s.distinct_pairs_touched(), m["distinct_layer_expert_pairs_touched"]);
  }
}

}  // namespace

TEST_CASE("routing statistics of a trace worked by hand") {
  // One layer of 4 experts, top-2: {0,1} {1,2} {0,2}.
  const std::vector<TraceToken> trace = {{0, {{0, 1}}}, {1, {{2, 1}}}, {2, {{0, 2}}}};
  const RoutingStats s = measure_routing(trace, {1, 4, 2}, {1, 2});
  // Token 1 repeats expert 1, token 2 repeats expert 2: half each.
  CHECK(s.next_token_repeat[0] == doctest::Approx(0.5));
  // Of the 4 uses with history, 2 reuse the previous token; expert 0 at token
  // 2 reuses token 0, within 2.
  CHECK(s.reuse_within[0].second == doctest::Approx(0.5));
  CHECK(s.reuse_within[1].second == doctest::Approx(0.75));
  CHECK(s.counts_sorted[0] == std::vector<double>{2, 2, 2, 0});
  CHECK(s.distinct_pairs_touched() == 3);
  CHECK(s.pairs_covering(0.5) == 2);  // 4 of 6 uses
  CHECK(s.pairs_covering(0.95) == 3);
  CHECK(s.layer_cumulative_share(0, 1) == doctest::Approx(1.0 / 3));
}

TEST_CASE("a trace naming an expert the geometry lacks is refused") {
  const std::vector<TraceToken> trace = {{0, {{0, 4}}}};
  CHECK_THROWS_WITH(measure_routing(trace, {1, 4, 2}),
                    doctest::Contains("expert 4 is out of range"));
}

TEST_CASE("generated OLMoE-1B-7B routing has the recorded statistics") {
  check_against_recording("OLMoE-1B-7B-0924");
}

TEST_CASE("generated Kimi-Linear-48B routing has the recorded statistics") {
  check_against_recording("Kimi-Linear-48B-A3B-Instruct");
}

TEST_CASE("a profile cut to fewer layers reuses within one token as its kept layers repeat") {
  // OLMoE's 16 recorded layers cut to 4 (`--layers 4`): layers 0, 4, 8, 12 are
  // kept, and their mean repeat is not the 16 layers' mean.
  const RoutingGeometry cut{4, 64, 8};
  const RoutingStats target = profile_for(cut);
  REQUIRE(target.reuse_within.front().first == 1);
  CHECK(target.reuse_within.front().second == doctest::Approx(target.next_token_repeat_mean()));
  for (size_t w = 1; w < target.reuse_within.size(); ++w) {
    CHECK(target.reuse_within[w].second >= target.reuse_within[w - 1].second);
    CHECK(target.reuse_within[w].second <= 1.0);
  }
  const RoutingStats s = measure_routing(synthetic_trace(cut, target.tokens, 3), cut);
  for (size_t w = 0; w < s.reuse_within.size(); ++w) {
    CAPTURE(s.reuse_within[w].first);
    CHECK(std::abs(s.reuse_within[w].second - target.reuse_within[w].second) <= 0.03);
  }
}

TEST_CASE("generated K3 routing (92 x 896, top-16) repeats as the reference measured") {
  const RoutingGeometry k3{92, 896, 16};
  const RoutingStats target = profile_for(k3);
  const RoutingStats s = measure_routing(synthetic_trace(k3, target.tokens, 3), k3);
  // reference-engine.md §4: K3's previous-token reuse is 29.5%.
  CHECK(std::abs(s.next_token_repeat_mean() - 0.295) <= 0.03);
  for (size_t w = 0; w < s.reuse_within.size(); ++w) {
    CHECK(std::abs(s.reuse_within[w].second - target.reuse_within[w].second) <= 0.03);
  }
  check_count(s.pairs_covering(0.5), target.pairs_covering(0.5));
  check_count(s.pairs_covering(0.8), target.pairs_covering(0.8));
  for (const TraceToken& token : synthetic_trace({2, 8, 2}, 5, 1)) {
    for (const auto& layer : token.layers) CHECK(layer.size() == 2);
  }
}
