// attend.h at every instruction set against its arithmetic written out here
// (16 lanes of rounded products, the fold; weighted sums in position order),
// bit for bit, over odd lengths, strides and query groups; nothing written
// outside the outputs; each result near the exact value; and the half
// conversions against proto/f16.h.
#include "compute/kernels/attend.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "proto/f16.h"
#include "tests/compute/kernels/isas_under_test.h"

using namespace sluice;
using namespace sluice::kernels;

namespace {

std::vector<float> random_floats(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// The documented lane_dot, written out: lane l holds the products at i ≡ l (mod 16).
float documented_dot(const float* a, const float* b, uint32_t n) {
  float lanes[16] = {};
  for (uint32_t i = 0; i < n; ++i) {
    const float product = a[i] * b[i];
    lanes[i % 16] = lanes[i % 16] + product;
  }
  float s[8], t[4];
  for (int l = 0; l < 8; ++l) s[l] = lanes[l] + lanes[l + 8];
  for (int l = 0; l < 4; ++l) t[l] = s[l] + s[l + 4];
  return (t[0] + t[2]) + (t[1] + t[3]);
}

bool same_bits(float a, float b) {
  return std::memcmp(&a, &b, sizeof a) == 0;
}

// Each query its own number of rows, the first `count`, the others fewer.
std::vector<uint32_t> query_counts(uint32_t queries, uint32_t count) {
  std::vector<uint32_t> counts(queries);
  for (uint32_t g = 0; g < queries; ++g) counts[g] = count - (g * 7) % count;
  return counts;
}

constexpr uint32_t kLengths[] = {1, 5, 8, 15, 16, 17, 63, 64, 72, 127, 128, 136, 512, 576};

}  // namespace

TEST_CASE("lane_dot is the documented 16-lane sum at every instruction set, near the exact dot") {
  for (Isa isa : testing::isas_under_test())
    for (const uint32_t n : {0u, 1u, 5u, 15u, 16u, 17u, 64u, 127u, 128u, 512u, 576u}) {
      CAPTURE(isa_name(isa));
      CAPTURE(n);
      // One past the end, so a read beyond n would change the sum.
      std::vector<float> a = random_floats(n + 1, 3 + n), b = random_floats(n + 1, 5 + n, 4.0f);
      a[n] = b[n] = 1e30f;
      double exact = 0, magnitude = 0;
      for (uint32_t i = 0; i < n; ++i) {
        exact += double{a[i]} * b[i];
        magnitude += std::fabs(double{a[i]} * b[i]);
      }
      const float got = lane_dot(a.data(), b.data(), n, isa);
      CHECK(same_bits(got, documented_dot(a.data(), b.data(), n)));
      CHECK(std::fabs(got - exact) <= 1e-6 * (std::fabs(exact) + magnitude));
    }
}

TEST_CASE("attention_scores: each query against its strided rows, scaled, nothing else written") {
  for (Isa isa : testing::isas_under_test())
    for (const uint32_t n : kLengths)
      for (const uint32_t queries : {1u, 3u, 8u})
        for (const uint32_t count : {1u, 2u, 19u}) {
          CAPTURE(isa_name(isa));
          CAPTURE(n);
          CAPTURE(queries);
          CAPTURE(count);
          const size_t k_stride = 2 * n + 3;  // rows neither adjacent nor aligned
          const size_t score_stride = count + 2;
          const std::vector<float> q = random_floats(size_t{queries} * n, n + queries);
          const std::vector<float> k = random_floats(count * k_stride, 7 * n + count, 2.0f);
          const float scale = 0.0883883f;
          std::vector<float> scores(queries * score_stride, -7.0f);
          const std::vector<uint32_t> counts = query_counts(queries, count);
          attention_scores(q.data(), counts, k.data(), k_stride, n, scale, scores.data(),
                           score_stride, isa);
          for (uint32_t g = 0; g < queries; ++g)
            for (uint32_t p = 0; p < score_stride; ++p) {
              const float want =
                  p < counts[g]
                      ? documented_dot(q.data() + size_t{g} * n, k.data() + p * k_stride, n) * scale
                      : -7.0f;
              CHECK(same_bits(scores[g * score_stride + p], want));
            }
        }
}

TEST_CASE("attention_values: each query's weighted rows added to its outputs in position order") {
  for (Isa isa : testing::isas_under_test())
    for (const uint32_t n : kLengths)
      for (const uint32_t queries : {1u, 2u, 5u})
        for (const uint32_t count : {1u, 3u, 40u, n < 64 ? 1500u : 100u}) {  // over row blocks
          CAPTURE(isa_name(isa));
          CAPTURE(n);
          CAPTURE(queries);
          CAPTURE(count);
          const size_t v_stride = n + 9, weight_stride = count + 1;
          const std::vector<float> v = random_floats(count * v_stride, 11 * n + count, 3.0f);
          std::vector<float> weights = random_floats(queries * weight_stride, n + 5 * count);
          for (float& w : weights) w = std::fabs(w) / static_cast<float>(count);
          const std::vector<uint32_t> counts = query_counts(queries, count);
          // A weight past a query's count would make its outputs NaN.
          for (uint32_t g = 0; g < queries; ++g)
            for (uint32_t p = counts[g]; p < count; ++p) weights[g * weight_stride + p] = NAN;
          // The outputs start non-zero (the kernel adds to them), with a guard past the end.
          std::vector<float> out = random_floats(size_t{queries} * n + 1, n + queries + count);
          out.back() = -5.0f;
          std::vector<float> want(out);
          for (uint32_t g = 0; g < queries; ++g)
            for (uint32_t p = 0; p < counts[g]; ++p)
              for (uint32_t i = 0; i < n; ++i) {
                const float product = weights[g * weight_stride + p] * v[p * v_stride + i];
                want[size_t{g} * n + i] = want[size_t{g} * n + i] + product;
              }
          attention_values(weights.data(), weight_stride, counts, v.data(), v_stride, n, out.data(),
                           isa);
          bool all_same = true;
          for (size_t i = 0; i < out.size(); ++i) all_same = all_same && same_bits(out[i], want[i]);
          CHECK(all_same);
        }
}

TEST_CASE("rows to and from halves: proto/f16.h's rounding at every instruction set, saturated at 65504") {
  std::mt19937 rng(77);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> values;
  for (float scale : {1.0f, 1e-3f, 1e-5f, 1e-7f, 300.0f, 3e4f})
    for (int i = 0; i < 64; ++i) values.push_back(normal(rng) * scale);
  // Exactly halfway between two halves (ties to even), either side of the
  // largest finite half, and infinities.
  for (float tie : {1.0f + 1.0f / 2048, 1.0f + 3.0f / 2048, 6.1035156e-05f * 1.5f})
    values.push_back(tie), values.push_back(-tie);
  for (float big : {65504.0f, 65519.0f, 65520.0f, 1e6f, -1e6f, INFINITY, -INFINITY}) values.push_back(big);
  while (values.size() % 8 != 3) values.push_back(normal(rng));  // a tail past the vector body
  const auto n = static_cast<uint32_t>(values.size());
  for (Isa isa : testing::isas_under_test()) {
    CAPTURE(isa_name(isa));
    std::vector<uint16_t> halves(n + 1, 0xabcd);
    to_half(values.data(), n, halves.data(), isa);
    bool rounded = halves[n] == 0xabcd, finite = true;
    for (uint32_t i = 0; i < n; ++i) {
      const float clamped = std::min(65504.0f, std::max(-65504.0f, values[i]));
      rounded = rounded && halves[i] == f32_to_f16(clamped);
      finite = finite && std::isfinite(f16_to_f32(halves[i]));
    }
    CHECK(rounded);
    CHECK(finite);
    // Two rows a stride apart, read back exactly.
    std::vector<uint16_t> rows(2 * (n + 5));
    std::copy(halves.begin(), halves.begin() + n, rows.begin());
    std::copy(halves.begin(), halves.begin() + n, rows.begin() + n + 5);
    std::vector<float> back(2 * n + 1, -7.0f);
    from_half(rows.data(), n + 5, 2, n, back.data(), isa);
    bool exact = back[2 * n] == -7.0f;
    for (uint32_t i = 0; i < 2 * n; ++i) exact = exact && same_bits(back[i], f16_to_f32(halves[i % n]));
    CHECK(exact);
  }
}
