// compute/kernels/rvq.h: the RVQ lookup-table matvec over expert records
// (FORMAT.md, "Expert records"). Experts are never dequantized: a table of
// input·codebook dot products is built once, then every row is a sum of lookups.
// Never reads index or scale bytes outside the matrix the view describes.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "compute/kernels/dispatch.h"
#include "proto/record_format.h"

namespace sluice::kernels {

// The three stage codebooks of one (layer, matrix kind), prepared once at load.
// Summation order of everything below (the PyTorch reference models this):
//
//   table   lut[t][v][s][c] = (((x8v·C[c][0] + x8v+1·C[c][1]) + ...) + x8v+7·C[c][7]),
//           each product and each sum rounded to f32 (no FMA), j = 0..7 in order.
//   rows    acc = 0; for v = 0..nv-1: for s = 0..2: acc += lut[t][v][s][idx(r, v, s)]
//           (f32, strictly in that order), then y[r] = f16_to_f32(scale[r]) * acc.
//
// The scalar and AVX2 paths perform exactly these operations, so their results
// are bit-identical, for any thread count and for batched versus single calls.
class RvqCodebooks {
 public:
  // Each stage: 256 entries × 8 f32, entry-major, as in codebooks.bin.
  RvqCodebooks(const float* stage0, const float* stage1, const float* stage2);
  // Transposed to [stage][dim][entry] so the table build reads 8 entries at once.
  const float* transposed(int stage) const { return transposed_.data() + stage * kRvqVecDim * kRvqEntries; }

 private:
  std::vector<float> transposed_;
};

// One stored matrix: its indices (layout rowblock16.vector.stage.row, exactly
// shape.index_bytes() bytes) and its shape.rows_padded() f16 row scales.
// Padding rows are never computed into outputs.
struct RvqMatrixView {
  RvqMatrixShape shape;
  const uint8_t* indices = nullptr;
  const uint16_t* scales = nullptr;
};

// Lookup tables for `tokens` input vectors of `cols` values against one codebook
// set: tokens × (cols/8) × 3 × 256 f32. The engine builds the gate and up tables
// once per token per layer and shares them among that layer's experts; the down
// table once per expert. Reusing one RvqTable object reuses its memory.
class RvqTable {
 public:
  // x holds `tokens` rows of `cols` f32 values (row stride `cols`).
  void build(const RvqCodebooks& codebooks, const float* x, uint32_t cols, uint32_t tokens,
             const Exec& exec);
  uint32_t cols() const { return cols_; }
  uint32_t tokens() const { return tokens_; }
  const float* token_table(uint32_t token) const;
  size_t bytes() const { return size_t{tokens_} * floats_per_token() * sizeof(float); }

 private:
  size_t floats_per_token() const { return size_t{cols_ / kRvqVecDim} * kRvqStages * kRvqEntries; }
  std::vector<float> data_;
  uint32_t cols_ = 0;
  uint32_t tokens_ = 0;
};

// y[0..rows) = W · x for the table's token `token`.
void rvq_matvec(const RvqTable& table, uint32_t token, const RvqMatrixView& matrix, float* y,
                const Exec& exec);

// For each i, y[i × rows ..] = W · x of table token tokens[i] (a prefill chunk
// applying one expert to the tokens that chose it). Bit-identical to calling
// rvq_matvec once per token.
void rvq_matmul(const RvqTable& table, std::span<const uint32_t> tokens, const RvqMatrixView& matrix,
                float* y, const Exec& exec);

}  // namespace sluice::kernels
