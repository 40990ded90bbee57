// compute/kernels/quant_kernels.h: internal to compute/kernels: the scalar and
// AVX2 bodies behind quant.h, over a range of output rows. No argument checks
// here; quant.cpp checks before calling.
#pragma once

#include <cstdint>

#include "compute/kernels/quant.h"

namespace sluice::kernels::detail {

// Rows [row_begin, row_end) for `tokens` inputs (x stride cols, y stride rows).
void quant_rows_scalar(const QuantMatrixView& m, const float* x, uint32_t tokens, uint32_t row_begin,
                       uint32_t row_end, float* y);
void quant_rows_avx2(const QuantMatrixView& m, const float* x, uint32_t tokens, uint32_t row_begin,
                     uint32_t row_end, float* y);

void f32_rows_scalar(const float* w, uint32_t cols, const float* x, uint32_t row_begin, uint32_t row_end,
                     float* y);
void f32_rows_avx2(const float* w, uint32_t cols, const float* x, uint32_t row_begin, uint32_t row_end,
                   float* y);

}  // namespace sluice::kernels::detail
