// The decode-once path against rvq_decoded.h's arithmetic written out here
// from the header and FORMAT.md, bit for bit at every instruction set, thread
// count (1, 2, 3) and token count (the in-register path up to six tokens,
// tiles from seven), over odd shapes and several tiles; and against the table
// path within their rounding difference.
#include "compute/kernels/rvq_decoded.h"

#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <random>
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
      : rows(rows_), cols(cols_), nv(cols_ / 8), tokens(tokens_) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
    codebooks.resize(3 * 256 * 8);
    for (float& c : codebooks) c = unit(rng);
    const uint32_t padded = (rows + 15) / 16 * 16;
    indices.resize(size_t{padded} * nv * 3);
    for (uint8_t& i : indices) i = static_cast<uint8_t>(rng());
    scales.resize(padded);
    for (uint16_t& s : scales) s = f32_to_f16(unit(rng) + 1.5f);
    x.resize(size_t{tokens} * cols);
    for (float& v : x) v = unit(rng);
  }
  RvqMatrixView view() const { return {RvqMatrixShape{rows, cols}, indices.data(), scales.data()}; }
  // FORMAT.md reconstruction of w[r][k] before the scale.
  float weight(uint32_t r, uint32_t k) const {
    float sum = 0.0f;
    for (int s = 0; s < 3; ++s) {
      const uint8_t i = indices[((size_t{r / 16} * nv * 3 + (k / 8) * 3 + s) * 16) + r % 16];
      const float c = codebooks[(s * 256 + i) * 8 + k % 8];
      sum = s == 0 ? c : sum + c;
    }
    return sum;
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
};

}  // namespace

TEST_CASE(
    "decoded rvq matmul equals its documented arithmetic at every ISA, thread and token count") {
  uint32_t seed = 1;
  for (uint32_t rows : {1, 17, 70, 200})
    for (uint32_t cols : {8, 24, 136, 520})
      for (uint32_t tokens : {1, 2, 3, 4, 5, 6, 7, 9}) {
        const Fixture f(rows, cols, tokens, seed++);
        const RvqCodebooks books(f.codebooks.data(), f.codebooks.data() + 2048,
                                 f.codebooks.data() + 4096);
        std::vector<float> documented(size_t{tokens} * rows);
        for (uint32_t t = 0; t < tokens; ++t)
          for (uint32_t r = 0; r < rows; ++r) documented[size_t{t} * rows + r] = f.documented(t, r);
        for (Isa isa : testing::isas_under_test())
          for (size_t threads : {1, 2, 3}) {
            CAPTURE(rows);
            CAPTURE(cols);
            CAPTURE(tokens);
            CAPTURE(isa_name(isa));
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

TEST_CASE("decoded and table paths agree to the table codes' rounding") {
  const Fixture f(100, 520, 4, 11);
  const RvqCodebooks books(f.codebooks.data(), f.codebooks.data() + 2048,
                           f.codebooks.data() + 4096);
  const Exec exec{best_isa(), nullptr};
  std::vector<float> decoded(size_t{f.tokens} * f.rows), table_path(decoded.size());
  rvq_matmul_decoded(books, f.view(), f.x.data(), f.tokens, decoded.data(), exec);
  RvqTable table;
  table.build(books, f.x.data(), f.cols, f.tokens, exec);
  const std::vector<uint32_t> all = {0, 1, 2, 3};
  rvq_matmul(table, all, f.view(), table_path.data(), exec);
  for (uint32_t t = 0; t < f.tokens; ++t)
    for (uint32_t r = 0; r < f.rows; ++r) {
      // Each of 3·nv codes is off by at most half a step of scale·|f|max/32767.
      const double step = table.token_scale(t) * f16_to_f32(f.scales[r]);
      const size_t i = size_t{t} * f.rows + r;
      CHECK(std::fabs(decoded[i] - table_path[i]) <=
            3.0 * f.nv * 0.5 * step * 1.01 + 1e-4 * std::fabs(decoded[i]));
    }
}

TEST_CASE("decoded rvq matmul refuses a bad matrix and names it") {
  const Fixture f(16, 24, 1, 3);
  const RvqCodebooks books(f.codebooks.data(), f.codebooks.data() + 2048,
                           f.codebooks.data() + 4096);
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
