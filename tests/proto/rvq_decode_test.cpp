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
  for (int s = 0; s < 3; ++s) {
    sum += testing::fixture_codebook_value(base + 3 * kind + s, m.index(row, col / 8, s), col % 8);
  }
  return static_cast<float>(sum * static_cast<double>(f16_to_f32(m.scales[row])));
}

TEST_CASE("every matrix of every record decodes to the hand-computed weights") {
  testing::TempDir tmp;
  testing::FixtureSpec spec;
  spec.layers = 3;
  spec.experts = 4;
  spec.hidden = 40;        // 5 vectors per row
  spec.expert_width = 24;  // gate/up rows 24 → 32 padded
  const Fixture fx = testing::write_fixture(tmp.path(), spec);
  const Container container = Container::open(tmp.path());
  const Codebooks codebooks = container.load_codebooks();
  REQUIRE(codebooks.count() == 9 * spec.layers);
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
            const float want = expected_weight(m, 9 * layer, k, r, c);
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

TEST_CASE("the decoder sums stages in order 0, 1, 2 in f32 before scaling") {
  // Stage values chosen so only (a + b) + c keeps the small term: a + (b + c)
  // and (a + c) + b both lose it to rounding.
  std::vector<float> values(size_t{9} * 256 * 8, 0.0f);
  values[(size_t{0} * 256 + 1) * 8 + 0] = 1.0f;   // gate stage 0, code 1
  values[(size_t{1} * 256 + 1) * 8 + 0] = -1.0f;  // gate stage 1
  values[(size_t{2} * 256 + 1) * 8 + 0] = 1e-8f;  // gate stage 2
  const Codebooks codebooks(9, values);
  const RecordLayout layout = RecordLayout::compute(8, 8);
  AlignedBuffer record(layout.stride, 4096);
  const RvqMatrixShape& gate = layout.matrices[0];
  for (int s = 0; s < 3; ++s) record.data()[layout.gate_off + gate.index_position(0, 0, s)] = 1;
  record.data()[layout.scales_offset(MatrixKind::kGate)] = 0x00;
  record.data()[layout.scales_offset(MatrixKind::kGate) + 1] = 0x40;  // f16 2.0
  const std::vector<float> w =
      decode_rvq_matrix(record.data(), layout, MatrixKind::kGate, codebooks, 0);
  CHECK(1.0f + (-1.0f + 1e-8f) == 0.0f);  // the other order really differs
  CHECK(w[0] == 1e-8f * 2.0f);
  CHECK(w[1] == 0.0f);
}

TEST_CASE("the decoder refuses codebooks that do not cover the layer") {
  const Codebooks codebooks(9, std::vector<float>(size_t{9} * 256 * 8, 0.0f));
  const RecordLayout layout = RecordLayout::compute(8, 8);
  AlignedBuffer record(layout.stride, 4096);
  SLUICE_CHECK_ERROR_CONTAINS(
      decode_rvq_matrix(record.data(), layout, MatrixKind::kDown, codebooks, 1), "codebook base 1");
  CHECK_THROWS_AS(Codebooks(2, std::vector<float>(100)), Error);
}

}  // namespace
}  // namespace sluice
