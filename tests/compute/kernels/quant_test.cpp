// q8g128 / q4g128 / f32 matvec against a dequantizer written here from
// FORMAT.md, against each path's documented order bit for bit, and across
// thread counts and batching.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "compute/kernels/quant.h"
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
      : format(fmt), rows(rows_), cols(cols_), padded((cols_ + 127) / 128 * 128), groups(padded / 128) {
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
      for (size_t i = 0; i < q.size(); ++i) data[i] = static_cast<uint8_t>(static_cast<int8_t>(q[i]));
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
    return static_cast<float>(q[size_t{r} * padded + k]) * f16_to_f32(scales[size_t{r} * groups + k / 128]);
  }
  float scale(uint32_t r, uint32_t g) const { return f16_to_f32(scales[size_t{r} * groups + g]); }
  float integer(uint32_t r, uint32_t k) const { return static_cast<float>(q[size_t{r} * padded + k]); }
};

// quant.h's scalar order in plain f32 (this file is built without FMA).
float documented_scalar(const Fixture& f, const float* x, uint32_t r) {
  float acc = 0.0f;
  for (uint32_t g = 0; g < f.groups; ++g) {
    float sum = 0.0f;
    for (uint32_t k = g * 128; k < std::min(f.cols, g * 128 + 128); ++k) sum += f.integer(r, k) * x[k];
    acc += f.scale(r, g) * sum;
  }
  return acc;
}

float reduce8(const float* a) { return ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7])); }

// quant.h's AVX2 order, with std::fma for each fused step.
float documented_avx2(const Fixture& f, const float* x, uint32_t r) {
  float acc[8] = {};
  for (uint32_t g = 0; g < f.groups; ++g) {
    float part[8] = {};
    for (uint32_t k = g * 128; k < std::min(f.cols, g * 128 + 128); k += 8)
      for (uint32_t l = 0; l < 8; ++l) {
        const float xv = k + l < f.cols ? x[k + l] : 0.0f;
        part[l] = std::fma(f.integer(r, k + l), xv, part[l]);
      }
    for (int l = 0; l < 8; ++l) acc[l] = std::fma(f.scale(r, g), part[l], acc[l]);
  }
  return reduce8(acc);
}

std::vector<Isa> isas() {
  std::vector<Isa> out{Isa::kScalar};
  if (best_isa() == Isa::kAvx2) out.push_back(Isa::kAvx2);
  return out;
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof(float)) == 0; }

}  // namespace

TEST_CASE("q8g128 and q4g128 matvec match dequantize-then-multiply and the documented orders") {
  uint32_t seed = 1;
  for (QuantFormat fmt : {QuantFormat::kQ8G128, QuantFormat::kQ4G128})
    for (uint32_t rows : {1, 3, 4, 5, 9, 65})
      for (uint32_t cols : {8, 24, 128, 136, 200, 300, 1000}) {
        const Fixture f(fmt, rows, cols, 1, seed++);
        for (Isa isa : isas()) {
          CAPTURE(fmt == QuantFormat::kQ8G128 ? "q8" : "q4");
          CAPTURE(rows);
          CAPTURE(cols);
          CAPTURE(isa_name(isa));
          std::vector<float> y(rows + 1, -7.0f);
          quant_matvec(f.view(), f.x.data(), y.data(), Exec{isa, nullptr});
          // At most 128 sequential terms per group, then one term per group:
          // error ≤ (128 + groups + 4)·2^-24·Σ|w·x|.
          const double bound = (128.0 + f.groups + 4.0) * std::ldexp(1.0, -24);
          for (uint32_t r = 0; r < rows; ++r) {
            double ref = 0.0, magnitude = 0.0;
            for (uint32_t k = 0; k < cols; ++k) {
              ref += double{f.weight(r, k)} * f.x[k];
              magnitude += std::fabs(double{f.weight(r, k)} * f.x[k]);
            }
            CHECK(std::fabs(y[r] - ref) <= bound * magnitude + 1e-30);
            const float documented = isa == Isa::kAvx2 ? documented_avx2(f, f.x.data(), r)
                                                       : documented_scalar(f, f.x.data(), r);
            CHECK(same_bits(y[r], documented));
          }
          CHECK(y[rows] == -7.0f);
        }
      }
}

TEST_CASE("quant matmul equals one matvec per token bit for bit, for any thread count") {
  for (QuantFormat fmt : {QuantFormat::kQ8G128, QuantFormat::kQ4G128})
    for (uint32_t tokens : {1, 2, 4, 5, 9}) {
      const Fixture f(fmt, 37, 300, tokens, 40 + tokens);
      for (Isa isa : isas()) {
        std::vector<float> single(size_t{tokens} * f.rows);
        for (uint32_t t = 0; t < tokens; ++t)
          quant_matvec(f.view(), f.x.data() + size_t{t} * f.cols, single.data() + size_t{t} * f.rows,
                       Exec{isa, nullptr});
        for (size_t threads : {1, 2, 3}) {
          ThreadPool pool(threads);
          std::vector<float> batched(single.size());
          quant_matmul(f.view(), f.x.data(), tokens, batched.data(), Exec{isa, &pool});
          CHECK(std::memcmp(batched.data(), single.data(), single.size() * sizeof(float)) == 0);
        }
      }
    }
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
          CHECK(same_bits(y[r], isa == Isa::kAvx2 ? reduce8(lanes) : sequential));
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

TEST_CASE("scalar and AVX2 quant paths agree to the summation-order tolerance") {
  if (best_isa() != Isa::kAvx2) return;
  const Fixture f(QuantFormat::kQ4G128, 64, 2048, 1, 3);
  std::vector<float> a(64), b(64);
  quant_matvec(f.view(), f.x.data(), a.data(), Exec{Isa::kScalar, nullptr});
  quant_matvec(f.view(), f.x.data(), b.data(), Exec{Isa::kAvx2, nullptr});
  for (uint32_t r = 0; r < 64; ++r) {
    double magnitude = 0.0;
    for (uint32_t k = 0; k < 2048; ++k) magnitude += std::fabs(double{f.weight(r, k)} * f.x[k]);
    CHECK(std::fabs(a[r] - b[r]) <= 2 * (128.0 + 16 + 4) * std::ldexp(1.0, -24) * magnitude);
  }
}

TEST_CASE("quant matvec refuses an empty or missing matrix") {
  std::vector<float> y(4), x(4);
  CHECK_THROWS_AS(quant_matvec(QuantMatrixView{}, x.data(), y.data(), Exec{}), Error);
  CHECK_THROWS_AS(f32_matvec(x.data(), 0, 4, x.data(), y.data(), Exec{}), Error);
}
