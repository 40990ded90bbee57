// compute/kernels/rvq_kernels.h: internal to compute/kernels (and its bench):
// the scalar, AVX2 and AVX-512 bodies behind rvq.h and rvq_decoded.h. Callers
// outside this folder use those. No bounds checks here; rvq.cpp and
// rvq_decoded.cpp check before calling.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "compute/kernels/lanes.h"
#include "compute/kernels/quant_kernels.h"
#include "compute/kernels/rvq.h"
#include "proto/f16.h"

namespace sluice::kernels::detail {

// Table path (rvq.h). Where plane 0's byte of code q[v][s][c] sits in a
// token's codes (plane 1's is kRvqTablePlaneBytes further).
inline size_t table_code_offset(int planes, uint32_t v, int s, int c) {
  return size_t{v} * static_cast<size_t>(planes) * kRvqTablePlaneBytes +
         static_cast<size_t>(c / 16 * 32 + s * 16 + c % 16);
}

// One group of one token's table: the codes of vectors
// [v_begin, v_end) (at most kRvqGroupVectors, v_begin a multiple of it) of
// input x in `planes` byte planes, written in the table's layout (codes is
// the token's first byte), and the group's scale d_g returned.
float rvq_build_group_scalar(const RvqCodebooks& codebooks, const float* x, uint32_t v_begin,
                             uint32_t v_end, int planes, int8_t* codes);
float rvq_build_group_avx2(const RvqCodebooks& codebooks, const float* x, uint32_t v_begin,
                           uint32_t v_end, int planes, int8_t* codes);

// Outputs of row blocks [block_begin, block_end) for table tokens `tokens`:
// y[i × rows + r] for the real (unpadded) rows r only.
void rvq_rows_scalar(const RvqTable& table, std::span<const uint32_t> tokens,
                     const RvqMatrixView& m, uint32_t block_begin, uint32_t block_end, float* y);
void rvq_rows_avx2(const RvqTable& table, std::span<const uint32_t> tokens, const RvqMatrixView& m,
                   uint32_t block_begin, uint32_t block_end, float* y);

// Decode-once path (rvq_decoded.h). A tile holds rows [row_begin, row_end) of
// m decoded, before the row scale, in panels of P rows: tile rows [iP, iP + P)
// (the last panel may hold fewer, Q rows) take Q · cols floats from row iP's
// row-major place, holding their columns 16 at a time, row after row (a final
// 8-column position 8 at a time). A sweep over a panel's columns then reads
// one sequential stream; with P = 1 the tile is row-major.
// The most rows a tile holds (rvq_decoded.cpp sizes tiles to L2 within this).
inline constexpr uint32_t kTileMaxRows = 2 * kRowBlock;
inline constexpr uint32_t kTilePanelRowsAvx2 = 3;
inline constexpr uint32_t kTilePanelRowsAvx512 = 1;
void rvq_decode_rows_scalar(const RvqCodebooks& codebooks, const RvqMatrixView& m,
                            uint32_t row_begin, uint32_t row_end, float* tile);
void rvq_decode_rows_avx2(const RvqCodebooks& codebooks, const RvqMatrixView& m, uint32_t row_begin,
                          uint32_t row_end, uint32_t panel_rows, float* tile);
// y[t × m.rows + r] for r in [row_begin, row_end) and every token, from a tile
// holding exactly those rows: row-major for scalar, in kTilePanelRows* panels
// for the others.
void rvq_tile_matmul_scalar(const float* tile, const RvqMatrixView& m, uint32_t row_begin,
                            uint32_t row_end, const float* x, uint32_t tokens, float* y);
void rvq_tile_matmul_avx2(const float* tile, const RvqMatrixView& m, uint32_t row_begin,
                          uint32_t row_end, const float* x, uint32_t tokens, float* y);
void rvq_tile_matmul_avx512(const float* tile, const RvqMatrixView& m, uint32_t row_begin,
                            uint32_t row_end, const float* x, uint32_t tokens, float* y);
// With int8 activations (rvq_decoded.h): a tile of rows [row_begin, row_end)
// as int8 weights q0 + q1, row-major, int8_tile_stride(cols) bytes a row
// (cols up to a whole int8 block, those past cols 0), and its products with x
// (column order) into y[t × m.rows + r]; sigma is the codebooks' integer_scale().
inline uint32_t int8_tile_stride(uint32_t cols) {
  return (cols + kInt8Block - 1) / kInt8Block * kInt8Block;
}
void rvq_decode_rows_int8_scalar(const RvqCodebooks& codebooks, const RvqMatrixView& m,
                                 uint32_t row_begin, uint32_t row_end, int8_t* tile);
void rvq_decode_rows_int8_avx2(const RvqCodebooks& codebooks, const RvqMatrixView& m,
                               uint32_t row_begin, uint32_t row_end, int8_t* tile);
void rvq_int8_tile_matmul_scalar(const int8_t* tile, float sigma, const RvqMatrixView& m,
                                 uint32_t row_begin, uint32_t row_end, const Int8Activations& x,
                                 float* y);
void rvq_int8_tile_matmul_avx2(const int8_t* tile, float sigma, const RvqMatrixView& m,
                               uint32_t row_begin, uint32_t row_end, const Int8Activations& x,
                               float* y);

}  // namespace sluice::kernels::detail
