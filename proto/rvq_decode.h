// proto/rvq_decode.h: the RVQ codebooks held in RAM and the scalar decoder
// that rebuilds one expert matrix exactly as FORMAT.md defines it. This is the
// ground truth kernels are tested against; it is never on the hot path.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "proto/record_format.h"

namespace sluice {

// All codebooks of a container: count × 64 entries × 4 f32, entry-major.
class Codebooks {
 public:
  Codebooks() = default;
  Codebooks(uint32_t count, std::vector<float> values);

  uint32_t count() const { return count_; }
  // The 4 floats of entry `code` of codebook `id`; id < count().
  const float* entry(uint32_t id, uint8_t code) const {
    return values_.data() + (size_t{id} * kRvqEntries + code) * kRvqVecDim;
  }
  const std::vector<float>& values() const { return values_; }

 private:
  uint32_t count_ = 0;
  std::vector<float> values_;
};

// No codebook entry can lie outside this: stage 0 approximates vectors of a
// row divided by its absmax (within [-1, 1]), and each later stage the
// residual of the stages before it, which at most doubles the range.
inline constexpr float kCodebookValueLimit = 4.0f;

// The first entry of `count` codebooks (entry-major, as in codebooks.bin)
// that is not finite or exceeds kCodebookValueLimit, described; else nothing.
std::optional<std::string> codebook_values_problem(const float* values, uint32_t count);

// Codebook id of (layer base, matrix kind, stage): base + kind·2 + stage.
inline uint32_t codebook_id(uint32_t codebook_base, MatrixKind kind, int stage) {
  return codebook_base + static_cast<uint32_t>(kind) * kRvqStages + static_cast<uint32_t>(stage);
}

// Decodes matrix `kind` of one record (already read and header-checked, laid
// out per `layout`) to f32 rows × cols, row-major, padding rows dropped:
// W[r, 4v+j] = f16(scale[r]) · (C0[i0][j] + C1[i1][j]).
// Throws Error when the codebooks do not cover codebook_base + 6.
std::vector<float> decode_rvq_matrix(const uint8_t* record, const RecordLayout& layout,
                                     MatrixKind kind, const Codebooks& codebooks,
                                     uint32_t codebook_base);

}  // namespace sluice
