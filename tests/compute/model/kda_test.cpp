// tests/compute/model/kda_test.cpp: the chunked KDA form equals the
// token-by-token recurrence (outputs and final state, 1e-5) for chunk sizes
// 1, 4, 16 and 64 over 70 tokens from a non-zero carried-in state, with
// decays as strong as Kimi-Linear's gate produces; and the recurrence
// itself on a hand-worked two-token case.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "compute/model/kda.h"

using namespace sluice;

namespace {

struct Sequence {
  std::vector<float> q, k, v, g, beta;
};

Sequence random_sequence(uint32_t tokens, uint32_t d, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  Sequence s;
  s.q.resize(size_t{tokens} * d), s.k.resize(size_t{tokens} * d), s.v.resize(size_t{tokens} * d);
  s.g.resize(size_t{tokens} * d), s.beta.resize(tokens);
  for (uint32_t t = 0; t < tokens; ++t) {
    float qn = 0, kn = 0;
    for (uint32_t c = 0; c < d; ++c) {
      const size_t i = size_t{t} * d + c;
      s.q[i] = normal(rng), s.k[i] = normal(rng), s.v[i] = normal(rng);
      qn += s.q[i] * s.q[i], kn += s.k[i] * s.k[i];
      // g = −exp(A_log) · softplus(z), A_log = ln U(1, 16): from ≈ −0.05 to ≈ −40.
      const float a = 1.0f + 15.0f * unit(rng), z = 2.0f * normal(rng);
      s.g[i] = -a * std::log1p(std::exp(z));
    }
    for (uint32_t c = 0; c < d; ++c) {
      s.q[size_t{t} * d + c] /= std::sqrt(qn) * std::sqrt(static_cast<float>(d));
      s.k[size_t{t} * d + c] /= std::sqrt(kn);
    }
    s.beta[t] = unit(rng);
  }
  return s;
}

float max_abs_difference(const std::vector<float>& a, const std::vector<float>& b) {
  float worst = 0.0f;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]));
  return worst;
}

}  // namespace

TEST_CASE("chunked KDA equals the recurrence for chunk sizes 1, 4, 16, 64 from a carried-in state") {
  const uint32_t tokens = 70, d = 16;
  const Sequence s = random_sequence(tokens, d, 11);
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 0.5f);
  std::vector<float> start(size_t{d} * d);
  for (float& x : start) x = normal(rng);

  std::vector<float> reference_state = start, reference_out(size_t{tokens} * d);
  std::vector<float> recurrent_scratch;
  kda_recurrent({s.q.data(), s.k.data(), s.v.data(), s.g.data(), s.beta.data()}, tokens, d, reference_state.data(),
                reference_out.data(), recurrent_scratch, kernels::Isa::kScalar);
  float output_scale = 0.0f;
  for (float x : reference_out) output_scale = std::max(output_scale, std::abs(x));
  REQUIRE(output_scale > 0.1f);  // the comparison below is not of zeros

  for (uint32_t chunk : {1u, 4u, 16u, 64u}) {
    CAPTURE(chunk);
    std::vector<float> state = start, out(size_t{tokens} * d), scratch;
    for (uint32_t at = 0; at < tokens; at += chunk) {
      const uint32_t n = std::min(chunk, tokens - at);
      const size_t o = size_t{at} * d;
      kda_chunk({&s.q[o], &s.k[o], &s.v[o], &s.g[o], &s.beta[at]}, n, d, state.data(), &out[o], scratch);
    }
    CHECK(max_abs_difference(out, reference_out) < 1e-5f);
    CHECK(max_abs_difference(state, reference_state) < 1e-5f);
  }
}

TEST_CASE("the recurrence decays first, then writes the delta, then reads the updated state") {
  // d = 1: S ← e^g S; r = S k; S ← S + k β (v − r); o = S q.
  const float q[2] = {1.0f, 0.5f}, k[2] = {1.0f, 1.0f}, v[2] = {2.0f, -1.0f};
  const float g[2] = {std::log(0.5f), std::log(0.25f)}, beta[2] = {0.5f, 1.0f};
  float state = 4.0f, out[2];
  std::vector<float> scratch;
  kda_recurrent({q, k, v, g, beta}, 2, 1, &state, out, scratch, kernels::Isa::kScalar);
  // Token 0: S = 2; r = 2; S = 2 + 0.5·(2 − 2) = 2; o = 2.
  // Token 1: S = 0.5; r = 0.5; S = 0.5 + 1·(−1 − 0.5) = −1; o = −0.5.
  CHECK(out[0] == doctest::Approx(2.0f));
  CHECK(out[1] == doctest::Approx(-0.5f));
  CHECK(state == doctest::Approx(-1.0f));
}
