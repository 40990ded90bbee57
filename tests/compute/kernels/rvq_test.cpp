// RVQ LUT matvec against a dequantize-then-multiply reference written from
// FORMAT.md, against the documented summation order bit for bit, and across
// instruction sets, thread counts, row plans and batching.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "compute/kernels/rvq.h"
#include "compute/kernels/rvq_kernels.h"
#include "compute/kernels/thread_pool.h"
#include "proto/error.h"
#include "proto/f16.h"

using namespace sluice;
using namespace sluice::kernels;

namespace {

constexpr float kSentinel = 12345.0f;

struct Fixture {
  uint32_t rows, cols, rows_padded, nv;
  std::vector<float> codebooks;  // 3 × 256 × 8, entry-major
  std::vector<uint8_t> indices;
  std::vector<uint16_t> scales;
  std::vector<float> x;  // tokens × cols

  Fixture(uint32_t rows_, uint32_t cols_, uint32_t tokens, uint32_t seed)
      : rows(rows_), cols(cols_), rows_padded((rows_ + 15) / 16 * 16), nv(cols_ / 8) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
    std::uniform_real_distribution<float> positive(0.01f, 2.0f);
    codebooks.resize(3 * 256 * 8);
    for (float& c : codebooks) c = unit(rng);
    // FORMAT.md: byte (r, v, s) at ((r/16)·nv·3 + v·3 + s)·16 + r%16. Padding
    // rows get garbage here: the kernel must never let them reach an output.
    indices.resize(size_t{rows_padded} * nv * 3);
    for (uint8_t& i : indices) i = static_cast<uint8_t>(rng());
    scales.resize(rows_padded);
    for (uint16_t& s : scales) s = f32_to_f16(positive(rng));
    x.resize(size_t{tokens} * cols);
    for (float& v : x) v = unit(rng);
  }
  const float* stage(int s) const { return codebooks.data() + s * 256 * 8; }
  uint8_t index(uint32_t r, uint32_t v, int s) const {
    return indices[((size_t{r / 16} * nv * 3 + v * 3 + s) * 16) + r % 16];
  }
  RvqMatrixView view() const { return {RvqMatrixShape{rows, cols}, indices.data(), scales.data()}; }
};

// Dequantize row r (FORMAT.md reconstruction) and multiply by x in double.
// Also returns Σ|terms| of the kernel's own expansion, the scale of its
// rounding error.
void reference_row(const Fixture& f, const float* x, uint32_t r, double& y, double& magnitude) {
  const double scale = f16_to_f32(f.scales[r]);
  y = 0.0;
  magnitude = 0.0;
  for (uint32_t v = 0; v < f.nv; ++v)
    for (int j = 0; j < 8; ++j) {
      float w = 0.0f;
      for (int s = 0; s < 3; ++s) {
        const float c = f.stage(s)[f.index(r, v, s) * 8 + j];
        w += c;
        magnitude += std::fabs(double{c} * x[v * 8 + j]);
      }
      y += scale * w * x[v * 8 + j];
    }
  magnitude *= scale;
}

// rvq.h's documented order, in plain f32 (this file is built without FMA).
float documented_row(const Fixture& f, const float* x, uint32_t r) {
  float acc = 0.0f;
  for (uint32_t v = 0; v < f.nv; ++v)
    for (int s = 0; s < 3; ++s) {
      const float* c = f.stage(s) + f.index(r, v, s) * 8;
      float lut = x[v * 8] * c[0];
      for (int j = 1; j < 8; ++j) lut = lut + x[v * 8 + j] * c[j];
      acc += lut;
    }
  return f16_to_f32(f.scales[r]) * acc;
}

std::vector<float> run(const Fixture& f, uint32_t token, const Exec& exec) {
  RvqCodebooks books(f.stage(0), f.stage(1), f.stage(2));
  RvqTable table;
  table.build(books, f.x.data(), f.cols, static_cast<uint32_t>(f.x.size() / f.cols), exec);
  std::vector<float> y(f.rows + 4, kSentinel);
  rvq_matvec(table, token, f.view(), y.data(), exec);
  return y;
}

std::vector<Isa> isas() { return supported_isas(); }

const uint32_t kRows[] = {1, 15, 16, 17, 40, 100};
const uint32_t kCols[] = {8, 24, 136, 512};

}  // namespace

TEST_CASE("rvq matvec matches dequantize-then-multiply and the documented order") {
  uint32_t seed = 1;
  for (uint32_t rows : kRows)
    for (uint32_t cols : kCols) {
      const Fixture f(rows, cols, 2, seed++);
      for (Isa isa : isas()) {
        CAPTURE(rows);
        CAPTURE(cols);
        CAPTURE(isa_name(isa));
        const std::vector<float> y = run(f, 1, Exec{isa, nullptr});
        // Sequential f32 sums of 3·nv lookups of 8-term dots, one scale multiply:
        // error ≤ (3·nv + 8 + 1)·2^-24·Σ|terms|.
        const double bound = (3.0 * f.nv + 9.0) * std::ldexp(1.0, -24);
        for (uint32_t r = 0; r < rows; ++r) {
          double ref = 0.0, magnitude = 0.0;
          reference_row(f, f.x.data() + cols, r, ref, magnitude);
          CHECK(std::fabs(y[r] - ref) <= bound * magnitude + 1e-30);
          const float documented = documented_row(f, f.x.data() + cols, r);
          CHECK(std::memcmp(&y[r], &documented, sizeof(float)) == 0);
        }
        for (uint32_t r = rows; r < rows + 4; ++r) CHECK(y[r] == kSentinel);
      }
    }
}

TEST_CASE("rvq results are bit-identical across instruction sets, threads and row plans") {
  const Fixture f(100, 136, 1, 77);
  const std::vector<float> base = run(f, 0, Exec{Isa::kScalar, nullptr});
  for (Isa isa : isas())
    for (size_t threads : {1, 2, 3}) {
      ThreadPool pool(threads);
      CHECK(run(f, 0, Exec{isa, &pool}) == base);
    }
  if (!isa_supported(Isa::kAvx2)) return;
  RvqCodebooks books(f.stage(0), f.stage(1), f.stage(2));
  RvqTable table;
  table.build(books, f.x.data(), f.cols, 1, Exec{Isa::kScalar, nullptr});
  const float* lut = table.token_table(0);
  for (const detail::RvqRowsPlan plan :
       {detail::RvqRowsPlan{1, 0}, detail::RvqRowsPlan{2, 0}, detail::RvqRowsPlan{2, 4},
        detail::RvqRowsPlan{1, 3}, detail::RvqRowsPlan{2, 1}}) {
    std::vector<float> y(f.rows + 4, kSentinel);
    float* ys = y.data();
    detail::rvq_rows_avx2(&lut, 1, f.view(), 0, f.rows_padded / 16, &ys, plan);
    CHECK(y == base);
  }
}

TEST_CASE("batched rvq equals one call per token, bit for bit, tokens in any order") {
  const uint32_t tokens = 5;
  const Fixture f(40, 24, tokens, 99);
  const std::vector<uint32_t> chosen = {4, 0, 2, 2};
  for (Isa isa : isas()) {
    ThreadPool pool(2);
    const Exec exec{isa, &pool};
    RvqCodebooks books(f.stage(0), f.stage(1), f.stage(2));
    RvqTable table;
    table.build(books, f.x.data(), f.cols, tokens, exec);
    std::vector<float> batched(chosen.size() * f.rows);
    rvq_matmul(table, chosen, f.view(), batched.data(), exec);
    for (size_t i = 0; i < chosen.size(); ++i) {
      std::vector<float> single(f.rows);
      rvq_matvec(table, chosen[i], f.view(), single.data(), exec);
      CHECK(std::memcmp(single.data(), batched.data() + i * f.rows, f.rows * sizeof(float)) == 0);
    }
  }
}

TEST_CASE("rvq refuses mismatched shapes and tokens with errors naming them") {
  const Fixture f(16, 24, 1, 5);
  RvqCodebooks books(f.stage(0), f.stage(1), f.stage(2));
  RvqTable table;
  const Exec exec{Isa::kScalar, nullptr};
  CHECK_THROWS_AS(table.build(books, f.x.data(), 20, 1, exec), Error);
  table.build(books, f.x.data(), 24, 1, exec);
  std::vector<float> y(16);
  RvqMatrixView wrong = f.view();
  wrong.shape.cols = 16;
  CHECK_THROWS_WITH_AS(rvq_matvec(table, 0, wrong, y.data(), exec),
                       doctest::Contains("table was built for 24"), Error);
  CHECK_THROWS_WITH_AS(rvq_matvec(table, 1, f.view(), y.data(), exec), doctest::Contains("token 1"),
                       Error);
}
