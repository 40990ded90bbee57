// The router: softmax, top-k in decreasing probability with ties to the lower
// id, and each family's normalisation of the chosen weights.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "compute/model/transformer.h"

using namespace sluice;

TEST_CASE("top-k by probability, ties to the lower expert id") {
  const std::vector<float> logits{0.5f, 2.0f, -1.0f, 2.0f, 1.0f};
  const Routing r = route(logits, 3, false);
  CHECK(r.experts == std::vector<uint32_t>{1, 3, 4});
  double total = 0;
  for (float l : logits) total += std::exp(l);
  CHECK(r.weights[0] == doctest::Approx(std::exp(2.0) / total).epsilon(1e-6));
  CHECK(r.weights[2] == doctest::Approx(std::exp(1.0) / total).epsilon(1e-6));
}

TEST_CASE("norm_topk_prob rescales the chosen weights to sum to one") {
  const std::vector<float> logits{0.1f, 0.7f, 0.3f, -0.4f};
  const Routing plain = route(logits, 2, false);
  const Routing normalized = route(logits, 2, true);
  CHECK(plain.experts == normalized.experts);
  CHECK(plain.weights[0] + plain.weights[1] < 0.99f);
  CHECK(normalized.weights[0] + normalized.weights[1] == doctest::Approx(1.0f));
  CHECK(normalized.weights[0] / normalized.weights[1] == doctest::Approx(plain.weights[0] / plain.weights[1]));
}
