// q8g128 / q4g128 / f32 matvec against a dequantizer written here from
// FORMAT.md, against quant.h's documented arithmetic bit for bit at every
// instruction set, and across thread counts (1, 2, 3) and batching.
#include "compute/kernels/quant.h"

#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "compute/kernels/thread_pool.h"
#include "proto/error.h"
#include "proto/f16.h"

using namespace sluice;
using namespace sluice::kernels;

namespace {

struct Fixture {
  QuantFormat format;
  uint32_t rows, cols, padded, groups;
  std::vector<int> q;  // rows × padded, the integers the format stores (padding 0)
  std::vector<uint8_t> data;
  std::vector<uint16_t> scales;
  std::vector<float> x;

  Fixture(QuantFormat fmt, uint32_t rows_, uint32_t cols_, uint32_t tokens, uint32_t seed)
      : format(fmt),
        rows(rows_),
        cols(cols_),
        padded((cols_ + 127) / 128 * 128),
        groups(padded / 128) {
    std::mt19937 rng(seed);
    const int lo = fmt == QuantFormat::kQ8G128 ? -127 : -8;
    const int hi = fmt == QuantFormat::kQ8G128 ? 127 : 7;
    std::uniform_int_distribution<int> value(lo, hi);
    std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
    q.assign(size_t{rows} * padded, 0);
    for (uint32_t r = 0; r < rows; ++r)
      for (uint32_t k = 0; k < cols; ++k) q[size_t{r} * padded + k] = value(rng);
    // FORMAT.md: q8 is one int8 per element; q4 puts element 2i in the low
    // nibble and 2i+1 in the high nibble of byte i, nibble = q + 8.
    if (fmt == QuantFormat::kQ8G128) {
      data.resize(q.size());
      for (size_t i = 0; i < q.size(); ++i)
        data[i] = static_cast<uint8_t>(static_cast<int8_t>(q[i]));
    } else {
      data.resize(q.size() / 2);
      for (size_t i = 0; i < data.size(); ++i)
        data[i] = static_cast<uint8_t>((q[2 * i] + 8) | ((q[2 * i + 1] + 8) << 4));
    }
    scales.resize(size_t{rows} * groups);
    for (uint16_t& s : scales) s = f32_to_f16(std::fabs(unit(rng)) * 0.1f + 1e-3f);
    x.resize(size_t{tokens} * cols);
    for (float& v : x) v = unit(rng);
  }
  QuantMatrixView view() const { return {format, rows, cols, data.data(), scales.data()}; }
  float weight(uint32_t r, uint32_t k) const {
    return static_cast<float>(q[size_t{r} * padded + k]) *
           f16_to_f32(scales[size_t{r} * groups + k / 128]);
  }
  float scale(uint32_t r, uint32_t g) const { return f16_to_f32(scales[size_t{r} * groups + g]); }
  float integer(uint32_t r, uint32_t k) const {
    return static_cast<float>(q[size_t{r} * padded + k]);
  }
};

// quant.h's arithmetic written out from its comment: int16 activations per
// group, exact integer group sums, one f32 fold per group (no FMA here).
struct DocumentedActivations {
  std::vector<int32_t> xq;  // padded, natural column order
  std::vector<float> step;
  DocumentedActivations(const Fixture& f, const float* x) : xq(f.padded, 0), step(f.groups) {
    for (uint32_t g = 0; g < f.groups; ++g) {
      float amax = 0.0f;
      for (uint32_t k = g * 128; k < std::min(f.cols, g * 128 + 128); ++k)
        amax = std::max(amax, std::fabs(x[k]));
      step[g] = amax > 0.0f ? amax / 32767.0f : 0.0f;
      const float inv = amax > 0.0f ? 32767.0f / amax : 0.0f;
      for (uint32_t k = g * 128; k < std::min(f.cols, g * 128 + 128); ++k)
        xq[k] = static_cast<int32_t>(std::nearbyint(x[k] * inv));
    }
  }
};

float documented(const Fixture& f, const DocumentedActivations& a, uint32_t r) {
  float acc = 0.0f;
  for (uint32_t g = 0; g < f.groups; ++g) {
    int64_t sum = 0;
    for (uint32_t k = g * 128; k < g * 128 + 128; ++k)
      sum += int64_t{f.q[size_t{r} * f.padded + k]} * a.xq[k];
    acc = acc + (f.scale(r, g) * a.step[g]) * static_cast<float>(sum);
  }
  return acc;
}

std::vector<Isa> isas() {
  return supported_isas();
}

bool same_bits(float a, float b) {
  return std::memcmp(&a, &b, sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("q8g128 and q4g128 matvec equal the documented int16 arithmetic at every ISA") {
  uint32_t seed = 1;
  for (QuantFormat fmt : {QuantFormat::kQ8G128, QuantFormat::kQ4G128})
    for (uint32_t rows : {1, 3, 4, 5, 9, 65, 130})
      for (uint32_t cols : {8, 24, 128, 136, 200, 300, 1000}) {
        const Fixture f(fmt, rows, cols, 1, seed++);
        const DocumentedActivations a(f, f.x.data());
        for (Isa isa : isas()) {
          CAPTURE(fmt == QuantFormat::kQ8G128 ? "q8" : "q4");
          CAPTURE(rows);
          CAPTURE(cols);
          CAPTURE(isa_name(isa));
          std::vector<float> y(rows + 1, -7.0f);
          quant_matvec(f.view(), f.x.data(), y.data(), Exec{isa, nullptr});
          for (uint32_t r = 0; r < rows; ++r) {
            double ref = 0.0, magnitude = 0.0, rounding = 0.0;
            for (uint32_t k = 0; k < cols; ++k) {
              ref += double{f.weight(r, k)} * f.x[k];
              magnitude += std::fabs(double{f.weight(r, k)} * f.x[k]);
              rounding += std::fabs(double{f.weight(r, k)}) * 0.5 * a.step[k / 128];
            }
            // Each activation is off by at most half its group's step; the fold
            // adds (3 · groups + 2) f32 roundings.
            CHECK(std::fabs(y[r] - ref) <= rounding * 1.001 + (3.0 * f.groups + 2) *
                                                                  std::ldexp(1.0, -24) *
                                                                  (magnitude + rounding));
            CHECK(same_bits(y[r], documented(f, a, r)));
          }
          CHECK(y[rows] == -7.0f);
        }
      }
}

TEST_CASE("an all-zero input gives exact zeros, and the scratch survives a larger call") {
  for (QuantFormat fmt : {QuantFormat::kQ8G128, QuantFormat::kQ4G128})
    for (Isa isa : isas()) {
      Fixture f(fmt, 9, 300, 3, 5);
      std::vector<float> y(27, -1.0f);
      quant_matmul(f.view(), f.x.data(), 3, y.data(), Exec{isa, nullptr});
      std::fill(f.x.begin(), f.x.end(), 0.0f);
      quant_matvec(f.view(), f.x.data(), y.data(), Exec{isa, nullptr});
      for (uint32_t r = 0; r < 9; ++r) CHECK(y[r] == 0.0f);
    }
}

TEST_CASE("quant matmul equals one matvec per token bit for bit, for any thread count") {
  for (QuantFormat fmt : {QuantFormat::kQ8G128, QuantFormat::kQ4G128})
    for (uint32_t tokens : {1, 2, 4, 5, 9}) {
      const Fixture f(fmt, 37, 300, tokens, 40 + tokens);
      for (Isa isa : isas()) {
        std::vector<float> single(size_t{tokens} * f.rows);
        for (uint32_t t = 0; t < tokens; ++t)
          quant_matvec(f.view(), f.x.data() + size_t{t} * f.cols,
                       single.data() + size_t{t} * f.rows, Exec{isa, nullptr});
        for (size_t threads : {1, 2, 3}) {
          ThreadPool pool(threads);
          std::vector<float> batched(single.size());
          quant_matmul(f.view(), f.x.data(), tokens, batched.data(), Exec{isa, &pool});
          CHECK(std::memcmp(batched.data(), single.data(), single.size() * sizeof(float)) == 0);
        }
      }
    }
}

float reduce8(const float* a) {
  return ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
}

TEST_CASE("f32 matvec matches double and the documented orders, any thread count") {
  for (uint32_t rows : {1, 4, 7, 130})
    for (uint32_t cols : {1, 8, 13, 24, 136, 1001}) {
      std::mt19937 rng(rows * 1000 + cols);
      std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
      std::vector<float> w(size_t{rows} * cols), x(cols);
      for (float& v : w) v = unit(rng);
      for (float& v : x) v = unit(rng);
      for (Isa isa : isas()) {
        CAPTURE(rows);
        CAPTURE(cols);
        CAPTURE(isa_name(isa));
        std::vector<float> y(rows);
        f32_matvec(w.data(), rows, cols, x.data(), y.data(), Exec{isa, nullptr});
        for (uint32_t r = 0; r < rows; ++r) {
          double ref = 0.0, magnitude = 0.0;
          float sequential = 0.0f, lanes[8] = {};
          for (uint32_t k = 0; k < cols; ++k) {
            const float p = w[size_t{r} * cols + k];
            ref += double{p} * x[k];
            magnitude += std::fabs(double{p} * x[k]);
            sequential += p * x[k];
            lanes[k % 8] = std::fma(p, x[k], lanes[k % 8]);
          }
          CHECK(std::fabs(y[r] - ref) <= (cols + 2.0) * std::ldexp(1.0, -24) * magnitude + 1e-30);
          CHECK(same_bits(y[r], isa != Isa::kScalar ? reduce8(lanes) : sequential));
        }
        for (size_t threads : {2, 3}) {
          ThreadPool pool(threads);
          std::vector<float> yt(rows);
          f32_matvec(w.data(), rows, cols, x.data(), yt.data(), Exec{isa, &pool});
          CHECK(yt == y);
        }
      }
    }
}

TEST_CASE("quant matvec refuses an empty or missing matrix") {
  std::vector<float> y(4), x(4);
  CHECK_THROWS_AS(quant_matvec(QuantMatrixView{}, x.data(), y.data(), Exec{}), Error);
  CHECK_THROWS_AS(f32_matvec(x.data(), 0, 4, x.data(), y.data(), Exec{}), Error);
}
