// delta_rule.h at every instruction set against its arithmetic written out
// here in four plain passes over the state (decay, predict, update, read), bit
// for bit, over head sizes the vector body tiles and one it does not, over
// several tokens from a non-zero state; and near the exact (double) step.
#include "compute/kernels/delta_rule.h"

#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "tests/compute/kernels/isas_under_test.h"

using namespace sluice;
using namespace sluice::kernels;

namespace {

struct Token {
  std::vector<float> decay, k, q, v;
  float beta;
};

Token random_token(uint32_t d, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  Token t{std::vector<float>(d), std::vector<float>(d), std::vector<float>(d), std::vector<float>(d), unit(rng)};
  for (uint32_t c = 0; c < d; ++c) {
    t.decay[c] = std::exp(-4.0f * unit(rng));
    t.k[c] = normal(rng) / std::sqrt(static_cast<float>(d));
    t.q[c] = normal(rng) / std::sqrt(static_cast<float>(d));
    t.v[c] = normal(rng);
  }
  return t;
}

// delta_rule.h's arithmetic, one pass per line of it (this file is built
// without FMA contraction's instructions: products round before sums).
template <typename T>
void documented_step(std::vector<T>& s, uint32_t d, const Token& in, std::vector<T>& out) {
  std::vector<T> r(d, T{0});
  for (uint32_t c = 0; c < d; ++c)
    for (uint32_t j = 0; j < d; ++j) s[size_t{c} * d + j] = s[size_t{c} * d + j] * T(in.decay[c]);
  for (uint32_t c = 0; c < d; ++c)
    for (uint32_t j = 0; j < d; ++j) r[j] = r[j] + s[size_t{c} * d + j] * T(in.k[c]);
  for (uint32_t c = 0; c < d; ++c)
    for (uint32_t j = 0; j < d; ++j)
      s[size_t{c} * d + j] = s[size_t{c} * d + j] + T(in.k[c]) * (T(in.beta) * (T(in.v[j]) - r[j]));
  out.assign(d, T{0});
  for (uint32_t c = 0; c < d; ++c)
    for (uint32_t j = 0; j < d; ++j) out[j] = out[j] + s[size_t{c} * d + j] * T(in.q[c]);
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("the delta-rule step gives its documented arithmetic bit for bit at every instruction set") {
  for (uint32_t d : {8u, 24u, 40u, 128u, 12u}) {
    CAPTURE(d);
    std::mt19937 rng(d);
    std::normal_distribution<float> normal(0.0f, 0.5f);
    std::vector<float> start(size_t{d} * d);
    for (float& x : start) x = normal(rng);
    std::vector<Token> tokens;
    for (int t = 0; t < 5; ++t) tokens.push_back(random_token(d, rng));

    for (Isa isa : testing::isas_under_test()) {
      CAPTURE(isa_name(isa));
      std::vector<float> state = start, expected_state = start, predicted(d), out(d), expected;
      std::vector<double> exact_state(start.begin(), start.end()), exact;
      for (const Token& t : tokens) {
        delta_rule_step(state.data(), d, {t.decay.data(), t.k.data(), t.q.data(), t.v.data(), t.beta},
                        predicted.data(), out.data(), isa);
        documented_step(expected_state, d, t, expected);
        documented_step(exact_state, d, t, exact);
        CHECK(same_bits(out, expected));
        CHECK(same_bits(state, expected_state));
        double worst = 0.0, scale = 0.0;
        for (uint32_t j = 0; j < d; ++j) {
          worst = std::max(worst, std::fabs(out[j] - exact[j]));
          scale = std::max(scale, std::fabs(exact[j]));
        }
        REQUIRE(scale > 0.01);  // not a comparison of zeros
        CHECK(worst <= 1e-5 * scale * d);
      }
    }
  }
}
