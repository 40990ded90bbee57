// compute/kernels/quant_kernels.h: internal to compute/kernels: the scalar,
// AVX2 and AVX-512 bodies behind quant.h, over a range of output rows. No
// argument checks here; quant.cpp checks before calling.
#pragma once

#include <cstdint>

#include "compute/kernels/quant.h"
#include "proto/f16.h"

namespace sluice::kernels::detail {

inline constexpr int32_t kActivationMax = 32767;

// Activations quantized as quant.h documents, for `tokens` tokens. xq holds
// tokens × padded_cols int16 (0 beyond cols); for q4g128 each group stores its
// even columns first, then its odd ones, to match the nibble order. sums holds
// Σ_k xq_k per (token, group), which turns the stored nibbles into w = n − 8.
struct QuantActivations {
  const int16_t* xq = nullptr;
  const float* step = nullptr;  // d_g, tokens × groups
  const int32_t* sums = nullptr;
  uint32_t padded_cols = 0, groups = 0;
};

// Fills xq, step and sums for one token of `cols` values (groups × 128 int16).
void quantize_activations(const float* x, uint32_t cols, QuantFormat format, int16_t* xq,
                          float* step, int32_t* sums);

// The documented fold of one group's integer sum into a row's output.
inline float add_group(float acc, uint16_t scale, float step, int32_t sum) {
  return acc + (f16_to_f32(scale) * step) * static_cast<float>(sum);
}

// Rows [row_begin, row_end) for `tokens` inputs (y stride rows).
void quant_rows_scalar(const QuantMatrixView& m, const QuantActivations& a, uint32_t tokens,
                       uint32_t row_begin, uint32_t row_end, float* y);
void quant_rows_avx2(const QuantMatrixView& m, const QuantActivations& a, uint32_t tokens,
                     uint32_t row_begin, uint32_t row_end, float* y);
void quant_rows_avx512(const QuantMatrixView& m, const QuantActivations& a, uint32_t tokens,
                       uint32_t row_begin, uint32_t row_end, float* y);

void f32_rows_scalar(const float* w, uint32_t cols, const float* x, uint32_t row_begin,
                     uint32_t row_end, float* y);
void f32_rows_avx2(const float* w, uint32_t cols, const float* x, uint32_t row_begin,
                   uint32_t row_end, float* y);

}  // namespace sluice::kernels::detail
