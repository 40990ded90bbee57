// compute/convert/expert_record.cpp: one expert → one record. The stage
// loop mirrors FORMAT.md: nearest code on the residual, stage after stage;
// the reconstruction used for the error is the reader's formula (stages
// summed in f32 in order, then scaled). Codes go through
// RvqMatrixShape::set_code, the one writer of the packed layout.
#include "compute/convert/expert_record.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "proto/error.h"
#include "proto/f16.h"

namespace sluice::convert {

namespace {

float row_amax(const float* row, uint32_t cols) {
  float amax = 0.0f;
  for (uint32_t c = 0; c < cols; ++c) amax = std::max(amax, std::fabs(row[c]));
  return amax;
}

void divide_row(const float* row, uint32_t cols, float s, float* out) {
  for (uint32_t c = 0; c < cols; ++c) out[c] = s != 0.0f ? row[c] / s : 0.0f;
}

// The same values 8 lanes at a time: max is exact in any order, and vmaxps
// returns its second operand (the running maximum) for a NaN as std::max does.
__attribute__((target("avx2"))) float row_amax_avx2(const float* row, uint32_t cols) {
  const __m256 magnitude = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  __m256 lanes = _mm256_setzero_ps();
  uint32_t c = 0;
  for (; c + 8 <= cols; c += 8)
    lanes = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(row + c), magnitude), lanes);
  alignas(32) float partial[8];
  _mm256_store_ps(partial, lanes);
  float amax = 0.0f;
  for (float p : partial) amax = std::max(amax, p);
  return std::max(amax, row_amax(row + c, cols - c));
}

__attribute__((target("avx2"))) void divide_row_avx2(const float* row, uint32_t cols, float s,
                                                     float* out) {
  if (s == 0.0f) {
    std::fill(out, out + cols, 0.0f);
    return;
  }
  const __m256 divisor = _mm256_set1_ps(s);
  uint32_t c = 0;
  for (; c + 8 <= cols; c += 8)
    _mm256_storeu_ps(out + c, _mm256_div_ps(_mm256_loadu_ps(row + c), divisor));
  divide_row(row + c, cols - c, s, out + c);
}

}  // namespace

void normalise_rows(const float* w, uint32_t rows, uint32_t cols, float* u, uint16_t* scales,
                    const std::string& tensor, uint32_t first_row, kernels::Isa isa) {
  const bool vector = isa != kernels::Isa::kScalar;
  for (uint32_t r = 0; r < rows; ++r) {
    const float* row = w + size_t{r} * cols;
    const float amax = vector ? row_amax_avx2(row, cols) : row_amax(row, cols);
    scales[r] = f32_to_f16(amax);
    const float s = f16_to_f32(scales[r]);
    if (!std::isfinite(s))
      fail("tensor {}: row {} has maximum {}, which does not fit an f16 scale", tensor,
           first_row + r, amax);
    float* out = u + size_t{r} * cols;
    if (vector) {
      divide_row_avx2(row, cols, s, out);
    } else {
      divide_row(row, cols, s, out);
    }
  }
}

std::array<ErrorSums, 3> encode_expert_record(const std::array<const float*, 3>& weights,
                                              const std::array<std::string, 3>& names,
                                              const RecordLayout& layout,
                                              const LayerCodebooks& codebooks, uint32_t layer,
                                              uint32_t expert, uint32_t codebook_base,
                                              uint8_t* record) {
  // Zero first: set_code merges into bytes it shares with other codes, and
  // padding rows keep codes and scales 0.
  std::memset(record, 0, layout.stride);
  std::array<ErrorSums, 3> errors{};
  // Kept per thread: a fresh matrix-sized buffer per expert costs more in page
  // faults than its normalisation.
  thread_local std::vector<float> u, residual, rebuilt;
  thread_local std::vector<uint16_t> scales;
  thread_local std::vector<uint8_t> codes;
  const kernels::Isa isa = search_isa();
  for (MatrixKind kind : kMatrixKinds) {
    const int k = static_cast<int>(kind);
    const RvqMatrixShape& shape = layout.matrices[k];
    u.resize(size_t{shape.rows} * shape.cols);
    scales.assign(shape.rows, 0);
    normalise_rows(weights[k], shape.rows, shape.cols, u.data(), scales.data(), names[k], 0, isa);
    uint8_t* indices = record + layout.matrix_offset(kind);
    uint8_t* scale_bytes = record + layout.scales_offset(kind);
    const Codebook* stage_books[kRvqStages];
    for (int s = 0; s < kRvqStages; ++s) stage_books[s] = &codebooks[k * kRvqStages + s];
    ErrorSums& err = errors[k];
    const uint32_t nv = shape.vectors_per_row();
    residual.resize(size_t{nv} * kRvqVecDim);
    rebuilt.resize(residual.size());
    codes.resize(nv);
    // Plain pointers: the thread_local vectors cost a TLS lookup per access.
    float* res = residual.data();
    float* reb = rebuilt.data();
    uint8_t* row_codes = codes.data();
    for (uint32_t r = 0; r < shape.rows; ++r) {
      scale_bytes[2 * r] = static_cast<uint8_t>(scales[r]);
      scale_bytes[2 * r + 1] = static_cast<uint8_t>(scales[r] >> 8);
      const float scale = f16_to_f32(scales[r]);
      const float* w_row = weights[k] + size_t{r} * shape.cols;
      // A whole row per stage: the search takes several vectors per codebook pass.
      std::memcpy(res, u.data() + size_t{r} * shape.cols, size_t{nv} * kRvqVecDim * sizeof(float));
      std::fill(reb, reb + size_t{nv} * kRvqVecDim, 0.0f);
      for (int s = 0; s < kRvqStages; ++s) {
        nearest_codes(*stage_books[s], res, nv, row_codes, isa);
        for (uint32_t v = 0; v < nv; ++v) {
          shape.set_code(indices, r, v, s, row_codes[v]);
          const float* e = stage_books[s]->entry(row_codes[v]);
#pragma GCC unroll 8
          for (int j = 0; j < kRvqVecDim; ++j) {
            res[v * kRvqVecDim + j] -= e[j];
            reb[v * kRvqVecDim + j] += e[j];
          }
        }
      }
      for (uint32_t c = 0; c < shape.cols; ++c) err.add(w_row[c], scale * reb[c]);
    }
  }
  seal_record(layout, layer, expert, codebook_base, record);
  return errors;
}

void seal_record(const RecordLayout& layout, uint32_t layer, uint32_t expert,
                 uint32_t codebook_base, uint8_t* record) {
  RecordHeader header = expected_header(layout, layer, expert, codebook_base);
  header.crc32 = payload_crc32(record, layout.payload_end);
  header.encode(record);
}

}  // namespace sluice::convert
