// compute/kernels/rvq_kernels.h: internal to compute/kernels (and its bench):
// the scalar and AVX2 bodies behind rvq.h. Callers outside this folder use
// rvq.h. No bounds checks here; rvq.cpp checks before calling.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "compute/kernels/rvq.h"

namespace sluice::kernels::detail {

// Fills lut[v][s][c] for vectors [v_begin, v_end) of one input vector x.
void rvq_build_scalar(const RvqCodebooks& codebooks, const float* x, uint32_t v_begin, uint32_t v_end,
                      float* lut);
void rvq_build_avx2(const RvqCodebooks& codebooks, const float* x, uint32_t v_begin, uint32_t v_end,
                    float* lut);

// How the AVX2 row kernel walks the matrix. Any setting gives the same bits
// (each row is summed in the order rvq.h documents); they differ in speed only.
struct RvqRowsPlan {
  uint32_t blocks_per_pass = 2;  // 1 or 2 row blocks (16 or 32 rows) in registers at once
  uint32_t tile_vectors = 0;     // vector positions per pass over the rows; 0 = all of them
};
RvqRowsPlan default_rvq_rows_plan();

// rvq_matmul with an explicit AVX2 row plan (the benchmark compares plans).
void rvq_matmul_planned(const RvqTable& table, std::span<const uint32_t> tokens,
                        const RvqMatrixView& matrix, float* y, const Exec& exec, const RvqRowsPlan& plan);

// Outputs of row blocks [block_begin, block_end) for n tokens: token i reads
// table luts[i] and writes ys[i][row] for the real (unpadded) rows only.
void rvq_rows_scalar(const float* const* luts, size_t n,
                     const RvqMatrixView& m, uint32_t block_begin, uint32_t block_end, float* const* ys);
void rvq_rows_avx2(const float* const* luts, size_t n, const RvqMatrixView& m, uint32_t block_begin,
                   uint32_t block_end, float* const* ys, const RvqRowsPlan& plan);

}  // namespace sluice::kernels::detail
