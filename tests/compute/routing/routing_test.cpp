// tests/compute/routing/routing_test.cpp: both router kinds on hand-worked
// logits: softmax top-k with ties to the lower id and renormalisation;
// sigmoid scores with the selection-only bias, group-limited top-k, the two
// masks for excluded groups, renormalisation and the scaling factor.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "compute/routing/routing.h"
#include "proto/error.h"

using namespace sluice;

namespace {

RouterConfig softmax_router(uint32_t experts, uint32_t top_k, bool normalize) {
  RouterConfig r;
  r.experts = experts;
  r.top_k = top_k;
  r.normalize = normalize;
  return r;
}

RouterConfig sigmoid_router(uint32_t experts, uint32_t top_k, uint32_t groups, uint32_t topk_groups) {
  RouterConfig r;
  r.kind = RouterKind::kSigmoid;
  r.experts = experts;
  r.top_k = top_k;
  r.normalize = true;
  r.scaling = 2.5f;
  r.score_bias = true;
  r.groups = groups;
  r.topk_groups = topk_groups;
  return r;
}

double sigmoid(double v) { return 1.0 / (1.0 + std::exp(-v)); }

}  // namespace

TEST_CASE("softmax: top-k by probability, ties to the lower expert id") {
  const std::vector<float> logits{0.5f, 2.0f, -1.0f, 2.0f, 1.0f};
  const Routing r = route(softmax_router(5, 3, false), logits);
  CHECK(r.experts == std::vector<uint32_t>{1, 3, 4});
  double total = 0;
  for (float l : logits) total += std::exp(l);
  CHECK(r.weights[0] == doctest::Approx(std::exp(2.0) / total).epsilon(1e-6));
  CHECK(r.weights[2] == doctest::Approx(std::exp(1.0) / total).epsilon(1e-6));
}

TEST_CASE("softmax: normalisation rescales the chosen weights to sum to one") {
  const std::vector<float> logits{0.1f, 0.7f, 0.3f, -0.4f};
  const Routing plain = route(softmax_router(4, 2, false), logits);
  const Routing normalized = route(softmax_router(4, 2, true), logits);
  CHECK(plain.experts == normalized.experts);
  CHECK(plain.weights[0] + plain.weights[1] < 0.99f);
  CHECK(normalized.weights[0] + normalized.weights[1] == doctest::Approx(1.0f));
  CHECK(normalized.weights[0] / normalized.weights[1] == doctest::Approx(plain.weights[0] / plain.weights[1]));
}

TEST_CASE("rank_experts: softmax order, ties broken on the rounded probability") {
  const std::vector<float> logits = {0.5f, 2.0f, 2.0f, -1.0f, 1.0f};
  const RouterConfig router = softmax_router(5, 2, false);
  CHECK(rank_experts(router, logits, {}, 3) == std::vector<uint32_t>{1, 2, 4});
  CHECK(rank_experts(router, logits, {}, 9).size() == 5);
  // Distinct logits that round to the same probability tie by id
  // (exp(-1e-8) is 1.0f), though expert 1's logit is larger.
  const std::vector<float> close = {0.0f, 1e-8f, -5.0f};
  REQUIRE(close[1] > close[0]);
  CHECK(rank_experts(softmax_router(3, 1, false), close, {}, 1) == std::vector<uint32_t>{0});
}

TEST_CASE("sigmoid: the bias picks the experts, the unbiased scores weigh them") {
  RouterConfig router = sigmoid_router(4, 2, 1, 1);
  const std::vector<float> logits{1.0f, 0.5f, 0.0f, -1.0f};
  // Expert 3's large bias wins selection although its score is the lowest.
  const std::vector<float> bias{0.0f, 0.0f, 0.0f, 1.0f};
  const Routing r = route(router, logits, bias);
  CHECK(r.experts == std::vector<uint32_t>{3, 0});
  const double s3 = sigmoid(-1.0), s0 = sigmoid(1.0);
  CHECK(r.weights[0] == doctest::Approx(2.5 * s3 / (s3 + s0)).epsilon(1e-6));
  CHECK(r.weights[1] == doctest::Approx(2.5 * s0 / (s3 + s0)).epsilon(1e-6));
  router.normalize = false;
  const Routing raw = route(router, logits, bias);
  CHECK(raw.weights[0] == doctest::Approx(2.5 * s3).epsilon(1e-6));
  // Kimi-Linear's released code weighs with the biased scores instead.
  router.normalize = true;
  router.weights_from_biased = true;
  const Routing biased = route(router, logits, bias);
  CHECK(biased.experts == r.experts);
  CHECK(biased.weights[0] == doctest::Approx(2.5 * (s3 + 1.0) / (s3 + 1.0 + s0)).epsilon(1e-6));
}

TEST_CASE("sigmoid: group-limited selection excludes a high score in a losing group") {
  // 8 experts in 4 groups of 2; keep 2 groups. Group scores (sum of both):
  // g0 = σ(3)+σ(-4), g1 = σ(1)+σ(1), g2 = σ(0.5)+σ(0.5), g3 = σ(-2)+σ(-2).
  // g1 and g2 win, so expert 0 (the single best score) is excluded.
  const RouterConfig router = sigmoid_router(8, 2, 4, 2);
  const std::vector<float> logits{3.0f, -4.0f, 1.0f, 1.0f, 0.5f, 0.5f, -2.0f, -2.0f};
  const std::vector<float> bias(8, 0.0f);
  REQUIRE(sigmoid(3) + sigmoid(-4) < 2 * sigmoid(0.5));
  const Routing r = route(router, logits, bias);
  CHECK(r.experts == std::vector<uint32_t>{2, 3});
  // Beyond top-k, the kept groups rank first, then the masked ones.
  const auto ranked = rank_experts(router, logits, bias, 4);
  CHECK(ranked == std::vector<uint32_t>{2, 3, 4, 5});
}

TEST_CASE("sigmoid: the masks of excluded groups differ when kept experts score below zero") {
  // Negative biases push every kept expert's selection score below 0: with
  // the 0 mask (transformers) an excluded expert outranks them, with −∞
  // (DeepSeek's inference code) it never does.
  RouterConfig router = sigmoid_router(4, 2, 2, 1);
  const std::vector<float> logits{0.0f, 0.0f, -6.0f, -6.0f};
  const std::vector<float> bias{-0.6f, -0.6f, -0.1f, -0.1f};
  // Group 0: 2(0.5 - 0.6) = -0.2; group 1: 2(σ(-6) - 0.1) ≈ -0.195 wins,
  // and its experts' selection scores are ≈ -0.0975 < 0.
  REQUIRE(2 * (sigmoid(-6) - 0.1) > -0.2);
  router.group_mask = GroupMask::kNegativeInfinity;
  CHECK(route(router, logits, bias).experts == std::vector<uint32_t>{2, 3});
  router.group_mask = GroupMask::kZero;
  CHECK(route(router, logits, bias).experts == std::vector<uint32_t>{0, 1});
}

TEST_CASE("inputs of the wrong size are refused") {
  const RouterConfig router = sigmoid_router(4, 2, 1, 1);
  CHECK_THROWS_AS(route(router, std::vector<float>(3), std::vector<float>(4)), Error);
  CHECK_THROWS_AS(route(router, std::vector<float>(4), std::vector<float>(2)), Error);
}
