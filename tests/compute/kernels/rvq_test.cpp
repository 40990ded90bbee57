// RVQ LUT matvec against a dequantize-then-multiply reference written from
// FORMAT.md, against rvq.h's documented int8- and int16-code arithmetic bit
// for bit at every instruction set, and across thread counts, batching and
// shapes that cover odd sizes, partial row blocks and partial 128-input groups.
#include "compute/kernels/rvq.h"

#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "compute/kernels/rvq_kernels.h"
#include "compute/kernels/thread_pool.h"
#include "proto/error.h"
#include "proto/f16.h"
#include "tests/compute/kernels/isas_under_test.h"

using namespace sluice;
using namespace sluice::kernels;

namespace {

constexpr float kSentinel = 12345.0f;

struct Fixture {
  uint32_t rows, cols, rows_padded, nv, tokens;
  std::vector<float> codebooks;  // 2 × 64 × 4, entry-major
  std::vector<uint8_t> indices;
  std::vector<uint16_t> scales;
  std::vector<float> x;  // tokens × cols

  Fixture(uint32_t rows_, uint32_t cols_, uint32_t tokens_, uint32_t seed)
      : rows(rows_),
        cols(cols_),
        rows_padded((rows_ + 31) / 32 * 32),
        nv(cols_ / 4),
        tokens(tokens_) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
    std::uniform_real_distribution<float> positive(0.01f, 2.0f);
    codebooks.resize(2 * 64 * 4);
    for (float& c : codebooks) c = unit(rng);
    // Every byte pattern is a valid set of codes. Padding rows get garbage
    // too: the kernel must never let them reach an output.
    indices.resize(size_t{rows_padded} * nv * 48 / 32);
    for (uint8_t& i : indices) i = static_cast<uint8_t>(rng());
    scales.resize(rows_padded);
    for (uint16_t& s : scales) s = f32_to_f16(positive(rng));
    x.resize(size_t{tokens} * cols);
    for (float& v : x) v = unit(rng);
  }
  const float* stage(int s) const { return codebooks.data() + s * 64 * 4; }
  // FORMAT.md: the 48 bytes at ((r/32)·nv + v)·48; with i = r%16, h = (r%32)/16,
  // byte 16s + i holds the low 4 bits in bits 4h.., byte 32 + i the high 2 in bits 4s + 2h..
  int index(uint32_t r, uint32_t v, int s) const {
    const uint8_t* unit = indices.data() + (size_t{r / 32} * nv + v) * 48;
    const uint32_t i = r % 16, h = r % 32 / 16;
    return (unit[16 * s + i] >> (4 * h) & 15) | (unit[32 + i] >> (4 * s + 2 * h) & 3) << 4;
  }
  RvqMatrixView view() const { return {RvqMatrixShape{rows, cols}, indices.data(), scales.data()}; }
};

// The f32 table of one token in rvq.h's documented order (this file is built
// without FMA), its codes of at most `code_max` and their per-group scales,
// written from rvq.h.
struct DocumentedTable {
  std::vector<float> exact;  // [v][s][c]
  std::vector<int32_t> codes;
  std::vector<float> scales;  // d_g

  DocumentedTable(const Fixture& f, const float* x, float code_max)
      : exact(size_t{f.nv} * 2 * 64), codes(exact.size()) {
    for (uint32_t v = 0; v < f.nv; ++v)
      for (int s = 0; s < 2; ++s)
        for (int c = 0; c < 64; ++c) {
          const float* e = f.stage(s) + c * 4;
          float acc = x[v * 4] * e[0];
          for (int j = 1; j < 4; ++j) acc = acc + x[v * 4 + j] * e[j];
          exact[(v * 2 + s) * 64 + c] = acc;
        }
    for (uint32_t v0 = 0; v0 < f.nv; v0 += 32) {
      const uint32_t v1 = std::min(f.nv, v0 + 32);
      float amax = 0.0f;
      for (size_t i = size_t{v0} * 128; i < size_t{v1} * 128; ++i)
        if (std::fabs(exact[i]) > amax) amax = std::fabs(exact[i]);
      scales.push_back(amax > 0.0f ? amax / code_max : 0.0f);
      const float inv = amax > 0.0f ? code_max / amax : 0.0f;
      for (size_t i = size_t{v0} * 128; i < size_t{v1} * 128; ++i)
        codes[i] = static_cast<int32_t>(std::nearbyint(exact[i] * inv));
    }
  }
  float row(const Fixture& f, uint32_t r) const {
    float acc = 0.0f;
    for (uint32_t v0 = 0; v0 < f.nv; v0 += 32) {
      int64_t total = 0;
      for (uint32_t v = v0; v < std::min(f.nv, v0 + 32); ++v)
        for (int s = 0; s < 2; ++s) total += codes[(v * 2 + s) * 64 + f.index(r, v, s)];
      acc = std::fma(scales[v0 / 32], static_cast<float>(total), acc);
    }
    return f16_to_f32(f.scales[r]) * acc;
  }
};

// Dequantize row r (FORMAT.md reconstruction) and multiply by x in double.
// Also returns Σ|terms| of the kernel's own expansion, the scale of its f32
// rounding error.
void reference_row(const Fixture& f, const float* x, uint32_t r, double& y, double& magnitude) {
  const double scale = f16_to_f32(f.scales[r]);
  y = 0.0;
  magnitude = 0.0;
  for (uint32_t v = 0; v < f.nv; ++v)
    for (int j = 0; j < 4; ++j) {
      float w = 0.0f;
      for (int s = 0; s < 2; ++s) {
        const float c = f.stage(s)[f.index(r, v, s) * 4 + j];
        w += c;
        magnitude += std::fabs(double{c} * x[v * 4 + j]);
      }
      y += scale * w * x[v * 4 + j];
    }
  magnitude *= scale;
}

// Both precisions: int8 activations take int8 codes, f32 ones int16 codes.
struct Precision {
  TrunkActivations activations;
  float code_max;
};
const Precision kPrecisions[] = {{TrunkActivations::kInt8, 127.0f},
                                 {TrunkActivations::kF32, 32767.0f}};

// Code q[v][s][c] of a table's token, read as rvq.h lays it out.
int table_code(const RvqTable& table, uint32_t token, uint32_t v, int s, int c) {
  const int8_t* at =
      table.token_codes(token) + size_t{v} * table.planes() * 128 + c / 16 * 32 + s * 16 + c % 16;
  return table.planes() == 1 ? at[0] : 256 * at[128] + static_cast<uint8_t>(at[0]);
}

std::vector<float> run_all(const Fixture& f, const Exec& exec) {
  RvqCodebooks books(f.stage(0), f.stage(1));
  RvqTable table;
  table.build(books, f.x.data(), f.cols, f.tokens, exec);
  std::vector<uint32_t> tokens(f.tokens);
  for (uint32_t t = 0; t < f.tokens; ++t) tokens[t] = t;
  std::vector<float> y(size_t{f.tokens} * f.rows + 4, kSentinel);
  rvq_matmul(table, tokens, f.view(), y.data(), exec);
  return y;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Every token's outputs of the documented arithmetic, tokens × rows.
std::vector<float> documented_outputs(const Fixture& f, float code_max) {
  std::vector<float> out(size_t{f.tokens} * f.rows);
  for (uint32_t t = 0; t < f.tokens; ++t) {
    const DocumentedTable table(f, f.x.data() + size_t{t} * f.cols, code_max);
    for (uint32_t r = 0; r < f.rows; ++r) out[size_t{t} * f.rows + r] = table.row(f, r);
  }
  return out;
}

// Every instruction set at each thread count gives the documented bits and
// writes nothing past its outputs.
void check_every_isa(const Fixture& f, const Precision& precision,
                     std::initializer_list<size_t> thread_counts) {
  const std::vector<float> documented = documented_outputs(f, precision.code_max);
  for (Isa isa : testing::isas_under_test())
    for (size_t threads : thread_counts) {
      CAPTURE(isa_name(isa));
      CAPTURE(threads);
      ThreadPool pool(threads);
      std::vector<float> y = run_all(f, Exec{isa, &pool, precision.activations});
      for (size_t i = y.size() - 4; i < y.size(); ++i) CHECK(y[i] == kSentinel);
      y.resize(documented.size());
      CHECK(same_bits(y, documented));
    }
}

// Odd sizes, partial and whole 32-row blocks, one to many 128-input groups
// with a partial last one (cols 24, 136, 520, 1032) or none (784 is not:
// 196 vectors = 6 groups and 4; 1024 is).
const uint32_t kRows[] = {1, 15, 31, 32, 33, 63, 64, 65, 100, 200};
const uint32_t kCols[] = {8, 16, 24, 136, 520, 784, 1024, 1032};

}  // namespace

TEST_CASE("rvq matvec equals the documented arithmetic at every ISA, precision and thread count") {
  uint32_t seed = 1;
  for (uint32_t rows : kRows)
    for (uint32_t cols : kCols)
      for (const Precision& precision : kPrecisions) {
        CAPTURE(rows);
        CAPTURE(cols);
        CAPTURE(precision.code_max);
        check_every_isa(Fixture(rows, cols, 2, seed++), precision, {1, 2, 3});
      }
}

TEST_CASE("rvq matvec stays within its codes' error of dequantize-then-multiply") {
  uint32_t seed = 100;
  for (uint32_t cols : kCols)
    for (const Precision& precision : kPrecisions) {
      CAPTURE(precision.code_max);
      const Fixture f(40, cols, 1, seed++);
      const DocumentedTable table(f, f.x.data(), precision.code_max);
      const std::vector<float> y = run_all(f, Exec{best_isa(), nullptr, precision.activations});
      for (uint32_t r = 0; r < f.rows; ++r) {
        double ref = 0.0, magnitude = 0.0;
        reference_row(f, f.x.data(), r, ref, magnitude);
        // Each of a group's 2·nv_g codes is off by at most half its step d_g;
        // the f32 table by 4 roundings per entry; the group sums and the final
        // conversions by a few more.
        double step_error = 0.0;
        for (uint32_t v0 = 0; v0 < f.nv; v0 += 32)
          step_error += 2.0 * (std::min(f.nv, v0 + 32) - v0) * 0.5 * table.scales[v0 / 32];
        step_error *= f16_to_f32(f.scales[r]);
        const double bound = step_error * 1.001 + 12.0 * std::ldexp(1.0, -24) * magnitude;
        CHECK(std::fabs(y[r] - ref) <= bound);
      }
    }
}

TEST_CASE("batched rvq equals one call per token, bit for bit, tokens in any order") {
  const uint32_t tokens = 5;
  const Fixture f(70, 24, tokens, 99);
  const std::vector<uint32_t> chosen = {4, 0, 2, 2};
  for (Isa isa : testing::isas_under_test()) {
    ThreadPool pool(2);
    const Exec exec{isa, &pool};
    RvqCodebooks books(f.stage(0), f.stage(1));
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

// The multi-token path over chunks of 1024 rows (rows past 1024 and a short
// last block), each token against its own documented table.
TEST_CASE(
    "rvq over 1 to 9 tokens equals the documented arithmetic per token, many chunks included") {
  uint32_t seed = 300;
  for (const auto& [rows, cols] :
       {std::pair{1100u, 136u}, std::pair{2063u, 24u}, std::pair{77u, 520u}, std::pair{130u, 784u}})
    for (uint32_t tokens = 1; tokens <= 9; ++tokens) {
      // Alternating precisions: the row bodies' token loop does not depend on them.
      CAPTURE(rows);
      CAPTURE(tokens);
      check_every_isa(Fixture(rows, cols, tokens, seed++), kPrecisions[tokens % 2], {1, 3});
    }
}

// Each row body this machine runs, called directly over block ranges longer
// than one 1024-row chunk and starting off a chunk boundary, for 1 to 5 tokens.
TEST_CASE("every rvq row body equals the documented arithmetic over multi-chunk block ranges") {
  using Rows = void (*)(const RvqTable&, std::span<const uint32_t>, const RvqMatrixView&, uint32_t,
                        uint32_t, float*);
  std::vector<std::pair<const char*, Rows>> bodies = {{"scalar", detail::rvq_rows_scalar}};
  if (testing::isa_under_test(Isa::kAvx2)) bodies.emplace_back("avx2", detail::rvq_rows_avx2);
  uint32_t seed = 500;
  for (const auto& [rows, cols] : {std::pair{2400u, 48u}, std::pair{1500u, 200u}})
    for (uint32_t tokens = 1; tokens <= 5; ++tokens) {
      const Precision& precision = kPrecisions[tokens % 2];
      const Fixture f(rows, cols, tokens, seed++);
      RvqCodebooks books(f.stage(0), f.stage(1));
      RvqTable table;
      table.build(books, f.x.data(), f.cols, tokens,
                  Exec{Isa::kScalar, nullptr, precision.activations});
      std::vector<uint32_t> order(tokens);
      for (uint32_t t = 0; t < tokens; ++t) order[t] = tokens - 1 - t;  // not the identity
      const uint32_t begin = 3, end = f.rows_padded / 32;
      std::vector<float> documented(size_t{tokens} * rows, kSentinel);
      for (uint32_t i = 0; i < tokens; ++i) {
        const DocumentedTable t(f, f.x.data() + size_t{order[i]} * cols, precision.code_max);
        for (uint32_t r = begin * 32; r < rows; ++r) documented[size_t{i} * rows + r] = t.row(f, r);
      }
      for (const auto& [name, body] : bodies) {
        CAPTURE(rows);
        CAPTURE(tokens);
        CAPTURE(name);
        std::vector<float> y(documented.size(), kSentinel);
        body(table, order, f.view(), begin, end, y.data());
        CHECK(same_bits(y, documented));
      }
    }
}

TEST_CASE("a table built at one ISA gives the same bits when applied at another") {
  const Fixture f(100, 136, 1, 7);
  const std::vector<float> base = run_all(f, Exec{Isa::kScalar, nullptr});
  RvqCodebooks books(f.stage(0), f.stage(1));
  for (Isa build : testing::isas_under_test())
    for (Isa apply : testing::isas_under_test()) {
      RvqTable table;
      table.build(books, f.x.data(), f.cols, 1, Exec{build, nullptr});
      std::vector<float> y(f.rows + 4, kSentinel);
      rvq_matvec(table, 0, f.view(), y.data(), Exec{apply, nullptr});
      CHECK(same_bits(y, base));
    }
}

// Codes of a table built from x = (1, 0, 0, 0) are stage entries' first
// elements: entries chosen so the group's max is Q make the codes round them.
TEST_CASE("codes round half to even and clamp, NaN and infinities included, at every ISA") {
  const float nan = std::numeric_limits<float>::quiet_NaN(),
              inf = std::numeric_limits<float>::infinity();
  const std::vector<float> x = {1.0f, 0.0f, 0.0f, 0.0f, 1.0f, 0.0f, 0.0f, 0.0f};
  for (const Precision& precision : kPrecisions) {
    const float q = precision.code_max;
    // A half below -255 crosses a high byte for int16 codes (-256: high -1, low 0).
    const bool wide = q > 127.0f;
    const int top = static_cast<int>(q);
    // Each entry's first element and the code it must round to.
    const struct {
      float first;
      int code;
    } cases[] = {{0.5f, 0},   {1.5f, 2},
                 {-2.5f, -2}, {2.4f, 2},
                 {-0.5f, 0},  {wide ? -255.5f : -100.5f, wide ? -256 : -100},
                 {q, top},    {-(q - 0.4f), -top},
                 {nan, -top}};
    std::vector<float> books(2 * 64 * 4, 0.0f);
    for (size_t i = 0; i < std::size(cases); ++i)
      books[(64 + 3 + 5 * i) * 4] = cases[i].first;  // stage 1
    const RvqCodebooks codebooks(books.data(), books.data() + 64 * 4);
    // The same with an infinite entry: inv is 0, so finite entries give 0 and
    // the infinite one (0 · ∞, NaN) the lowest code.
    std::vector<float> infinite = books;
    infinite[(64 + 1) * 4] = inf;
    const RvqCodebooks infinite_books(infinite.data(), infinite.data() + 64 * 4);
    for (Isa isa : testing::isas_under_test()) {
      CAPTURE(q);
      CAPTURE(isa_name(isa));
      const Exec exec{isa, nullptr, precision.activations};
      RvqTable table;
      table.build(codebooks, x.data(), 8, 1, exec);
      for (uint32_t v = 0; v < 2; ++v)
        for (size_t i = 0; i < std::size(cases); ++i) {
          CAPTURE(i);
          CHECK(table_code(table, 0, v, 1, static_cast<int>(3 + 5 * i)) == cases[i].code);
        }
      CHECK(table.token_scales(0)[0] == 1.0f);
      table.build(infinite_books, x.data(), 8, 1, exec);
      CHECK(table_code(table, 0, 0, 1, 1) == -static_cast<int>(q));
      CHECK(table_code(table, 0, 0, 1, 3) == 0);
      CHECK(std::isinf(table.token_scales(0)[0]));
    }
  }
}

// Groups split over the pool in any way must give each table's own bits.
TEST_CASE("tables built together equal each table built alone, at any thread count") {
  const Fixture f(16, 1032, 3, 11);
  std::vector<float> other_books(2 * 64 * 4);
  for (size_t i = 0; i < other_books.size(); ++i)
    other_books[i] = f.codebooks[(i * 7) % other_books.size()] * 0.5f;
  const RvqCodebooks books(f.stage(0), f.stage(1));
  const RvqCodebooks second(other_books.data(), other_books.data() + 64 * 4);
  for (Isa isa : testing::isas_under_test())
    for (const Precision& precision : kPrecisions) {
      RvqTable alone_first, alone_second;
      alone_first.build(books, f.x.data(), f.cols, f.tokens,
                        Exec{isa, nullptr, precision.activations});
      alone_second.build(second, f.x.data(), f.cols, f.tokens,
                         Exec{isa, nullptr, precision.activations});
      for (size_t threads : {1, 2, 3, 5}) {
        CAPTURE(isa_name(isa));
        CAPTURE(threads);
        ThreadPool pool(threads);
        RvqTable together_first, together_second;
        const RvqTableBuild builds[] = {{&together_first, &books}, {&together_second, &second}};
        build_rvq_tables(builds, f.x.data(), f.cols, f.tokens,
                         Exec{isa, &pool, precision.activations});
        for (uint32_t t = 0; t < f.tokens; ++t) {
          const size_t n = alone_first.codes_per_token();
          const size_t groups = alone_first.groups() * sizeof(float);
          CHECK(std::memcmp(together_first.token_codes(t), alone_first.token_codes(t), n) == 0);
          CHECK(std::memcmp(together_second.token_codes(t), alone_second.token_codes(t), n) == 0);
          CHECK(std::memcmp(together_first.token_scales(t), alone_first.token_scales(t), groups) ==
                0);
          CHECK(std::memcmp(together_second.token_scales(t), alone_second.token_scales(t),
                            groups) == 0);
        }
      }
    }
}

TEST_CASE("an all-zero input gives exact zeros") {
  Fixture f(33, 136, 1, 3);
  std::fill(f.x.begin(), f.x.end(), 0.0f);
  for (Isa isa : testing::isas_under_test()) {
    std::vector<float> y = run_all(f, Exec{isa, nullptr});
    y.resize(f.rows);
    CHECK(y == std::vector<float>(f.rows, 0.0f));
  }
}

TEST_CASE("rebuilding a table at the same size keeps its memory") {
  const Fixture f(16, 136, 3, 4);
  RvqCodebooks books(f.stage(0), f.stage(1));
  RvqTable table;
  table.build(books, f.x.data(), f.cols, 3, Exec{best_isa(), nullptr});
  const int8_t* codes = table.token_codes(0);
  table.build(books, f.x.data(), f.cols, 2, Exec{best_isa(), nullptr});
  CHECK(table.token_codes(0) == codes);
}

TEST_CASE("rvq refuses mismatched shapes and tokens with errors naming them") {
  const Fixture f(16, 24, 1, 5);
  RvqCodebooks books(f.stage(0), f.stage(1));
  RvqTable table;
  const Exec exec{Isa::kScalar, nullptr};
  CHECK_THROWS_AS(table.build(books, f.x.data(), 20, 1, exec), Error);
  CHECK_THROWS_WITH_AS(table.build(books, f.x.data(), kRvqMaxCols + 8, 1, exec),
                       doctest::Contains("limit"), Error);
  table.build(books, f.x.data(), 24, 1, exec);
  std::vector<float> y(16);
  RvqMatrixView wrong = f.view();
  wrong.shape.cols = 16;
  CHECK_THROWS_WITH_AS(rvq_matvec(table, 0, wrong, y.data(), exec),
                       doctest::Contains("table was built for 24"), Error);
  CHECK_THROWS_WITH_AS(rvq_matvec(table, 1, f.view(), y.data(), exec), doctest::Contains("token 1"),
                       Error);
}
