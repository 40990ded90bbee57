// q8g128 / q6g128 / q4g128 / f32 matvec against a dequantizer written here from
// FORMAT.md, against each path's documented order bit for bit (int8
// activations: one order for every instruction set), and across thread counts
// and batching.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "compute/kernels/quant.h"
#include "compute/kernels/thread_pool.h"
#include "proto/error.h"
#include "proto/f16.h"
#include "tests/compute/kernels/isas_under_test.h"

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
    const int lo = fmt == QuantFormat::kQ8G128 ? -127 : fmt == QuantFormat::kQ6G128 ? -32 : -8;
    const int hi = fmt == QuantFormat::kQ8G128 ? 127 : fmt == QuantFormat::kQ6G128 ? 31 : 7;
    std::uniform_int_distribution<int> value(lo, hi);
    std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
    q.assign(size_t{rows} * padded, 0);
    for (uint32_t r = 0; r < rows; ++r)
      for (uint32_t k = 0; k < cols; ++k) q[size_t{r} * padded + k] = value(rng);
    // FORMAT.md: q8 is one int8 per element; q6 stores u = q + 32 in blocks
    // of 32 columns, 24 bytes each: byte i < 16 holds the low four bits of
    // columns i (low nibble) and 16 + i (high nibble), byte 16 + j the top
    // two bits of columns j + 8s at bits 2s, 2s + 1; q4 puts element 2i in
    // the low nibble and 2i+1 in the high nibble of byte i, nibble = q + 8.
    if (fmt == QuantFormat::kQ8G128) {
      data.resize(q.size());
      for (size_t i = 0; i < q.size(); ++i) data[i] = static_cast<uint8_t>(static_cast<int8_t>(q[i]));
    } else if (fmt == QuantFormat::kQ6G128) {
      data.assign(q.size() / 32 * 24, 0);
      for (size_t i = 0; i < q.size(); ++i) {
        const auto u = static_cast<unsigned>(q[i] + 32);
        uint8_t* block = data.data() + i / 32 * 24;
        const size_t p = i % 32;
        block[p % 16] = static_cast<uint8_t>(block[p % 16] | (u & 0x0f) << (p < 16 ? 0 : 4));
        block[16 + p % 8] = static_cast<uint8_t>(block[16 + p % 8] | (u >> 4) << (2 * (p / 8)));
      }
    } else {
      data.resize(q.size() / 2);
      for (size_t i = 0; i < data.size(); ++i)
        data[i] = static_cast<uint8_t>((q[2 * i] + 8) | ((q[2 * i + 1] + 8) << 4));
    }
    scales.resize(size_t{rows} * groups);
    // Every fifth a subnormal half: the vector bodies widen scales with F16C,
    // which must give proto/f16.h's values for those too.
    for (size_t i = 0; i < scales.size(); ++i)
      scales[i] = i % 5 == 4 ? static_cast<uint16_t>(1 + rng() % 0x3ff)
                             : f32_to_f16(std::fabs(unit(rng)) * 0.1f + 1e-3f);
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

// quant.h's AVX-512 order: sixteen lanes, then the documented fold.
float documented_avx512(const Fixture& f, const float* x, uint32_t r) {
  float acc[16] = {};
  for (uint32_t g = 0; g < f.groups; ++g) {
    float part[16] = {};
    for (uint32_t k = g * 128; k < std::min(f.cols, g * 128 + 128); k += 16)
      for (uint32_t l = 0; l < 16; ++l) {
        const float xv = k + l < f.cols ? x[k + l] : 0.0f;
        part[l] = std::fma(f.integer(r, k + l), xv, part[l]);
      }
    for (int l = 0; l < 16; ++l) acc[l] = std::fma(f.scale(r, g), part[l], acc[l]);
  }
  float s[8], t[4];
  for (int l = 0; l < 8; ++l) s[l] = acc[l] + acc[l + 8];
  for (int l = 0; l < 4; ++l) t[l] = s[l] + s[l + 4];
  return (t[0] + t[2]) + (t[1] + t[3]);
}

float documented_f32(Isa isa, const Fixture& f, const float* x, uint32_t r) {
  switch (isa) {
    case Isa::kAvx512:
      return documented_avx512(f, x, r);
    case Isa::kAvx2:
      return documented_avx2(f, x, r);
    case Isa::kScalar:
      break;
  }
  return documented_scalar(f, x, r);
}

constexpr QuantFormat kFormats[] = {QuantFormat::kQ8G128, QuantFormat::kQ6G128, QuantFormat::kQ4G128};
const char* format_name(QuantFormat f) {
  return f == QuantFormat::kQ8G128 ? "q8" : f == QuantFormat::kQ6G128 ? "q6" : "q4";
}

// Every instruction set this machine runs (f32 matvec runs the AVX2 path on AVX-512).
std::vector<Isa> isas() { return testing::isas_under_test(); }
Exec f32_exec(Isa isa, ThreadPool* pool = nullptr) { return Exec{isa, pool, TrunkActivations::kF32}; }

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof(float)) == 0; }

}  // namespace

TEST_CASE("quant_dequantize_row gives each stored integer times its group's scale, bit for bit") {
  for (QuantFormat format : {QuantFormat::kQ8G128, QuantFormat::kQ6G128, QuantFormat::kQ4G128})
    for (uint32_t cols : {1u, 7u, 128u, 200u, 517u}) {
      CAPTURE(static_cast<int>(format));
      CAPTURE(cols);
      const Fixture f(format, 5, cols, 1, 40 + cols);
      for (uint32_t r = 0; r < f.rows; ++r) {
        std::vector<float> out(cols + 1, -9.0f);
        quant_dequantize_row(f.view(), r, out.data());
        bool same = out.back() == -9.0f;
        for (uint32_t k = 0; k < cols; ++k) same = same && out[k] == f.weight(r, k);
        CHECK(same);
      }
    }
}

TEST_CASE("q8g128, q6g128 and q4g128 matvec match dequantize-then-multiply and the documented orders") {
  uint32_t seed = 1;
  for (QuantFormat fmt : kFormats)
    for (uint32_t rows : {1, 3, 4, 5, 9, 65})
      for (uint32_t cols : {8, 24, 128, 136, 200, 300, 1000}) {
        const Fixture f(fmt, rows, cols, 1, seed++);
        for (Isa isa : isas()) {
          CAPTURE(std::string(format_name(fmt)));
          CAPTURE(rows);
          CAPTURE(cols);
          CAPTURE(isa_name(isa));
          std::vector<float> y(rows + 1, -7.0f);
          quant_matvec(f.view(), f.x.data(), y.data(), f32_exec(isa));
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
            CHECK(same_bits(y[r], documented_f32(isa, f, f.x.data(), r)));
          }
          CHECK(y[rows] == -7.0f);
        }
      }
}

// quant.h's int8 activations, written from its comment: per group of 128
// columns, d = amax/127 and xq = round_half_even(x · 127/amax).
struct DocumentedInt8 {
  std::vector<int> q;    // per column
  std::vector<float> d;  // per group of 128 columns
};

DocumentedInt8 documented_quantize(const float* x, uint32_t cols) {
  DocumentedInt8 out{std::vector<int>(cols), std::vector<float>((cols + 127) / 128)};
  for (uint32_t g = 0; g < out.d.size(); ++g) {
    float amax = 0.0f;
    for (uint32_t k = 128 * g; k < std::min(cols, 128 * g + 128); ++k) amax = std::max(amax, std::fabs(x[k]));
    out.d[g] = amax / 127.0f;
    const float inverse = amax > 0.0f ? 127.0f / amax : 0.0f;
    for (uint32_t k = 128 * g; k < std::min(cols, 128 * g + 128); ++k)
      out.q[k] = static_cast<int>(std::nearbyint(x[k] * inverse));
  }
  return out;
}

float documented_int8(const Fixture& f, const DocumentedInt8& xq, uint32_t r) {
  float acc[8] = {};
  for (uint32_t g = 0; g < f.groups; ++g) {
    int lanes[8] = {};
    for (uint32_t b = 4 * g; b < 4 * g + 4 && 32 * b < f.cols; ++b) {
      for (uint32_t p = 0; p < 32; ++p) {
        const uint32_t within = f.format != QuantFormat::kQ4G128 ? p : p < 16 ? 2 * p : 2 * (p - 16) + 1;
        const uint32_t k = 32 * b + within;
        if (k < f.cols) lanes[p / 4] += f.q[size_t{r} * f.padded + k] * xq.q[k];
      }
    }
    for (int l = 0; l < 8; ++l) acc[l] = std::fma(f.scale(r, g), xq.d[g] * static_cast<float>(lanes[l]), acc[l]);
  }
  return reduce8(acc);
}

// Every instruction set's int8 path against the documented arithmetic bit for bit,
// against double on the dequantized activations, and against the f32 x within
// the quantization's half step per column.
void check_int8(const Fixture& f, const float* x) {
  const DocumentedInt8 xq = documented_quantize(x, f.cols);
  for (Isa isa : isas()) {
    CAPTURE(isa_name(isa));
    std::vector<float> y(f.rows + 1, -7.0f);
    quant_matvec(f.view(), x, y.data(), Exec{isa, nullptr, TrunkActivations::kInt8});
    for (uint32_t r = 0; r < f.rows; ++r) {
      CAPTURE(r);
      CHECK(same_bits(y[r], documented_int8(f, xq, r)));
      double dequantized = 0.0, magnitude = 0.0, exact = 0.0, half_steps = 0.0;
      for (uint32_t k = 0; k < f.cols; ++k) {
        const double term = double{f.weight(r, k)} * xq.q[k] * xq.d[k / 128];
        dequantized += term;
        magnitude += std::fabs(term);
        exact += double{f.weight(r, k)} * x[k];
        half_steps += std::fabs(double{f.weight(r, k)}) * xq.d[k / 128] * 0.5;
      }
      // The f32 sums: one product and one term per group, then 3 adds.
      const double rounding = (2.0 + f.groups + 4.0) * std::ldexp(1.0, -23) * magnitude;
      CHECK(std::fabs(y[r] - dequantized) <= rounding + 1e-30);
      // |x − q·d| ≤ d/2 + 3·2^-24·|x| (rounding of x·127/amax, 127/amax and amax/127).
      CHECK(std::fabs(y[r] - exact) <= half_steps + rounding + 4 * std::ldexp(1.0, -24) * magnitude + 1e-30);
    }
    CHECK(y[f.rows] == -7.0f);
  }
}

TEST_CASE("int8 activations: every instruction set computes the documented arithmetic bit for bit") {
  uint32_t seed = 500;
  for (QuantFormat fmt : kFormats)
    for (uint32_t rows : {1, 3, 4, 5, 9, 65})
      for (uint32_t cols : {8, 24, 31, 33, 100, 128, 136, 200, 300, 1000, 2048}) {
        CAPTURE(std::string(format_name(fmt)));
        CAPTURE(rows);
        CAPTURE(cols);
        const Fixture f(fmt, rows, cols, 1, seed++);
        check_int8(f, f.x.data());
      }
}

TEST_CASE("int8 activations round half to even, and an all-zero group has scale 0") {
  for (QuantFormat fmt : kFormats) {
    CAPTURE(std::string(format_name(fmt)));
    Fixture f(fmt, 9, 160, 1, 77);
    // amax 127 makes x · 127/amax = x exactly, so every ±k.5 is a tie.
    for (uint32_t k = 0; k < f.cols; ++k) f.x[k] = k % 32 == 5 ? 127.0f : static_cast<float>(int(k % 9) - 4) + 0.5f;
    for (uint32_t k = 128; k < f.cols; ++k) f.x[k] = 0.0f;  // group 1: all zero
    check_int8(f, f.x.data());
  }
}

TEST_CASE("int8 matmul: each token quantized on its own, any tile, rows split over the pool") {
  for (QuantFormat fmt : kFormats)
    for (uint32_t tokens : {1, 2, 3, 4, 7, 9}) {
      // Tokens of very different magnitudes: a scale shared across tokens would
      // show. 301 rows: the pool's workers take rows too (64 per grain), and
      // the last range is odd, so the paired-row tiles leave a row to the rest.
      Fixture f(fmt, 301, 200, tokens, 900 + tokens);
      for (uint32_t t = 0; t < tokens; ++t)
        for (uint32_t k = 0; k < f.cols; ++k) f.x[size_t{t} * f.cols + k] *= std::ldexp(1.0f, 3 * int(t) - 6);
      for (Isa isa : isas()) {
        CAPTURE(isa_name(isa));
        ThreadPool pool(3);
        std::vector<float> y(size_t{tokens} * f.rows);
        quant_matmul(f.view(), f.x.data(), tokens, y.data(), Exec{isa, &pool, TrunkActivations::kInt8});
        for (uint32_t t = 0; t < tokens; ++t) {
          const DocumentedInt8 xq = documented_quantize(f.x.data() + size_t{t} * f.cols, f.cols);
          for (uint32_t r = 0; r < f.rows; ++r) CHECK(same_bits(y[size_t{t} * f.rows + r], documented_int8(f, xq, r)));
        }
      }
    }
}

TEST_CASE("quant matmul equals one matvec per token bit for bit, for any thread count") {
  for (TrunkActivations activations : {TrunkActivations::kInt8, TrunkActivations::kF32})
    for (QuantFormat fmt : kFormats)
      for (uint32_t tokens : {1, 2, 4, 5, 9}) {
        const Fixture f(fmt, 150, 300, tokens, 40 + tokens);  // 150 rows: every worker of 3 gets some
        for (Isa isa : isas()) {
          CAPTURE(isa_name(isa));
          CAPTURE(activations == TrunkActivations::kInt8);
          std::vector<float> single(size_t{tokens} * f.rows);
          for (uint32_t t = 0; t < tokens; ++t)
            quant_matvec(f.view(), f.x.data() + size_t{t} * f.cols, single.data() + size_t{t} * f.rows,
                         Exec{isa, nullptr, activations});
          for (size_t threads : {1, 2, 3}) {
            ThreadPool pool(threads);
            std::vector<float> batched(single.size());
            quant_matmul(f.view(), f.x.data(), tokens, batched.data(), Exec{isa, &pool, activations});
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
        f32_matvec(w.data(), rows, cols, x.data(), y.data(), f32_exec(isa));
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
          f32_matvec(w.data(), rows, cols, x.data(), yt.data(), f32_exec(isa, &pool));
          CHECK(yt == y);
        }
      }
    }
}

TEST_CASE("scalar and AVX2 quant paths with f32 activations agree to the summation-order tolerance") {
  if (!testing::isa_under_test(Isa::kAvx2)) return;
  const Fixture f(QuantFormat::kQ4G128, 64, 2048, 1, 3);
  std::vector<float> a(64), b(64);
  quant_matvec(f.view(), f.x.data(), a.data(), f32_exec(Isa::kScalar));
  quant_matvec(f.view(), f.x.data(), b.data(), f32_exec(Isa::kAvx2));
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

TEST_CASE("transposed matmul: every instruction set gives quant.h's fused order bit for bit, near the exact sum") {
  for (QuantFormat fmt : kFormats)
    for (uint32_t cols : {512u, 200u, 37u})
      for (uint32_t tokens : {1u, 2u, 5u}) {
        CAPTURE(format_name(fmt));
        CAPTURE(cols);
        CAPTURE(tokens);
        const uint32_t rows = 24, first = 5, count = 13, c_stride = 17, out_stride = cols + 3;
        const Fixture f(fmt, rows, cols, 1, 900 + cols + tokens);
        std::mt19937 rng(cols * 7 + tokens);
        std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
        std::vector<float> c(size_t{tokens} * c_stride), start(size_t{tokens} * out_stride);
        for (float& v : c) v = unit(rng);
        for (float& v : start) v = unit(rng);
        for (Isa isa : isas()) {
          CAPTURE(isa_name(isa));
          std::vector<float> out = start;
          quant_transposed_matmul(f.view(), first, count, c.data(), c_stride, tokens, out.data(), out_stride, isa);
          bool documented = true, near = true, untouched = true;
          for (uint32_t t = 0; t < tokens; ++t) {
            for (uint32_t k = 0; k < out_stride; ++k) {
              const size_t at = size_t{t} * out_stride + k;
              if (k >= cols) {
                untouched = untouched && same_bits(out[at], start[at]);
                continue;
              }
              float s = start[at];
              double exact = start[at], magnitude = std::fabs(start[at]);
              for (uint32_t i = 0; i < count; ++i) {
                const float coefficient = c[t * c_stride + i] * f.scale(first + i, k / 128);
                s = std::fma(coefficient, f.integer(first + i, k), s);
                exact += double{c[t * c_stride + i]} * f.weight(first + i, k);
                magnitude += std::fabs(double{c[t * c_stride + i]} * f.weight(first + i, k));
              }
              documented = documented && same_bits(out[at], s);
              near = near && std::fabs(out[at] - exact) <= 4 * count * std::ldexp(1.0, -24) * magnitude;
            }
          }
          CHECK(documented);
          CHECK(near);
          CHECK(untouched);
        }
      }
}

TEST_CASE("transposed matmul refuses rows past the matrix") {
  const Fixture f(QuantFormat::kQ8G128, 8, 128, 1, 5);
  std::vector<float> c(8), out(128);
  CHECK_THROWS_AS(quant_transposed_matmul(f.view(), 4, 5, c.data(), 8, 1, out.data(), 128, Isa::kScalar), Error);
  CHECK_THROWS_AS(quant_transposed_matmul(f.view(), 9, 0, c.data(), 8, 1, out.data(), 128, Isa::kScalar), Error);
}
