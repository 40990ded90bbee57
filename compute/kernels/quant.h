// compute/kernels/quant.h: matvec and prefill matmul over the resident trunk
// formats q8g128 and q4g128 (FORMAT.md, "Trunk tensor formats"), and a plain f32
// matvec (routers). Weights stay quantized; activations become int16 per group
// and each group's dot product is an exact integer sum.
// Never reads x past `cols` nor weights past the stored padded row.
#pragma once

#include <cstdint>

#include "compute/kernels/dispatch.h"

namespace sluice::kernels {

enum class QuantFormat { kQ8G128, kQ4G128 };
inline constexpr uint32_t kQuantGroup = 128;

// One trunk tensor as stored. data: rows × padded_cols int8 (q8g128) or
// rows × padded_cols/2 nibble bytes (q4g128); scales: f16 [rows][padded_cols/128].
struct QuantMatrixView {
  QuantFormat format = QuantFormat::kQ8G128;
  uint32_t rows = 0;
  uint32_t cols = 0;
  const uint8_t* data = nullptr;
  const uint16_t* scales = nullptr;

  uint32_t padded_cols() const { return (cols + kQuantGroup - 1) / kQuantGroup * kQuantGroup; }
  uint32_t groups() const { return padded_cols() / kQuantGroup; }
  size_t row_bytes() const {
    return format == QuantFormat::kQ8G128 ? padded_cols() : padded_cols() / 2;
  }
};

// Arithmetic, identical bit for bit at every instruction set
// (scripts/sluicepy/trunk_int16.py models it). Group g covers columns
// [128g, 128g + 128) ∩ [0, cols); w is the stored integer (q8: int8, q4: nibble − 8).
//
//   activations  once per token and group: a_g = max |x_k| over the group;
//                d_g = a_g / 32767 and inv_g = 32767 / a_g (f32 divisions, both 0
//                when a_g is 0); xq_k = clamp(round_half_even(x_k · inv_g), ±32767),
//                a NaN or out-of-int32 product counting as −2^31 before the clamp.
//   rows         S_g = Σ_k w_k · xq_k, exact in int32 (any order);
//                y = 0; for g ascending: y = y + (f16_to_f32(scale_g) · d_g) · f32(S_g),
//                each product and sum rounded to f32 (no FMA).
//
// Against f32 activations this costs a relative error of about 2^-16 of each
// group's largest |x| per term. quant_matmul equals `tokens` quant_matvec calls
// bit for bit, and no result depends on the thread count. The activations are
// quantized into per-thread scratch that grows once and is then reused.
void quant_matvec(const QuantMatrixView& m, const float* x, float* y, const Exec& exec);

// x: tokens × cols (row stride cols); y: tokens × rows (row stride rows).
void quant_matmul(const QuantMatrixView& m, const float* x, uint32_t tokens, float* y,
                  const Exec& exec);

// y[r] = Σ_k w[r][k] x[k], w row-major rows × cols f32.
//   scalar  y = 0; for k ascending: y += w[k] * x[k] (mul then add).
//   avx2    a[l] = fma(w[8i + l], x[8i + l], a[l]) for i ascending (x and w beyond
//           cols read as 0), then y = ((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7)).
//   avx512  runs the avx2 body.
void f32_matvec(const float* w, uint32_t rows, uint32_t cols, const float* x, float* y,
                const Exec& exec);

}  // namespace sluice::kernels
