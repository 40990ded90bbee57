// compute/kernels/rvq_decoded.h: the decode-once path. For one expert matrix
// applied to n tokens, its weights are decoded once instead of n table
// lookups: tile by tile into an L2-sized f32 or int8 block multiplied as a
// small GEMM. Never reads index or scale bytes outside the matrix the view names.
#pragma once

#include <cstdint>

#include "compute/kernels/dispatch.h"
#include "compute/kernels/rvq.h"

namespace sluice::kernels {

// With int8 activations, the fewest tokens of one call that take int8 tiles,
// on every instruction set, so that which arithmetic a call gets never
// depends on the machine. From there int8 tiles beat f32 ones (format 2's
// bench kernels, one Zen 3 core, an OLMoE expert: 8 tokens 2.53–2.61 →
// 1.98–1.99 ms, 64 tokens 13.3–13.8 → 10.6–10.9).
inline constexpr uint32_t kRvqInt8TilesFrom = 5;

// Arithmetic (every instruction set, bit for bit; it differs from the table
// path's int16 codes by rounding only, about 1e-5 relative, and from its int8
// codes by about 1%):
//
//   weights  w[r][4v + j] = C0[i0][j] + C1[i1][j] in f32, the container's
//            reconstruction (FORMAT.md) before the row scale.
//   rows     16 lanes: a_l = 0; for c ascending: a_l = fma(w[r][16c + l], x[16c + l], a_l)
//            (one rounding per step; lanes past cols add nothing);
//            s_l = a_l + a_{l+8}, t_l = s_l + s_{l+4}, u_l = t_l + t_{l+2} for the
//            lower halves, total = u_0 + u_1; y[r] = f16_to_f32(scale[r]) · total.
//
// With int8 activations (Exec::trunk) and at least kRvqInt8TilesFrom tokens,
// the weights and inputs are integers instead (every instruction set, bit for
// bit), which the tiles multiply with integer dot products:
//
//   weights  m_s = max |C_s| over the stage's entries, bound = m0 + m1,
//            inv = kRvqIntegerBound / bound, σ = bound / kRvqIntegerBound (f32;
//            both 0 when bound is 0); q_s = round_half_even(C_s · inv) per value;
//            w[r][4v + j] = q0[i0][j] + q1[i1][j], at most 126 in magnitude.
//   inputs   each token's x as quant.h's int8 activations: d_g and xq per
//            group g of 128 columns.
//   rows     acc = 0; for each group g ascending: L_g = Σ w[r][k] · xq[k] over
//            the group's columns (exact); acc = acc + d_g · f32(L_g) (each
//            operation rounded to f32); y[r] = f16_to_f32(scale[r]) · (σ · acc).
//
// Against the f32 arithmetic that costs the rounding of each weight to σ steps
// and of each input to its group's step: about 1e-2 relative per output, and
// +0.064% perplexity on the demo model prefilled in chunks of 64 (58.526 →
// 58.564). So with int8 activations an expert's outputs depend, that much, on
// whether it served fewer tokens than kRvqInt8TilesFrom in one call, as they
// do on the crossover.
//
// Results do not depend on the thread count; apart from that threshold, not
// on how many tokens share a call.
// x: tokens × cols f32 (row stride cols); y: tokens × rows (row stride rows).
// Each thread decodes into its own tile, which grows once and is then reused.
void rvq_matmul_decoded(const RvqCodebooks& codebooks, const RvqMatrixView& matrix, const float* x,
                        uint32_t tokens, float* y, const Exec& exec);

// Which of the two paths to take for n tokens: rvq_crossover.h.

}  // namespace sluice::kernels
