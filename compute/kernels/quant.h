// compute/kernels/quant.h: matvec and prefill matmul over the resident trunk
// formats q8g128, q6g128 and q4g128 (FORMAT.md, "Trunk tensor formats"), and a plain f32
// matvec (routers). Weights stay quantized; activations stay f32 or are
// quantized to int8 (Exec::trunk). Never reads x past `cols` nor weights past
// the stored padded row.
#pragma once

#include <cstdint>

#include "compute/kernels/dispatch.h"
#include "proto/trunk_format.h"

namespace sluice::kernels {

enum class QuantFormat { kQ8G128, kQ6G128, kQ4G128 };
inline constexpr uint32_t kQuantGroup = 128;

// The container format a kernel format reads, whose layout proto states.
inline constexpr TrunkFormat stored_format(QuantFormat format) {
  return format == QuantFormat::kQ8G128   ? TrunkFormat::kQ8G128
         : format == QuantFormat::kQ6G128 ? TrunkFormat::kQ6G128
                                          : TrunkFormat::kQ4G128;
}

// One trunk tensor as stored. data: rows of row_bytes() (q8g128: int8 per
// column; q6g128: 24 bytes per 32 columns; q4g128: a nibble per column);
// scales: f16 [rows][padded_cols/128].
struct QuantMatrixView {
  QuantFormat format = QuantFormat::kQ8G128;
  uint32_t rows = 0;
  uint32_t cols = 0;
  const uint8_t* data = nullptr;
  const uint16_t* scales = nullptr;

  uint32_t padded_cols() const { return (cols + kQuantGroup - 1) / kQuantGroup * kQuantGroup; }
  uint32_t groups() const { return padded_cols() / kQuantGroup; }
  size_t row_bytes() const { return trunk_row_bytes(stored_format(format), padded_cols()); }
};

// Int8 activations (TrunkActivations::kInt8), the same on every instruction
// set, so the result is bit-identical across scalar, AVX2 and AVX-512. Each
// token's x is quantized per group g of 128 columns, [128g, 128g + 128) ∩
// [0, cols), the weights' group; in f32:
//   amax_g = max |x|, d_g = amax_g / 127, xq = round_half_even(x · (127 / amax_g))
//   (xq = 0 when amax_g = 0). The group is cut into blocks of 32 columns, b
//   covering [32b, 32b + 32) (blocks wholly beyond cols are skipped), whose 32
//   positions p hold column 32b + p (q8g128, q6g128), or for q4g128 column
//   32b + (p < 16 ? 2p : 2(p − 16) + 1). Lane l in 0..7 takes the positions
//   4l..4l + 3 of every block of the group: L_g[l] = Σ q·xq there, in int32
//   (exact). Then acc[l] = fma(f16_to_f32(scale_g), d_g · float(L_g[l]), acc[l])
//   (the product rounded to f32 first), acc from 0, groups ascending; y = the
//   reduction below. One scale per 128 rather than per 32 columns lets the
//   kernels convert once per group (q4 [2048x2048] × 64 tokens on one Zen 3
//   core: 10.0–10.4 → 7.8–8.1 ms).
//
// F32 activations (TrunkActivations::kF32), summation order per instruction
// set. w = the stored integer q converted to f32 (exact); group g covers
// columns [128g, 128g + 128) ∩ [0, cols).
//
//   scalar  for g: s_g = 0; for k in group g ascending: s_g += w[k] * x[k]  (mul then add)
//                  y += f16_to_f32(scale_g) * s_g  (mul then add), y starting at 0.
//   avx2    eight lanes l = 0..7. For each group g: a_g[l] = 0; for i ascending:
//             a_g[l] = fma(w[128g + 8i + l], x[128g + 8i + l], a_g[l])  (x beyond cols reads
//             as 0; chunks of 8 wholly beyond cols are skipped). Then
//             acc[l] = fma(f16_to_f32(scale_g), a_g[l], acc[l]) for g ascending, acc from 0.
//             y = ((acc0 + acc4) + (acc2 + acc6)) + ((acc1 + acc5) + (acc3 + acc7)).
//   avx512  as avx2 with sixteen lanes l = 0..15 and chunks of 16 columns
//             (a_g[l] over w[128g + 16i + l]), then s_l = acc_l + acc_{l+8},
//             t_l = s_l + s_{l+4} (l < 4), y = (t0 + t2) + (t1 + t3).
//
// The batched forms compute each output with exactly the matvec's operations,
// so quant_matmul equals `tokens` quant_matvec calls bit for bit, and no result
// depends on the thread count.
void quant_matvec(const QuantMatrixView& m, const float* x, float* y, const Exec& exec);

// x: tokens × cols (row stride cols); y: tokens × rows (row stride rows).
void quant_matmul(const QuantMatrixView& m, const float* x, uint32_t tokens, float* y,
                  const Exec& exec);

// Row `row` as f32: out[k] = f32(integer) · f16_to_f32(its group's scale),
// one rounding, k < cols. For products the kernels above do not take (an
// embedding row, MLA's transposed and per-head halves of kv_b_proj): the
// format is read once per row and the scale once per group.
void quant_dequantize_row(const QuantMatrixView& m, uint32_t row, float* out);

// The transposed product over a run of rows: for t < tokens and k < cols,
//   out[t·out_stride + k] += Σ_{i < count} c[t·c_stride + i] · w[first_row + i][k],
// for products whose coefficients index the rows (MLA's absorbed query,
// q̄ = W_UKᵀ q_nope, from kv_b_proj's key rows as stored). Every instruction
// set, bit for bit: s = out[k]; for i ascending:
//   s = fma(c_i · f16_to_f32(scale of row first_row + i, group of k), f32(q), s)
// (the coefficient's product rounded first), then out[k] = s. So the result
// never depends on how rows, columns or tokens are blocked.
void quant_transposed_matmul(const QuantMatrixView& m, uint32_t first_row, uint32_t count, const float* c,
                             size_t c_stride, uint32_t tokens, float* out, size_t out_stride, Isa isa);

// y[r] = Σ_k w[r][k] x[k], w row-major rows × cols f32.
//   scalar  y = 0; for k ascending: y += w[k] * x[k] (mul then add).
//   avx2    a[l] = fma(w[8i + l], x[8i + l], a[l]) for i ascending (x and w beyond
//           cols read as 0), then the same eight-lane reduction as above.
void f32_matvec(const float* w, uint32_t rows, uint32_t cols, const float* x, float* y,
                const Exec& exec);

}  // namespace sluice::kernels
