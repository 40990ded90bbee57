// The decode-once path against rvq_decoded.h's arithmetic written out here
// from the header, quant.h and FORMAT.md, bit for bit at every instruction
// set, thread count (1, 2, 3) and token count, over odd shapes, partial row
// blocks, several tiles and input groups;
// with int8 activations the int8 tiles too, at their largest integers; and
// against the f32 and table arithmetic within their roundings.
#include "compute/kernels/rvq_decoded.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "compute/kernels/rvq.h"
#include "compute/kernels/thread_pool.h"
#include "proto/error.h"
#include "proto/f16.h"
#include "tests/compute/kernels/isas_under_test.h"

using namespace sluice;
using namespace sluice::kernels;

namespace {

struct Fixture {
  uint32_t rows, cols, nv, tokens;
  std::vector<float> codebooks;
  std::vector<uint8_t> indices;
  std::vector<uint16_t> scales;
  std::vector<float> x;

  Fixture(uint32_t rows_, uint32_t cols_, uint32_t tokens_, uint32_t seed)
      : rows(rows_), cols(cols_), nv(cols_ / 4), tokens(tokens_) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
    codebooks.resize(2 * 64 * 4);
    for (float& c : codebooks) c = unit(rng);
    const uint32_t padded = (rows + 31) / 32 * 32;
    indices.resize(size_t{padded} * nv * 48 / 32);
    for (uint8_t& i : indices) i = static_cast<uint8_t>(rng());
    scales.resize(padded);
    for (uint16_t& s : scales) s = f32_to_f16(unit(rng) + 1.5f);
    x.resize(size_t{tokens} * cols);
    for (float& v : x) v = unit(rng);
  }
  RvqMatrixView view() const { return {RvqMatrixShape{rows, cols}, indices.data(), scales.data()}; }
  // FORMAT.md's code of (row r, the vector of column k, stage s).
  int index(uint32_t r, uint32_t k, int s) const {
    const uint8_t* unit = indices.data() + (size_t{r / 32} * nv + k / 4) * 48;
    const uint32_t i = r % 16, h = r % 32 / 16;
    return (unit[16 * s + i] >> (4 * h) & 15) | (unit[32 + i] >> (4 * s + 2 * h) & 3) << 4;
  }
  const float* stage(int s) const { return codebooks.data() + s * 64 * 4; }
  // FORMAT.md reconstruction of w[r][k] before the scale.
  float weight(uint32_t r, uint32_t k) const {
    return stage(0)[index(r, k, 0) * 4 + k % 4] + stage(1)[index(r, k, 1) * 4 + k % 4];
  }
  float documented(uint32_t t, uint32_t r) const {
    float a[16] = {};
    for (uint32_t k = 0; k < cols; ++k)
      a[k % 16] = std::fma(weight(r, k), x[size_t{t} * cols + k], a[k % 16]);
    float s[8], q[4];
    for (int l = 0; l < 8; ++l) s[l] = a[l] + a[l + 8];
    for (int l = 0; l < 4; ++l) q[l] = s[l] + s[l + 4];
    return f16_to_f32(scales[r]) * ((q[0] + q[2]) + (q[1] + q[3]));
  }
  // rvq_decoded.h's σ and integer weights, written out from the header.
  float bound() const {
    float sum = 0.0f;
    for (int s = 0; s < 2; ++s) {
      float m = 0.0f;
      for (int i = 0; i < 256; ++i) m = std::max(m, std::fabs(stage(s)[i]));
      sum += m;
    }
    return sum;
  }
  float sigma() const { return bound() / 125.0f; }
  int32_t integer_weight(uint32_t r, uint32_t k, float inverse) const {
    int32_t sum = 0;
    for (int s = 0; s < 2; ++s)
      sum += static_cast<int32_t>(std::nearbyint(stage(s)[index(r, k, s) * 4 + k % 4] * inverse));
    return sum;
  }
  // quant.h's int8 activations of token t's group g: its scale and integers.
  float input_max(uint32_t t, uint32_t g) const {
    float amax = 0.0f;
    for (uint32_t k = g * 128; k < std::min(cols, g * 128 + 128); ++k)
      amax = std::max(amax, std::fabs(x[size_t{t} * cols + k]));
    return amax;
  }
  int32_t input_integer(uint32_t t, uint32_t k, float amax) const {
    return amax > 0.0f
               ? static_cast<int32_t>(std::nearbyint(x[size_t{t} * cols + k] * (127.0f / amax)))
               : 0;
  }
  // Every output of the documented int8 arithmetic, tokens × rows.
  std::vector<float> documented_int8() const {
    const float inverse = bound() > 0.0f ? 125.0f / bound() : 0.0f;
    std::vector<int32_t> w(size_t{rows} * cols);
    for (uint32_t r = 0; r < rows; ++r)
      for (uint32_t k = 0; k < cols; ++k) w[size_t{r} * cols + k] = integer_weight(r, k, inverse);
    std::vector<float> y(size_t{tokens} * rows);
    for (uint32_t t = 0; t < tokens; ++t)
      for (uint32_t r = 0; r < rows; ++r) {
        float acc = 0.0f;
        for (uint32_t g = 0; g * 128 < cols; ++g) {
          const float amax = input_max(t, g);
          int64_t sum = 0;
          for (uint32_t k = g * 128; k < std::min(cols, g * 128 + 128); ++k)
            sum += int64_t{w[size_t{r} * cols + k]} * input_integer(t, k, amax);
          acc = acc + (amax / 127.0f) * static_cast<float>(sum);
        }
        y[size_t{t} * rows + r] = f16_to_f32(scales[r]) * (sigma() * acc);
      }
    return y;
  }
};

}  // namespace

TEST_CASE(
    "decoded rvq matmul equals its documented arithmetic at every ISA, thread and token count") {
  uint32_t seed = 1;
  for (uint32_t rows : {1, 17, 33, 70, 200})
    for (uint32_t cols : {8, 24, 136, 520})
      for (uint32_t tokens : {1, 2, 3, 4, 5, 6, 7, 9}) {
        const Fixture f(rows, cols, tokens, seed++);
        const RvqCodebooks books(f.stage(0), f.stage(1));
        std::vector<float> documented(size_t{tokens} * rows);
        for (uint32_t t = 0; t < tokens; ++t)
          for (uint32_t r = 0; r < rows; ++r) documented[size_t{t} * rows + r] = f.documented(t, r);
        for (Isa isa : testing::isas_under_test())
          for (size_t threads : {1, 2, 3}) {
            CAPTURE(rows);
            CAPTURE(cols);
            CAPTURE(tokens);
            CAPTURE(std::string(isa_name(isa)));
            CAPTURE(threads);
            ThreadPool pool(threads);
            std::vector<float> y(documented.size() + 3, -9.0f);
            rvq_matmul_decoded(books, f.view(), f.x.data(), tokens, y.data(), Exec{isa, &pool});
            for (size_t i = documented.size(); i < y.size(); ++i) CHECK(y[i] == -9.0f);
            y.resize(documented.size());
            CHECK(std::memcmp(y.data(), documented.data(), y.size() * sizeof(float)) == 0);
          }
      }
}

TEST_CASE(
    "with int8 activations, decoded rvq matmul takes the documented int8 arithmetic from "
    "kRvqInt8TilesFrom tokens and the f32 one below, at every ISA and thread count") {
  uint32_t seed = 700;
  for (uint32_t rows : {1, 17, 200})
    for (uint32_t cols : {8, 136, 520})
      for (uint32_t tokens : {1u, 4u, kRvqInt8TilesFrom, 6u, 7u, 9u}) {
        const Fixture f(rows, cols, tokens, seed++);
        const RvqCodebooks books(f.stage(0), f.stage(1));
        std::vector<float> documented(size_t{tokens} * rows);
        if (tokens >= kRvqInt8TilesFrom) {
          documented = f.documented_int8();
        } else {
          for (uint32_t t = 0; t < tokens; ++t)
            for (uint32_t r = 0; r < rows; ++r)
              documented[size_t{t} * rows + r] = f.documented(t, r);
        }
        for (Isa isa : testing::isas_under_test())
          for (size_t threads : {1, 3}) {
            CAPTURE(rows);
            CAPTURE(cols);
            CAPTURE(tokens);
            CAPTURE(std::string(isa_name(isa)));
            CAPTURE(threads);
            ThreadPool pool(threads);
            std::vector<float> y(documented.size() + 3, -9.0f);
            rvq_matmul_decoded(books, f.view(), f.x.data(), tokens, y.data(),
                               Exec{isa, &pool, TrunkActivations::kInt8});
            for (size_t i = documented.size(); i < y.size(); ++i) CHECK(y[i] == -9.0f);
            y.resize(documented.size());
            CHECK(std::memcmp(y.data(), documented.data(), y.size() * sizeof(float)) == 0);
          }
      }
}

TEST_CASE("int8 tiles hold the largest integer weights and inputs exactly") {
  // Each stage's entry 0 is +1 and entry 1 is −1 in every dimension, so rows
  // picking them reach |q0 + q1| = 124 (2 · round(62.5)), and ±1 inputs reach |xq| = 127:
  // the byte sums and the dot products' int16 pairs at their largest.
  Fixture f(70, 520, 9, 21);
  for (int s = 0; s < 2; ++s)
    for (int j = 0; j < 4; ++j) {
      f.codebooks[(s * 64 + 0) * 4 + j] = 1.0f;
      f.codebooks[(s * 64 + 1) * 4 + j] = -1.0f;
    }
  // Codes 0 or 1 only: low bits 0 or 1 in each nibble, high bits 0.
  std::mt19937 rng(5);
  for (size_t i = 0; i < f.indices.size(); ++i)
    f.indices[i] = i % 48 < 32 ? static_cast<uint8_t>((rng() % 2) | (rng() % 2) << 4) : 0;
  for (float& v : f.x) v = rng() % 2 == 0 ? 1.0f : -1.0f;
  const RvqCodebooks books(f.stage(0), f.stage(1));
  const std::vector<float> documented = f.documented_int8();
  for (Isa isa : testing::isas_under_test()) {
    CAPTURE(std::string(isa_name(isa)));
    std::vector<float> y(documented.size());
    rvq_matmul_decoded(books, f.view(), f.x.data(), f.tokens, y.data(),
                       Exec{isa, nullptr, TrunkActivations::kInt8});
    CHECK(std::memcmp(y.data(), documented.data(), y.size() * sizeof(float)) == 0);
  }
}

TEST_CASE("int8 tiles stay within their weights' and inputs' rounding of the f32 arithmetic") {
  const Fixture f(100, 520, 8, 11);
  const RvqCodebooks books(f.stage(0), f.stage(1));
  std::vector<float> int8(size_t{f.tokens} * f.rows), f32(int8.size());
  rvq_matmul_decoded(books, f.view(), f.x.data(), f.tokens, int8.data(),
                     Exec{best_isa(), nullptr, TrunkActivations::kInt8});
  rvq_matmul_decoded(books, f.view(), f.x.data(), f.tokens, f32.data(), Exec{best_isa(), nullptr});
  const double sigma = f.sigma();
  double largest_error = 0.0;
  for (uint32_t t = 0; t < f.tokens; ++t)
    for (uint32_t r = 0; r < f.rows; ++r) {
      // Each weight is off by at most σ (two rounded stages), each input
      // by half its group's step amax/127.
      double bound = 0.0;
      for (uint32_t k = 0; k < f.cols; ++k) {
        const double xk = f.x[size_t{t} * f.cols + k];
        bound += sigma * std::fabs(xk) +
                 (std::fabs(f.weight(r, k)) + sigma) * 0.5 * f.input_max(t, k / 128) / 127.0;
      }
      const size_t i = size_t{t} * f.rows + r;
      const double error = std::fabs(double{int8[i]} - f32[i]);
      largest_error = std::max(largest_error, error);
      CHECK(error <= f16_to_f32(f.scales[r]) * bound * 1.01 + 1e-5 * std::fabs(f32[i]));
    }
  CHECK(largest_error > 0.0);  // the int8 arithmetic did run
}

TEST_CASE("decoded and table paths agree to the table codes' rounding") {
  const Fixture f(100, 520, 4, 11);
  const RvqCodebooks books(f.stage(0), f.stage(1));
  const Exec exec{best_isa(), nullptr};
  std::vector<float> decoded(size_t{f.tokens} * f.rows), table_path(decoded.size());
  rvq_matmul_decoded(books, f.view(), f.x.data(), f.tokens, decoded.data(), exec);
  RvqTable table;
  table.build(books, f.x.data(), f.cols, f.tokens, exec);
  const std::vector<uint32_t> all = {0, 1, 2, 3};
  rvq_matmul(table, all, f.view(), table_path.data(), exec);
  for (uint32_t t = 0; t < f.tokens; ++t)
    for (uint32_t r = 0; r < f.rows; ++r) {
      // Each of a group's 2·nv_g codes is off by at most half its step d_g.
      double codes_error = 0.0;
      for (uint32_t g = 0; g < table.groups(); ++g)
        codes_error += 2.0 * std::min(32u, f.nv - 32 * g) * 0.5 * table.token_scales(t)[g];
      const size_t i = size_t{t} * f.rows + r;
      CHECK(std::fabs(decoded[i] - table_path[i]) <=
            codes_error * f16_to_f32(f.scales[r]) * 1.01 + 1e-4 * std::fabs(decoded[i]));
    }
}

TEST_CASE("decoded rvq matmul refuses a bad matrix and names it") {
  const Fixture f(16, 24, 1, 3);
  const RvqCodebooks books(f.stage(0), f.stage(1));
  std::vector<float> y(16);
  RvqMatrixView bad = f.view();
  bad.shape.cols = 20;
  CHECK_THROWS_WITH_AS(rvq_matmul_decoded(books, bad, f.x.data(), 1, y.data(), Exec{}),
                       doctest::Contains("cols 20"), Error);
  bad = f.view();
  bad.indices = nullptr;
  CHECK_THROWS_WITH_AS(rvq_matmul_decoded(books, bad, f.x.data(), 1, y.data(), Exec{}),
                       doctest::Contains("missing"), Error);
}
