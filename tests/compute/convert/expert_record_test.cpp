// tests/compute/convert/expert_record_test.cpp: an encoded record decoded
// here straight from the FORMAT.md text (byte offsets, the packing of the
// 6-bit codes, reconstruction formula): header fields, crc, padding rows,
// and the reconstruction error on Gaussian weights.
#include "compute/convert/expert_record.h"

#include <zlib.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include <doctest/doctest.h>

#include "compute/convert/kmeans.h"
#include "proto/f16.h"
#include "tests/compute/convert/test_util.h"

namespace sluice::convert {
namespace {

uint32_t u32_at(const uint8_t* p) { return p[0] | p[1] << 8 | p[2] << 16 | uint32_t{p[3]} << 24; }
uint16_t u16_at(const uint8_t* p) { return static_cast<uint16_t>(p[0] | p[1] << 8); }

// The code of (row r, vector v, stage s) in one matrix's index bytes, as
// FORMAT.md's "Index bytes" spell it out: the 48-byte unit of (r / 32, v),
// lane i = r % 16, half h = (r % 32) / 16.
int format_code(const uint8_t* indices, uint32_t nv, uint32_t r, uint32_t v, int s) {
  const uint8_t* unit = indices + (size_t{r / 32} * nv + v) * 48;
  const uint32_t i = r % 16, h = r % 32 / 16;
  const int lo = unit[16 * s + i] >> (4 * h) & 0xF;
  const int hi = unit[32 + i] >> (4 * s + 2 * h) & 0x3;
  return lo + 16 * hi;
}

struct Expert {
  uint32_t hidden, width;
  std::array<std::vector<float>, 3> w;  // gate [I,H], up [I,H], down [H,I]
};

Expert gaussian_expert(uint32_t hidden, uint32_t width, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  Expert e{hidden, width, {}};
  for (auto& m : e.w) {
    m.resize(size_t{hidden} * width);
    for (float& x : m) x = normal(rng);
  }
  return e;
}

LayerCodebooks train_for(const Expert& e, const RecordLayout& layout) {
  LayerCodebooks books;
  for (int k = 0; k < 3; ++k) {
    const auto& m = layout.matrices[k];
    std::vector<float> u(e.w[k].size());
    std::vector<uint16_t> scales(m.rows);
    normalise_rows(e.w[k].data(), m.rows, m.cols, u.data(), scales.data(), "t");
    const auto stages = train_rvq(u, {static_cast<uint64_t>(k) + 1, 12, 2});
    for (int s = 0; s < kRvqStages; ++s) books[k * kRvqStages + s] = stages[s];
  }
  return books;
}

TEST_CASE("a record decodes back by the FORMAT.md rules") {
  const uint32_t hidden = 128, width = 40;  // 40 rows pad to 64; down has 10 vectors per row
  Expert e = gaussian_expert(hidden, width, 1);
  std::fill(e.w[0].begin() + 3 * hidden, e.w[0].begin() + 4 * hidden, 0.0f);  // gate row 3 all zero
  const RecordLayout layout = RecordLayout::compute(hidden, width);
  const LayerCodebooks books = train_for(e, layout);
  std::vector<uint8_t> record(layout.stride, 0xAB);
  const auto errors = encode_expert_record({e.w[0].data(), e.w[1].data(), e.w[2].data()}, {"g", "u", "d"}, layout,
                                           books, 7, 5, 63, record.data());
  const uint8_t* r = record.data();
  CHECK(u32_at(r) == 0x52584C53u);
  CHECK(u16_at(r + 4) == 2);
  CHECK(u16_at(r + 6) == 7);
  CHECK(u32_at(r + 8) == 5);
  CHECK(u32_at(r + 12) == 63);
  CHECK(u32_at(r + 16) == layout.stride);
  CHECK(u32_at(r + 20) == 64);
  const uint32_t offsets[3] = {u32_at(r + 20), u32_at(r + 24), u32_at(r + 28)};
  const uint32_t scales_off = u32_at(r + 32), payload_end = u32_at(r + 36);
  CHECK(layout.stride % 4096 == 0);
  CHECK(u32_at(r + 40) == static_cast<uint32_t>(::crc32(0L, r + 64, payload_end - 64)));
  for (int i = 44; i < 64; ++i) CHECK(r[i] == 0);
  for (size_t i = payload_end; i < layout.stride; ++i) REQUIRE(r[i] == 0);

  const uint32_t rows[3] = {width, width, hidden}, cols[3] = {hidden, hidden, width};
  uint32_t scale_cursor = scales_off;
  for (int k = 0; k < 3; ++k) {
    const uint32_t nv = cols[k] / 4, rows_padded = (rows[k] + 31) / 32 * 32;
    CHECK(offsets[k] % 64 == 0);
    double err = 0, norm = 0;
    for (uint32_t row = 0; row < rows_padded; ++row) {
      const uint16_t scale = u16_at(r + scale_cursor + 2 * row);
      auto index = [&](uint32_t v, int s) { return format_code(r + offsets[k], nv, row, v, s); };
      if (row >= rows[k]) {
        REQUIRE(scale == 0);
        for (uint32_t v = 0; v < nv; ++v) {
          for (int s = 0; s < 2; ++s) REQUIRE(index(v, s) == 0);
        }
        continue;
      }
      float amax = 0;
      for (uint32_t c = 0; c < cols[k]; ++c) amax = std::max(amax, std::fabs(e.w[k][row * cols[k] + c]));
      REQUIRE(scale == f32_to_f16(amax));
      for (uint32_t v = 0; v < nv; ++v) {
        for (int j = 0; j < 4; ++j) {
          const float sum =
              books[k * 2].entry(index(v, 0))[j] + books[k * 2 + 1].entry(index(v, 1))[j];
          const double w = e.w[k][row * cols[k] + v * 4 + j];
          const double w_hat = f16_to_f32(scale) * sum;
          err += (w - w_hat) * (w - w_hat);
          norm += w * w;
        }
      }
    }
    scale_cursor += rows_padded * 2;
    CHECK(errors[k].error == doctest::Approx(err).epsilon(1e-9));
    CHECK(errors[k].norm == doctest::Approx(norm).epsilon(1e-12));
  }
  CHECK(scale_cursor == payload_end);
  CHECK(u16_at(r + scales_off + 3 * 2) == 0);  // the all-zero gate row
}

TEST_CASE("encoding each stage takes the nearest code of the residual") {
  const RecordLayout layout = RecordLayout::compute(64, 16);
  Expert e = gaussian_expert(64, 16, 2);
  const LayerCodebooks books = train_for(e, layout);
  std::vector<uint8_t> record(layout.stride);
  encode_expert_record({e.w[0].data(), e.w[1].data(), e.w[2].data()}, {"g", "u", "d"}, layout, books, 0, 0, 0,
                       record.data());
  const RvqMatrixShape& m = layout.matrices[2];
  std::vector<float> u(e.w[2].size());
  std::vector<uint16_t> scales(m.rows);
  normalise_rows(e.w[2].data(), m.rows, m.cols, u.data(), scales.data(), "d");
  int high_codes = 0;  // codes of 16 and up: their top bits sit in the shared bytes
  for (uint32_t row = 0; row < m.rows; ++row) {
    for (uint32_t v = 0; v < m.vectors_per_row(); ++v) {
      float residual[4];
      for (int j = 0; j < 4; ++j) residual[j] = u[row * m.cols + v * 4 + j];
      for (int s = 0; s < 2; ++s) {
        const Codebook& book = books[2 * 2 + s];
        const int code = nearest_code_scalar(book, residual);
        REQUIRE(format_code(record.data() + layout.down_off, m.vectors_per_row(), row, v, s) ==
                code);
        high_codes += code >= 16;
        for (int j = 0; j < 4; ++j) residual[j] -= book.entry(code)[j];
      }
    }
  }
  CHECK(high_codes > 0);
}

TEST_CASE("Gaussian experts reconstruct with about 20% relative error") {
  const uint32_t hidden = 256, width = 128;
  std::array<ErrorSums, 3> total{};
  std::vector<Expert> experts;
  for (uint32_t i = 0; i < 4; ++i) experts.push_back(gaussian_expert(hidden, width, 10 + i));
  const RecordLayout layout = RecordLayout::compute(hidden, width);
  // Codebooks trained on all four experts, like one layer's shared codebooks.
  LayerCodebooks books;
  for (int k = 0; k < 3; ++k) {
    const auto& m = layout.matrices[k];
    std::vector<float> all;
    for (const auto& e : experts) {
      std::vector<float> u(e.w[k].size());
      std::vector<uint16_t> scales(m.rows);
      normalise_rows(e.w[k].data(), m.rows, m.cols, u.data(), scales.data(), "t");
      all.insert(all.end(), u.begin(), u.end());
    }
    const auto stages = train_rvq(all, {static_cast<uint64_t>(k), 12, 2});
    for (int s = 0; s < 2; ++s) books[k * 2 + s] = stages[s];
  }
  std::vector<uint8_t> record(layout.stride);
  for (uint32_t i = 0; i < experts.size(); ++i) {
    const auto& e = experts[i];
    const auto errors = encode_expert_record({e.w[0].data(), e.w[1].data(), e.w[2].data()}, {"g", "u", "d"}, layout,
                                             books, 0, i, 0, record.data());
    for (int k = 0; k < 3; ++k) total[k].add(errors[k]);
  }
  for (int k = 0; k < 3; ++k) {
    MESSAGE(std::string(matrix_kind_name(static_cast<MatrixKind>(k))) << " relative error " << total[k].relative());
    CHECK(total[k].relative() > 0.12);
    CHECK(total[k].relative() < 0.26);
  }
}

TEST_CASE("a row too large for an f16 scale is refused naming tensor and row") {
  std::vector<float> w(2 * 8, 1.0f);
  w[12] = 1e6f;
  std::vector<float> u(w.size());
  std::vector<uint16_t> scales(2);
  const std::string message = test::error_of([&] { normalise_rows(w.data(), 2, 8, u.data(), scales.data(), "x.weight"); });
  CHECK(test::contains(message, "tensor x.weight: row 1"));
  // A row normalised on its own is named by its place in the tensor.
  const std::string alone = test::error_of([&] { normalise_rows(&w[8], 1, 8, u.data(), scales.data(), "x.weight", 41); });
  CHECK(test::contains(alone, "tensor x.weight: row 41"));
}

TEST_CASE("every instruction set normalises rows to the scalar path's values") {
  // 3 rows of 3584 + 5 columns (a tail after the 8-lane blocks): Gaussian, all
  // zeros, and one whose maximum sits in the tail with a negative sign.
  const uint32_t rows = 3, cols = 3589;
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  std::vector<float> w(size_t{rows} * cols);
  for (float& x : w) x = normal(rng);
  std::fill(w.begin() + cols, w.begin() + 2 * cols, 0.0f);
  w[3 * cols - 2] = -0.5f;
  std::vector<float> want(w.size());
  std::vector<uint16_t> want_scales(rows);
  normalise_rows(w.data(), rows, cols, want.data(), want_scales.data(), "t", 0, kernels::Isa::kScalar);
  CHECK(want_scales[1] == 0);
  CHECK(f16_to_f32(want_scales[2]) == 0.5f);
  for (kernels::Isa isa : kernels::supported_isas()) {
    CAPTURE(kernels::isa_name(isa));
    std::vector<float> u(w.size(), -1.0f);
    std::vector<uint16_t> scales(rows);
    normalise_rows(w.data(), rows, cols, u.data(), scales.data(), "t", 0, isa);
    CHECK(scales == want_scales);
    CHECK(std::memcmp(u.data(), want.data(), u.size() * sizeof(float)) == 0);
  }
}

}  // namespace
}  // namespace sluice::convert
