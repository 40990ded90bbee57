// compute/kernels/quant_kernels.h: internal to compute/kernels: the scalar,
// AVX2 and AVX-512 bodies behind quant.h, over a range of output rows, and the
// int8 activations they share. No argument checks here; quant.cpp checks first.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "compute/kernels/quant.h"

namespace sluice::kernels::detail {

inline constexpr uint32_t kInt8Block = 32;
inline constexpr uint32_t kQ6BlockBytes = 24;  // a q6g128 block of 32 columns

// Block b of token t holds positions p = 0..31 of columns [32b, 32b + 32):
// column 32b + p for q8g128 and q6g128, and for q4g128 the block's even columns first,
// column 32b + (p < 16 ? 2p : 2(p − 16) + 1), the order its nibbles unpack in.
// Columns at or beyond cols hold 0. The scale is per group of 128 columns,
// the weights' group: scales[t][g] = amax/127 of group g's columns.
struct Int8Activations {
  QuantFormat order = QuantFormat::kQ8G128;
  uint32_t tokens = 0, cols = 0, stride = 0;  // stride: cols rounded up to 128
  std::vector<int8_t> values;                 // tokens × stride
  std::vector<float> scales;                  // tokens × stride/128

  uint32_t groups() const { return stride / kQuantGroup; }
  float group_scale(size_t token, uint32_t group) const { return scales[token * groups() + group]; }
  uint32_t used_blocks() const { return (cols + kInt8Block - 1) / kInt8Block; }
  const int8_t* block_values(size_t token, uint32_t block) const {
    return values.data() + token * stride + size_t{block} * kInt8Block;
  }
  // Sized for `tokens` × `cols`; grows only, so the hot path stops allocating.
  void prepare(QuantFormat format, uint32_t tokens_, uint32_t cols_);
};

// The eight q6g128 integers of columns k..k+7 (k a multiple of 8) as int8
// bytes, column k in the lowest.
inline uint64_t q6_columns8(const uint8_t* row, uint32_t k) {
  const uint8_t* block = row + size_t{k / kInt8Block} * kQ6BlockBytes;
  const uint32_t p = k % kInt8Block;
  uint64_t low, top;
  std::memcpy(&low, block + p % 16, sizeof low);
  std::memcpy(&top, block + 16, sizeof top);
  low = (p < 16 ? low : low >> 4) & 0x0f0f0f0f0f0f0f0full;
  top = (top >> (2 * (p / 8))) & 0x0303030303030303ull;
  // Each byte u = q + 32 lies in 0..63: (u + 96) ^ 128 is u − 32 as a two's
  // complement byte, and no byte carries into the next.
  return ((low | top << 4) + 0x6060606060606060ull) ^ 0x8080808080808080ull;
}

// Calls fn.template operator()<F>() with F the compile-time form of `format`.
template <typename Fn>
inline void with_format(QuantFormat format, Fn&& fn) {
  switch (format) {
    case QuantFormat::kQ8G128:
      return fn.template operator()<QuantFormat::kQ8G128>();
    case QuantFormat::kQ6G128:
      return fn.template operator()<QuantFormat::kQ6G128>();
    case QuantFormat::kQ4G128:
      return fn.template operator()<QuantFormat::kQ4G128>();
  }
}

inline uint32_t int8_column_at(QuantFormat order, uint32_t position) {
  if (order != QuantFormat::kQ4G128) return position;
  return position < 16 ? 2 * position : 2 * (position - 16) + 1;
}

// x: tokens × cols, row stride cols.
void quantize_activations_scalar(const float* x, Int8Activations& out);
void quantize_activations_avx2(const float* x, Int8Activations& out);
// The body for `isa` (AVX-512 machines run the AVX2 one): the same bits on every set.
void quantize_activations(const float* x, Int8Activations& out, Isa isa);

// Rows [row_begin, row_end) for every token of x, quantized for m's format.
void int8_rows_scalar(const QuantMatrixView& m, const Int8Activations& x, uint32_t row_begin, uint32_t row_end,
                      float* y);
void int8_rows_avx2(const QuantMatrixView& m, const Int8Activations& x, uint32_t row_begin, uint32_t row_end,
                    float* y);
void int8_rows_avx512_vnni(const QuantMatrixView& m, const Int8Activations& x, uint32_t row_begin,
                           uint32_t row_end, float* y);

// Rows [row_begin, row_end) for `tokens` inputs (x stride cols, y stride rows).
void quant_rows_scalar(const QuantMatrixView& m, const float* x, uint32_t tokens, uint32_t row_begin,
                       uint32_t row_end, float* y);
void quant_rows_avx2(const QuantMatrixView& m, const float* x, uint32_t tokens, uint32_t row_begin,
                     uint32_t row_end, float* y);
void quant_rows_avx512(const QuantMatrixView& m, const float* x, uint32_t tokens, uint32_t row_begin,
                       uint32_t row_end, float* y);

// quant_transposed_matmul's bodies; columns [col_begin, col_end), col_begin a
// multiple of 32 for the vector one.
void transposed_rows_scalar(const QuantMatrixView& m, uint32_t first_row, uint32_t count, const float* c,
                            size_t c_stride, uint32_t tokens, float* out, size_t out_stride, uint32_t col_begin,
                            uint32_t col_end);
void transposed_rows_avx2(const QuantMatrixView& m, uint32_t first_row, uint32_t count, const float* c,
                          size_t c_stride, uint32_t tokens, float* out, size_t out_stride);

void f32_rows_scalar(const float* w, uint32_t cols, const float* x, uint32_t row_begin, uint32_t row_end,
                     float* y);
void f32_rows_avx2(const float* w, uint32_t cols, const float* x, uint32_t row_begin, uint32_t row_end,
                   float* y);

}  // namespace sluice::kernels::detail
