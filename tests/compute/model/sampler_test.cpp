// The sampling chain: greedy, each filter's cut, the penalty and seeding.
#include <doctest/doctest.h>

#include <map>
#include <vector>

#include "compute/model/sampler.h"
#include "proto/error.h"

using namespace sluice;

namespace {
std::map<int32_t, int> histogram(SamplingParams params, const std::vector<float>& logits, int draws) {
  Sampler sampler(params);
  std::map<int32_t, int> counts;
  for (int i = 0; i < draws; ++i) counts[sampler.sample(logits, {})]++;
  return counts;
}
}  // namespace

TEST_CASE("greedy takes the largest logit, lowest id on ties") {
  Sampler sampler(SamplingParams{});
  CHECK(sampler.sample(std::vector<float>{0.1f, 3.0f, -1.0f, 3.0f}, {}) == 1);
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
  CHECK(histogram(params, {0.3f, 0.2f, 0.1f, 0.0f}, 50) == histogram(params, {0.3f, 0.2f, 0.1f, 0.0f}, 50));
  SamplingParams other = params;
  other.seed = 43;
  CHECK(histogram(params, {0.3f, 0.2f, 0.1f, 0.0f}, 50) != histogram(other, {0.3f, 0.2f, 0.1f, 0.0f}, 50));
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
