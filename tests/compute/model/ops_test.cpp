// Op tests of the f32 layer pieces (RMSNorm, RoPE in both pairings,
// softmax, GQA attention) against plain double-precision versions
// written here from the equations, over many shapes and odd sizes, plus the
// exact f32 orders the engine documents for the reference's sake.
#include "compute/model/ops.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "compute/kernels/thread_pool.h"
#include "compute/model/attention.h"
#include "proto/error.h"

using namespace sluice;

namespace {

std::vector<float> random_floats(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// |a − b| within `rel` of the magnitude `scale` the values are built from.
void check_close(double got, double want, double scale, double rel) {
  CHECK(std::fabs(got - want) <= rel * (std::fabs(want) + scale));
}

}  // namespace

TEST_CASE("rms_norm matches the double-precision equation and its documented f32 order") {
  uint32_t seed = 1;
  for (uint32_t n : {1u, 2u, 7u, 64u, 129u, 2048u, 5003u})
    for (float eps : {1e-6f, 1e-5f}) {
      CAPTURE(n);
      const std::vector<float> x = random_floats(n, seed++, 3.0f), w = random_floats(n, seed++);
      std::vector<float> y(n + 1, -5.0f);
      rms_norm(x.data(), w.data(), n, eps, y.data());
      CHECK(y[n] == -5.0f);
      double squares = 0;
      for (float v : x) squares += double{v} * v;
      const double inverse = 1.0 / std::sqrt(squares / n + eps);
      float sum = 0.0f;  // the documented order: squares summed in index order in f32
      for (uint32_t i = 0; i < n; ++i) sum += x[i] * x[i];
      const float inverse_f32 = 1.0f / std::sqrt(sum / static_cast<float>(n) + eps);
      for (uint32_t i = 0; i < n; ++i) {
        check_close(y[i], w[i] * x[i] * inverse, 1e-3, 1e-5);
        CHECK(y[i] == w[i] * (x[i] * inverse_f32));
      }
      std::vector<float> in_place = x;  // y may be x
      rms_norm(in_place.data(), w.data(), n, eps, in_place.data());
      CHECK(std::equal(in_place.begin(), in_place.end(), y.begin()));
    }
}

TEST_CASE("RoPE rotates each pair by position × frequency, half-split and adjacent, partial dims") {
  struct Case {
    RotaryPairing pairing;
    uint32_t head_dim, dims;
    float theta;
  };
  for (const Case c : {Case{RotaryPairing::kHalfSplit, 64, 64, 10000.0f},
                       Case{RotaryPairing::kHalfSplit, 128, 128, 1e6f},
                       Case{RotaryPairing::kAdjacent, 64, 64, 10000.0f},
                       Case{RotaryPairing::kAdjacent, 96, 32, 50000.0f},
                       Case{RotaryPairing::kHalfSplit, 6, 6, 10000.0f}}) {
    RopeConfig rope;
    rope.theta = c.theta;
    rope.dims = c.dims;
    rope.pairing = c.pairing;
    const uint32_t positions = 3000;
    const RopeTable table(rope, positions);
    const std::vector<float> inverse = rope.inverse_frequencies();
    REQUIRE(inverse.size() == c.dims / 2);
    for (uint32_t i = 0; i < c.dims / 2; ++i)  // the standard 1 / θ^(2i/d)
      check_close(inverse[i], 1.0 / std::pow(double{c.theta}, 2.0 * i / c.dims), 0, 1e-5);
    for (uint32_t position : {0u, 1u, 17u, 511u, 2999u}) {
      CAPTURE(c.head_dim);
      CAPTURE(c.dims);
      CAPTURE(position);
      const std::vector<float> head = random_floats(c.head_dim, position + c.head_dim);
      std::vector<float> rotated = head;
      table.rotate(rotated.data(), position);
      const uint32_t half = c.dims / 2;
      for (uint32_t i = 0; i < half; ++i) {
        const uint32_t a = c.pairing == RotaryPairing::kHalfSplit ? i : 2 * i;
        const uint32_t b = c.pairing == RotaryPairing::kHalfSplit ? i + half : 2 * i + 1;
        // The angle as the engine and the reference form it: f32 position × f32 frequency.
        const double angle = static_cast<float>(position) * inverse[i];
        check_close(rotated[a], head[a] * std::cos(angle) - head[b] * std::sin(angle), 1e-3, 2e-5);
        check_close(rotated[b], head[b] * std::cos(angle) + head[a] * std::sin(angle), 1e-3, 2e-5);
      }
      for (uint32_t d = c.dims; d < c.head_dim; ++d)
        CHECK(rotated[d] == head[d]);  // past the rope part
    }
    std::vector<float> head(c.head_dim);
    CHECK_THROWS_WITH_AS(table.rotate(head.data(), positions), doctest::Contains("position 3000"),
                         Error);
  }
}

TEST_CASE("softmax subtracts the max, survives large scores, sums in position order") {
  for (uint32_t n : {1u, 2u, 5u, 100u, 4097u}) {
    std::vector<float> scores = random_floats(n, n, 30.0f);
    scores[n / 2] = 500.0f;  // exp(500) overflows unless the max is subtracted
    const std::vector<float> original = scores;
    const float total = softmax_unnormalized(scores.data(), n);
    double want_total = 0;
    for (float s : original) want_total += std::exp(double{s} - 500.0);
    check_close(total, want_total, 0, 1e-5);
    CHECK(scores[n / 2] == 1.0f);
    float running = 0.0f;
    for (uint32_t p = 0; p < n; ++p) {
      check_close(scores[p], std::exp(double{original[p]} - 500.0), 1e-30, 1e-5);
      running += scores[p];
    }
    CHECK(running == total);
  }
}

TEST_CASE(
    "GQA attention equals softmax(q·k·scale)·v in double, every head group and length, the same "
    "bits at every instruction set") {
  struct Case {
    uint32_t heads, kv_heads, head_dim;
  };
  for (const Case c :
       {Case{4, 4, 16}, Case{8, 2, 64}, Case{6, 1, 8}, Case{16, 16, 128}, Case{3, 3, 5}}) {
    const uint32_t layers = 2, capacity = 70, kv_width = c.kv_heads * c.head_dim;
    MixerState state = KvCache::make_state(layers, capacity, kv_width);
    KvCache cache(state, kv_width);
    for (uint32_t layer = 0; layer < layers; ++layer)
      for (uint32_t p = 0; p < capacity; ++p) {
        const std::vector<float> k = random_floats(kv_width, 7 + p + 1000 * layer),
                                 v = random_floats(kv_width, 9 + p + 1000 * layer);
        std::copy(k.begin(), k.end(), cache.key(layer, p));
        std::copy(v.begin(), v.end(), cache.value(layer, p));
      }
    const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
    std::vector<AttentionScratch> scratch;
    const GqaShape shape{c.heads, c.kv_heads, c.head_dim, scale};
    const size_t width = size_t{c.heads} * c.head_dim;
    for (uint32_t position : {0u, 1u, 9u, 69u}) {
      CAPTURE(c.heads);
      CAPTURE(c.kv_heads);
      CAPTURE(c.head_dim);
      CAPTURE(position);
      const uint32_t layer = 1;
      const std::vector<float> q = random_floats(size_t{c.heads} * c.head_dim, position + 77);
      std::vector<float> out(size_t{c.heads} * c.head_dim + 1, -3.0f);
      attend(q.data(), width, 1, cache, layer, position, shape, out.data(), width, scratch,
             kernels::Exec{kernels::Isa::kScalar, nullptr});
      CHECK(out.back() == -3.0f);
      for (kernels::Isa isa : {kernels::Isa::kAvx2, kernels::Isa::kAvx512}) {
        if (!kernels::isa_supported(isa)) continue;
        std::vector<float> vector_out(out.size(), -3.0f);
        attend(q.data(), width, 1, cache, layer, position, shape, vector_out.data(), width, scratch,
               kernels::Exec{isa, nullptr});
        CHECK_MESSAGE(std::memcmp(vector_out.data(), out.data(), out.size() * sizeof(float)) == 0,
                      kernels::isa_name(isa), " differs from scalar");
      }
      const uint32_t group = c.heads / c.kv_heads;
      for (uint32_t h = 0; h < c.heads; ++h) {
        const size_t kv = size_t{h / group} * c.head_dim;
        std::vector<double> s(position + 1);
        double max_s = -1e300, total = 0;
        for (uint32_t p = 0; p <= position; ++p) {
          double dot = 0;
          for (uint32_t d = 0; d < c.head_dim; ++d)
            dot += double{q[h * c.head_dim + d]} * cache.key(layer, p)[kv + d];
          s[p] = dot * scale;
          max_s = std::max(max_s, s[p]);
        }
        for (double& v : s) total += (v = std::exp(v - max_s));
        for (uint32_t d = 0; d < c.head_dim; ++d) {
          double want = 0;
          for (uint32_t p = 0; p <= position; ++p)
            want += s[p] / total * cache.value(layer, p)[kv + d];
          check_close(out[h * c.head_dim + d], want, 1e-3, 1e-4);
        }
      }
    }
  }
}

TEST_CASE(
    "GQA attention of a chunk, its kv heads over three threads, gives each token the bits it gets "
    "alone on one thread, at every instruction set") {
  struct Case {
    uint32_t heads, kv_heads, head_dim, tokens, first;
  };
  // 40 tokens of group 8 take two passes over the cache (attention.cpp's rows per pass).
  for (const Case c : {Case{4, 4, 16, 5, 0}, Case{8, 1, 64, 40, 17}, Case{16, 16, 128, 12, 50},
                       Case{3, 3, 5, 1, 9}}) {
    CAPTURE(c.heads);
    CAPTURE(c.kv_heads);
    CAPTURE(c.tokens);
    CAPTURE(c.first);
    const uint32_t capacity = c.first + c.tokens, kv_width = c.kv_heads * c.head_dim;
    MixerState state = KvCache::make_state(1, capacity, kv_width);
    KvCache cache(state, kv_width);
    for (uint32_t p = 0; p < capacity; ++p) {
      const std::vector<float> k = random_floats(kv_width, 3 + p),
                               v = random_floats(kv_width, 5 + p);
      std::copy(k.begin(), k.end(), cache.key(0, p));
      std::copy(v.begin(), v.end(), cache.value(0, p));
    }
    const GqaShape shape{c.heads, c.kv_heads, c.head_dim, 0.25f};
    const size_t width = size_t{c.heads} * c.head_dim, stride = width + 3;  // rows not adjacent
    const std::vector<float> q = random_floats(stride * c.tokens, 99);
    std::vector<AttentionScratch> scratch;
    // Three threads: the chunks long enough split their kv heads over the pool.
    kernels::ThreadPool pool(3);
    for (kernels::Isa isa : {kernels::Isa::kScalar, kernels::Isa::kAvx2, kernels::Isa::kAvx512}) {
      if (!kernels::isa_supported(isa)) continue;
      CAPTURE(kernels::isa_name(isa));
      std::vector<float> together(stride * c.tokens, -3.0f);
      attend(q.data(), stride, c.tokens, cache, 0, c.first, shape, together.data(), stride, scratch,
             kernels::Exec{isa, &pool});
      for (uint32_t t = 0; t < c.tokens; ++t) {
        std::vector<float> alone(width);
        attend(q.data() + t * stride, stride, 1, cache, 0, c.first + t, shape, alone.data(), width,
               scratch, kernels::Exec{isa, nullptr});
        CHECK(std::memcmp(alone.data(), together.data() + t * stride, width * sizeof(float)) == 0);
        CHECK(std::all_of(together.begin() + t * stride + width,
                          together.begin() + (t + 1) * stride, [](float x) { return x == -3.0f; }));
      }
    }
  }
}
