// compute/convert/expert_record.cpp: one expert → one record. The stage
// loop mirrors FORMAT.md: nearest code on the residual, stage after stage;
// the reconstruction used for the error is the reader's formula (stages
// summed in f32 in order, then scaled).
#include "compute/convert/expert_record.h"

#include <cstring>
#include <vector>

#include "proto/error.h"
#include "proto/f16.h"

namespace sluice::convert {

void normalise_rows(const float* w, uint32_t rows, uint32_t cols, float* u, uint16_t* scales,
                    const std::string& tensor) {
  for (uint32_t r = 0; r < rows; ++r) {
    const float* row = w + size_t{r} * cols;
    float amax = 0.0f;
    for (uint32_t c = 0; c < cols; ++c) amax = std::max(amax, std::fabs(row[c]));
    scales[r] = f32_to_f16(amax);
    const float s = f16_to_f32(scales[r]);
    if (!std::isfinite(s))
      fail("tensor {}: row {} has maximum {}, which does not fit an f16 scale", tensor, r, amax);
    float* out = u + size_t{r} * cols;
    for (uint32_t c = 0; c < cols; ++c) out[c] = s != 0.0f ? row[c] / s : 0.0f;
  }
}

std::array<ErrorSums, 3> encode_expert_record(const std::array<const float*, 3>& weights,
                                              const std::array<std::string, 3>& names,
                                              const RecordLayout& layout,
                                              const LayerCodebooks& codebooks, uint32_t layer,
                                              uint32_t expert, uint32_t codebook_base,
                                              uint8_t* record) {
  std::memset(record, 0, layout.stride);
  std::array<ErrorSums, 3> errors{};
  std::vector<float> u, residual, rebuilt;
  std::vector<uint16_t> scales;
  std::vector<uint8_t> codes;
  const kernels::Isa isa = search_isa();
  for (MatrixKind kind : kMatrixKinds) {
    const int k = static_cast<int>(kind);
    const RvqMatrixShape& shape = layout.matrices[k];
    u.resize(size_t{shape.rows} * shape.cols);
    scales.assign(shape.rows, 0);
    normalise_rows(weights[k], shape.rows, shape.cols, u.data(), scales.data(), names[k]);
    uint8_t* indices = record + layout.matrix_offset(kind);
    uint8_t* scale_bytes = record + layout.scales_offset(kind);
    const Codebook* stage_books[kRvqStages];
    for (int s = 0; s < kRvqStages; ++s) stage_books[s] = &codebooks[k * kRvqStages + s];
    ErrorSums& err = errors[k];
    const uint32_t nv = shape.vectors_per_row();
    residual.resize(size_t{nv} * kRvqVecDim);
    rebuilt.resize(residual.size());
    codes.resize(nv);
    for (uint32_t r = 0; r < shape.rows; ++r) {
      scale_bytes[2 * r] = static_cast<uint8_t>(scales[r]);
      scale_bytes[2 * r + 1] = static_cast<uint8_t>(scales[r] >> 8);
      const float scale = f16_to_f32(scales[r]);
      const float* w_row = weights[k] + size_t{r} * shape.cols;
      // A whole row per stage: the search takes several vectors per codebook pass.
      std::memcpy(residual.data(), u.data() + size_t{r} * shape.cols,
                  residual.size() * sizeof(float));
      std::fill(rebuilt.begin(), rebuilt.end(), 0.0f);
      for (int s = 0; s < kRvqStages; ++s) {
        nearest_codes(*stage_books[s], residual.data(), nv, codes.data(), isa);
        for (uint32_t v = 0; v < nv; ++v) {
          indices[shape.index_position(r, v, s)] = codes[v];
          const float* e = stage_books[s]->entry(codes[v]);
          for (int j = 0; j < kRvqVecDim; ++j) {
            residual[v * kRvqVecDim + j] -= e[j];
            rebuilt[v * kRvqVecDim + j] += e[j];
          }
        }
      }
      for (uint32_t c = 0; c < shape.cols; ++c) err.add(w_row[c], scale * rebuilt[c]);
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
