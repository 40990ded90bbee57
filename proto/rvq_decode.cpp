// proto/rvq_decode.cpp: the scalar RVQ decoder. Plain loops on purpose: it
// must be obviously equal to FORMAT.md, not fast.
#include "proto/rvq_decode.h"

#include <fmt/format.h>

#include <cmath>

#include "proto/error.h"
#include "proto/f16.h"

namespace sluice {

std::optional<std::string> codebook_values_problem(const float* values, uint32_t count) {
  const size_t per_book = size_t{kRvqEntries} * kRvqVecDim;
  for (size_t i = 0; i < count * per_book; ++i) {
    if (!std::isfinite(values[i]) || std::fabs(values[i]) > kCodebookValueLimit) {
      return fmt::format("codebook {} entry {} element {} is {}, outside [-{}, {}]", i / per_book,
                         i % per_book / kRvqVecDim, i % kRvqVecDim, values[i], kCodebookValueLimit,
                         kCodebookValueLimit);
    }
  }
  return std::nullopt;
}

Codebooks::Codebooks(uint32_t count, std::vector<float> values)
    : count_(count), values_(std::move(values)) {
  if (values_.size() != size_t{count_} * kRvqEntries * kRvqVecDim) {
    fail("codebooks: {} floats do not make {} codebooks of {} x {}", values_.size(), count_,
         kRvqEntries, kRvqVecDim);
  }
}

std::vector<float> decode_rvq_matrix(const uint8_t* record, const RecordLayout& layout,
                                     MatrixKind kind, const Codebooks& codebooks,
                                     uint32_t codebook_base) {
  if (uint64_t{codebook_base} + 3 * kRvqStages > codebooks.count()) {
    fail("codebook base {} needs {} codebooks but only {} are loaded", codebook_base,
         codebook_base + 3 * kRvqStages, codebooks.count());
  }
  const RvqMatrixShape& shape = layout.matrices[static_cast<int>(kind)];
  const uint8_t* indices = record + layout.matrix_offset(kind);
  const uint8_t* scales = record + layout.scales_offset(kind);
  const uint32_t nv = shape.vectors_per_row();
  std::vector<float> out(size_t{shape.rows} * shape.cols);
  for (uint32_t r = 0; r < shape.rows; ++r) {
    const uint8_t* scale_bytes = scales + size_t{r} * sizeof(uint16_t);
    const float scale = f16_to_f32(static_cast<uint16_t>(scale_bytes[0] | scale_bytes[1] << 8));
    for (uint32_t v = 0; v < nv; ++v) {
      const float* stage_entry[kRvqStages];
      for (int s = 0; s < kRvqStages; ++s) {
        stage_entry[s] = codebooks.entry(codebook_id(codebook_base, kind, s),
                                         shape.code(indices, r, v, s));
      }
      for (int j = 0; j < kRvqVecDim; ++j) {
        float sum = stage_entry[0][j];
        for (int s = 1; s < kRvqStages; ++s) sum += stage_entry[s][j];
        out[size_t{r} * shape.cols + size_t{v} * kRvqVecDim + j] = sum * scale;
      }
    }
  }
  return out;
}

}  // namespace sluice
