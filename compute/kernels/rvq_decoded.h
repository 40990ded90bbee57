// compute/kernels/rvq_decoded.h: the decode-once path. For one expert matrix
// applied to n tokens, its weights are decoded and multiplied instead of n
// table lookups: for a few tokens in registers, never stored; for more, tile
// by tile into an L2-sized f32 block multiplied as a small GEMM. Never reads
// index or scale bytes outside the matrix the view names.
#pragma once

#include <cstdint>

#include "compute/kernels/dispatch.h"
#include "compute/kernels/rvq.h"

namespace sluice::kernels {

// Arithmetic (every instruction set, bit for bit; it differs from the table
// path's int16 codes by rounding only, about 1e-6 relative):
//
//   weights  w[r][8v + j] = (C0[i0][j] + C1[i1][j]) + C2[i2][j] in f32, the
//            container's reconstruction (FORMAT.md) before the row scale.
//   rows     16 lanes: a_l = 0; for c ascending: a_l = fma(w[r][16c + l], x[16c + l], a_l)
//            (one rounding per step; lanes past cols add nothing);
//            s_l = a_l + a_{l+8}, t_l = s_l + s_{l+4}, u_l = t_l + t_{l+2} for the
//            lower halves, total = u_0 + u_1; y[r] = f16_to_f32(scale[r]) · total.
//
// Results do not depend on the thread count or on how many tokens share a call.
// x: tokens × cols f32 (row stride cols); y: tokens × rows (row stride rows).
// Each thread decodes into its own tile, which grows once and is then reused.
void rvq_matmul_decoded(const RvqCodebooks& codebooks, const RvqMatrixView& matrix, const float* x,
                        uint32_t tokens, float* y, const Exec& exec);

// Which of the two paths to take for n tokens: rvq_crossover.h.

}  // namespace sluice::kernels
