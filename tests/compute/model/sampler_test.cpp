// The sampling chain: greedy, each filter's cut, the penalty and seeding.
#include "compute/model/sampler.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <tuple>
#include <vector>

#include "proto/error.h"

using namespace sluice;

namespace {
std::map<int32_t, int> histogram(SamplingParams params, const std::vector<float>& logits,
                                 int draws) {
  Sampler sampler(params);
  std::map<int32_t, int> counts;
  for (int i = 0; i < draws; ++i) counts[sampler.sample(logits, {})]++;
  return counts;
}

// The chain written plainly: a comparison sort by (logit desc, id asc), the
// softmax in double, the cuts and the draw from 53 random bits, in that order.
int32_t reference_draw(const SamplingParams& p, const std::vector<float>& logits,
                       std::mt19937_64& rng) {
  std::vector<int32_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  size_t kept = p.top_k > 0 ? std::min<size_t>(p.top_k, order.size()) : order.size();
  std::vector<double> probs(kept);
  double total = 0;
  for (size_t i = 0; i < kept; ++i)
    total += probs[i] = std::exp((logits[order[i]] - logits[order[0]]) / p.temperature);
  for (double& q : probs) q /= total;
  if (p.top_p < 1.0f) {
    double cumulative = 0;
    size_t cut = 0;
    while (cut < kept && (cumulative += probs[cut++]) < p.top_p) {
    }
    kept = cut;
  }
  while (kept > 1 && probs[kept - 1] == 0.0) --kept;
  double mass = 0;
  for (size_t i = 0; i < kept; ++i) mass += probs[i];
  const double u = static_cast<double>(rng() >> 11) * 0x1.0p-53 * mass;
  double cumulative = 0;
  for (size_t i = 0; i < kept; ++i)
    if (u < (cumulative += probs[i])) return order[i];
  return order[kept - 1];
}
}  // namespace

TEST_CASE("greedy takes the largest logit, lowest id on ties") {
  Sampler sampler(SamplingParams{});
  CHECK(sampler.sample(std::vector<float>{0.1f, 3.0f, -1.0f, 3.0f}, {}) == 1);
}

TEST_CASE("a banned id is never sampled, whatever its logit, and a row of banned ids is refused") {
  SamplingParams params;
  params.banned = {1, 3, 99};  // 99 is past the row: ignored
  const std::vector<float> logits{0.5f, 40.0f, 0.25f, 41.0f, 0.0f};
  CHECK(Sampler(params).sample(logits, {}) == 0);
  CHECK(Sampler(SamplingParams{}).sample(logits, {}) == 3);
  params.temperature = 1.0f;
  for (uint64_t seed = 0; seed < 20; ++seed) {
    params.seed = seed;
    const auto counts = histogram(params, logits, 200);
    CHECK(counts.count(1) == 0);
    CHECK(counts.count(3) == 0);
    CHECK(counts.size() == 3);  // 0, 2 and 4 are all drawn at these logits
  }
  params.banned = {0, 1, 2, 3, 4};
  CHECK_THROWS_AS(Sampler(params).sample(logits, {}), Error);
}

TEST_CASE("repetition penalty can change the greedy choice") {
  SamplingParams params;
  params.repetition_penalty = 2.0f;
  Sampler sampler(params);
  const std::vector<float> logits{2.0f, 1.5f, -4.0f};
  const std::vector<int32_t> context{0};
  CHECK(sampler.sample(logits, context) == 1);  // 2.0 / 2 = 1.0 < 1.5
  CHECK(Sampler(SamplingParams{}).sample(logits, context) == 0);
}

TEST_CASE("top-k keeps only the k best") {
  SamplingParams params;
  params.temperature = 1.0f;
  params.top_k = 2;
  const auto counts = histogram(params, {1.0f, 0.9f, 0.8f, 0.7f}, 2000);
  CHECK(counts.size() == 2);
  CHECK(counts.count(0) == 1);
  CHECK(counts.count(1) == 1);
}

TEST_CASE("top-p stops once the mass is reached") {
  SamplingParams params;
  params.temperature = 1.0f;
  params.top_p = 0.5f;
  // softmax of {ln 6, ln 3, ln 1} = {0.6, 0.3, 0.1}: the first alone reaches 0.5.
  const auto counts = histogram(params, {std::log(6.0f), std::log(3.0f), 0.0f}, 500);
  CHECK(counts.size() == 1);
  params.top_p = 0.85f;
  CHECK(histogram(params, {std::log(6.0f), std::log(3.0f), 0.0f}, 2000).size() == 2);
}

TEST_CASE("min-p drops tokens far below the best") {
  SamplingParams params;
  params.temperature = 1.0f;
  params.min_p = 0.2f;
  // probabilities 0.6 / 0.3 / 0.1: 0.1 < 0.2 * 0.6 is dropped.
  const auto counts = histogram(params, {std::log(6.0f), std::log(3.0f), 0.0f}, 3000);
  CHECK(counts.size() == 2);
  CHECK(counts.count(2) == 0);
}

TEST_CASE("draws follow the distribution and the seed") {
  SamplingParams params;
  params.temperature = 1.0f;
  params.seed = 42;
  const auto counts = histogram(params, {std::log(3.0f), 0.0f}, 8000);
  CHECK(counts.at(0) == doctest::Approx(6000).epsilon(0.05));
  CHECK(histogram(params, {0.3f, 0.2f, 0.1f, 0.0f}, 50) ==
        histogram(params, {0.3f, 0.2f, 0.1f, 0.0f}, 50));
  SamplingParams other = params;
  other.seed = 43;
  CHECK(histogram(params, {0.3f, 0.2f, 0.1f, 0.0f}, 50) !=
        histogram(other, {0.3f, 0.2f, 0.1f, 0.0f}, 50));
}

TEST_CASE("draws are exactly those of the chain over a comparison sort, ties and -0 included") {
  for (uint64_t seed = 1; seed <= 30; ++seed) {
    std::mt19937_64 make(seed);
    std::normal_distribution<float> normal(0.0f, 2.0f);
    // Coarse logits so ties are common; signed zeros and masked tokens too.
    std::vector<float> logits(3000);
    for (float& l : logits) l = std::round(normal(make) * 4.0f) / 4.0f;
    for (size_t i = 0; i < logits.size(); i += 97) logits[i] = i % 2 ? -0.0f : 0.0f;
    for (size_t i = 5; i < logits.size(); i += 31)
      logits[i] = -std::numeric_limits<float>::infinity();
    for (const auto& [temp, top_k, top_p] :
         {std::tuple{1.0f, 0, 1.0f}, {0.7f, 40, 1.0f}, {1.3f, 0, 0.9f}}) {
      SamplingParams params;
      params.temperature = temp;
      params.top_k = top_k;
      params.top_p = top_p;
      params.seed = seed;
      Sampler sampler(params);
      std::mt19937_64 rng(seed);
      for (int draw = 0; draw < 20; ++draw) {
        INFO("seed ", seed, " temp ", temp, " draw ", draw);
        CHECK(sampler.sample(logits, {}) == reference_draw(params, logits, rng));
      }
    }
  }
}

TEST_CASE("a high temperature flattens, a low one sharpens") {
  SamplingParams params;
  params.temperature = 0.05f;
  CHECK(histogram(params, {1.0f, 0.5f}, 500).size() == 1);
  params.temperature = 100.0f;
  CHECK(histogram(params, {1.0f, 0.5f}, 2000).at(1) > 900);
}

TEST_CASE("out-of-range parameters are refused by flag name") {
  SamplingParams params;
  params.top_p = 0.0f;
  CHECK_THROWS_WITH_AS(Sampler{params}, doctest::Contains("--top-p"), Error);
  params = {};
  params.temperature = -1.0f;
  CHECK_THROWS_WITH_AS(Sampler{params}, doctest::Contains("--temp"), Error);
}
