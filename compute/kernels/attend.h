// compute/kernels/attend.h: the dot products and weighted sums of attention
// over cached rows that sit a fixed stride apart (a KV cache's keys, values
// or MLA's latents) and the f16 form rows are cached in, at every
// instruction set with the same bits, so that
// attention's cost grows with the context at the vector units' speed. Several
// queries share each pass over the rows: a kv head's group of query heads,
// and in prefill every token of a chunk, each with its own causal count.
//
// Arithmetic (every instruction set, bit for bit):
//   lane_dot(a, b, n)  16 lanes: lane l sums the products a_i·b_i, each
//                      rounded to f32 (never fused with the add), over
//                      i ≡ l (mod 16) in ascending i from 0; then fold16 (lanes.h).
//   attention_scores   scores[g·score_stride + p] = lane_dot(q_g, k_p, n) · scale
//                      for p < counts[g], q_g = q + g·n, k_p = k + p·k_stride;
//                      scores at p ≥ counts[g] are left alone.
//   attention_values   for p ascending below counts[g]:
//                      out_g[i] = out_g[i] + (w_g[p] · v_p[i]) (the product
//                      rounded, then the sum), out_g = out + g·n,
//                      w_g = weights + g·weight_stride, v_p = v + p·v_stride.
// So a query's results never depend on which other queries share the call.
// No argument is checked: the callers own the shapes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "compute/kernels/dispatch.h"

namespace sluice::kernels {

float lane_dot(const float* a, const float* b, uint32_t n, Isa isa);

// counts.size() queries of n values each against their first counts[g] rows.
void attention_scores(const float* q, std::span<const uint32_t> counts, const float* k,
                      size_t k_stride, uint32_t n, float scale, float* scores, size_t score_stride,
                      Isa isa);

// Adds each query's weighted sum of its first counts[g] value rows to its n outputs.
void attention_values(const float* weights, size_t weight_stride, std::span<const uint32_t> counts,
                      const float* v, size_t v_stride, uint32_t n, float* out, Isa isa);

// Cached rows stored as IEEE halves (MLA's latents), converted exactly as
// proto/f16.h does at every instruction set: to_half rounds to nearest even
// after clamping to ±65504 (a value past f16's range is cached as its
// largest finite value, never as infinity); from_half is exact.
void to_half(const float* in, uint32_t n, uint16_t* out, Isa isa);
// rows × n halves, a row every in_stride halves, into rows × n floats.
void from_half(const uint16_t* in, size_t in_stride, uint32_t rows, uint32_t n, float* out, Isa isa);

}  // namespace sluice::kernels
