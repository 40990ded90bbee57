// compute/kernels/rvq_kernels.h: internal to compute/kernels (and its bench):
// the scalar, AVX2 and AVX-512 bodies behind rvq.h. Callers outside this folder
// use rvq.h. No bounds checks here; rvq.cpp checks before calling.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "compute/kernels/lanes.h"
#include "compute/kernels/quant_kernels.h"
#include "compute/kernels/rvq.h"
#include "proto/f16.h"

namespace sluice::kernels::detail {

inline constexpr int32_t kRvqCodeMax = 32767;
inline constexpr int32_t kRvqPlaneBias = 32768;  // planes hold q + 32768 as unsigned 16 bits

// Vector positions per span of a row body's sweep: one token's tables for
// them, as codes or as planes (16 · 3 · 512 B = 24 KiB), stay in L1 while every
// row of a chunk reads them, with room left for the index lines streaming past.
inline constexpr uint32_t kRvqSpanVectors = 16;

// Fills f[v][s][c] for vectors [v_begin, v_end) of one input vector x and
// returns max |f| over what it wrote (NaNs ignored).
float rvq_build_scalar(const RvqCodebooks& codebooks, const float* x, uint32_t v_begin,
                       uint32_t v_end, float* lut);
float rvq_build_avx2(const RvqCodebooks& codebooks, const float* x, uint32_t v_begin,
                     uint32_t v_end, float* lut);
float rvq_build_avx512(const RvqCodebooks& codebooks, const float* x, uint32_t v_begin,
                       uint32_t v_end, float* lut);

// Codes of `count` table entries (a multiple of 256, starting on a (v, s)
// boundary): codes[i] = q(exact[i]), and when planes is not null its byte
// planes too (planes points at the first entry's (v, s) block).
void rvq_quantize_scalar(const float* exact, size_t count, float inv, int16_t* codes,
                         uint8_t* planes);
void rvq_quantize_avx2(const float* exact, size_t count, float inv, int16_t* codes,
                       uint8_t* planes);
void rvq_quantize_avx512(const float* exact, size_t count, float inv, int16_t* codes,
                         uint8_t* planes);

// One output from its exact integer sum, as rvq.h documents.
inline float rvq_row_output(int32_t total, float table_scale, uint16_t row_scale) {
  return f16_to_f32(row_scale) * (table_scale * static_cast<float>(total));
}

// Outputs of row blocks [block_begin, block_end) for table tokens `tokens`:
// y[i × rows + r] for the real (unpadded) rows r only. rvq_rows_avx512 needs a
// table built with Isa::kAvx512 and block_begin a multiple of 4.
void rvq_rows_scalar(const RvqTable& table, std::span<const uint32_t> tokens,
                     const RvqMatrixView& m, uint32_t block_begin, uint32_t block_end, float* y);
void rvq_rows_avx2(const RvqTable& table, std::span<const uint32_t> tokens, const RvqMatrixView& m,
                   uint32_t block_begin, uint32_t block_end, float* y);
void rvq_rows_avx512(const RvqTable& table, std::span<const uint32_t> tokens,
                     const RvqMatrixView& m, uint32_t block_begin, uint32_t block_end, float* y);

}  // namespace sluice::kernels::detail

namespace sluice::kernels::detail {

// Decode-once path (rvq_decoded.h). A tile holds rows [row_begin, row_end) of
// m decoded, before the row scale, in panels of P rows: tile rows [iP, iP + P)
// (the last panel may hold fewer, Q rows) take Q · cols floats from row iP's
// row-major place, holding their columns 16 at a time, row after row (a final
// 8-column position 8 at a time). A sweep over a panel's columns then reads
// one sequential stream; with P = 1 the tile is row-major.
// The most rows a tile holds (rvq_decoded.cpp sizes tiles to L2 within this).
inline constexpr uint32_t kTileMaxRows = 4 * kRowBlock;
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
// as int8 weights q0 + q1 + q2, row-major, int8_tile_stride(cols) bytes a row
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
// y[t × m.rows + r] for the real rows of blocks [block_begin, block_end) and
// every token, decoding each weight in registers once per token pair instead of
// into a tile: for the few tokens where a tile's round trip costs more than it
// saves. Same arithmetic as the tile path.
void rvq_fused_rows_avx2(const RvqCodebooks& codebooks, const RvqMatrixView& m,
                         uint32_t block_begin, uint32_t block_end, const float* x, uint32_t tokens,
                         float* y);

}  // namespace sluice::kernels::detail
