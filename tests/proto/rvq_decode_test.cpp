// tests/proto/rvq_decode_test.cpp: the scalar RVQ decoder against values
// computed by hand from the fixture's indices, scales and codebook formula.
#include "proto/rvq_decode.h"

#include <doctest/doctest.h>

#include "proto/aligned_buffer.h"
#include "proto/container.h"
#include "proto/error.h"
#include "proto/f16.h"
#include "tests/proto/container_fixture.h"

namespace sluice {
namespace {

using testing::Fixture;
using testing::FixtureMatrix;

float expected_weight(const FixtureMatrix& m, uint32_t base, int kind, uint32_t row, uint32_t col) {
  double sum = 0.0;  // exact: the fixture's values are short dyadic rationals
  for (int s = 0; s < 2; ++s) {
    sum += testing::fixture_codebook_value(base + 2 * kind + s, m.index(row, col / 4, s), col % 4);
  }
  return static_cast<float>(sum * static_cast<double>(f16_to_f32(m.scales[row])));
}

TEST_CASE("every matrix of every record decodes to the hand-computed weights") {
  testing::TempDir tmp;
  testing::FixtureSpec spec;
  spec.layers = 3;
  spec.experts = 4;
  spec.hidden = 40;        // 10 vectors per row
  spec.expert_width = 24;  // gate/up rows 24 → 32 padded; down rows 40 → 64, two row blocks
  const Fixture fx = testing::write_fixture(tmp.path(), spec);
  const Container container = Container::open(tmp.path());
  const Codebooks codebooks = container.load_codebooks();
  REQUIRE(codebooks.count() == 6 * spec.layers);
  AlignedBuffer record(fx.record_stride, 4096);
  int nonzero = 0, subnormal_scaled = 0;
  for (uint32_t layer = 0; layer < spec.layers; ++layer) {
    const MoeLayerInfo& info = container.moe_layer(layer);
    for (uint32_t e = 0; e < spec.experts; ++e) {
      container.read_record(layer, e, record.data(), true);
      for (int k = 0; k < 3; ++k) {
        const FixtureMatrix& m = fx.experts[layer][e][k];
        const auto kind = static_cast<MatrixKind>(k);
        const std::vector<float> w =
            decode_rvq_matrix(record.data(), info.layout, kind, codebooks, info.codebook_base);
        REQUIRE(w.size() == size_t{m.rows} * m.cols);
        for (uint32_t r = 0; r < m.rows; ++r) {
          for (uint32_t c = 0; c < m.cols; ++c) {
            const float want = expected_weight(m, 6 * layer, k, r, c);
            if (w[size_t{r} * m.cols + c] != want) {
              FAIL("layer ", layer, " expert ", e, " ", matrix_kind_name(kind), " [", r, ",", c,
                   "]: got ", w[size_t{r} * m.cols + c], " want ", want);
            }
            nonzero += want != 0.0f;
            subnormal_scaled += m.scales[r] == 0x0010 && want != 0.0f;
          }
        }
      }
    }
  }
  CHECK(nonzero > 1000);        // the comparison was not vacuous
  CHECK(subnormal_scaled > 0);  // subnormal f16 scales were exercised
}

TEST_CASE("the decoder reads the code bits FORMAT.md gives and sums stages before scaling") {
  // Gate [32, 8] (2 vectors per row). Row 17, vector 1: unit 48, i = 1, h = 1;
  // stage 0 code 37 = 5 + 16 · 2, stage 1 code 58 = 10 + 16 · 3.
  std::vector<float> values(size_t{6} * 64 * 4, 0.0f);
  values[(size_t{0} * 64 + 37) * 4 + 2] = 1.0f;      // gate stage 0, code 37, element 2
  values[(size_t{1} * 64 + 58) * 4 + 2] = 0x1p-24f;  // gate stage 1, code 58, element 2
  const Codebooks codebooks(6, values);
  const RecordLayout layout = RecordLayout::compute(8, 32);
  AlignedBuffer record(layout.stride, 4096);
  uint8_t* gate = record.data() + layout.gate_off;
  gate[48 + 1] = 5 << 4;                // stage 0 low bits, upper nibble (h = 1)
  gate[48 + 16 + 1] = 10 << 4;          // stage 1 low bits
  gate[48 + 32 + 1] = 2 << 2 | 3 << 6;  // high bits: stage 0 at 2-3, stage 1 at 6-7
  uint8_t* scale = record.data() + layout.scales_offset(MatrixKind::kGate) + 2 * 17;
  scale[0] = 0x00;
  scale[1] = 0x42;  // f16 3.0
  const std::vector<float> w =
      decode_rvq_matrix(record.data(), layout, MatrixKind::kGate, codebooks, 0);
  // 1 + 2^-24 rounds to 1 in f32, so the weight is exactly 3; scaling each
  // stage first, or summing in double, gives 3 + 2^-22.
  CHECK(3.0f * 1.0f + 3.0f * 0x1p-24f == 3.0f + 0x1p-22f);
  CHECK(static_cast<float>(3.0 * (1.0 + 0x1p-24)) == 3.0f + 0x1p-22f);
  CHECK(w[17 * 8 + 4 + 2] == 3.0f);
  for (size_t i = 0; i < w.size(); ++i) {
    if (i != 17 * 8 + 4 + 2) REQUIRE(w[i] == 0.0f);
  }
}

TEST_CASE("the decoder refuses codebooks that do not cover the layer") {
  const Codebooks codebooks(6, std::vector<float>(size_t{6} * 64 * 4, 0.0f));
  const RecordLayout layout = RecordLayout::compute(8, 8);
  AlignedBuffer record(layout.stride, 4096);
  SLUICE_CHECK_ERROR_CONTAINS(
      decode_rvq_matrix(record.data(), layout, MatrixKind::kDown, codebooks, 1), "codebook base 1");
  CHECK_THROWS_AS(Codebooks(2, std::vector<float>(100)), Error);
}

}  // namespace
}  // namespace sluice
