// compute/convert/trunk_quant.h: the grouped int8 / int4 trunk formats of
// FORMAT.md ("Trunk tensor formats"), both directions. Pure functions on
// memory; the dequantizers exist for error measurement and tests.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "compute/convert/error_sums.h"

namespace sluice::convert {

inline constexpr size_t kTrunkGroup = 128;

struct GroupQuantized {
  std::vector<uint8_t> data;     // q8: rows × padded_cols int8; q4: rows × padded_cols/2
  std::vector<uint16_t> scales;  // f16, [rows][padded_cols / 128]
};

inline size_t padded_cols(size_t cols) { return (cols + kTrunkGroup - 1) / kTrunkGroup * kTrunkGroup; }

// Quantizes rows [row_begin, row_end) of a row-major [rows, cols] matrix into
// `out`, which must already be sized for all rows: callers split rows among
// threads. `tensor` names the tensor when a group scale overflows f16.
// Returns the error of those rows.
ErrorSums quantize_q8g128_rows(const float* w, size_t cols, size_t row_begin, size_t row_end, GroupQuantized& out,
                          std::string_view tensor);
ErrorSums quantize_q4g128_rows(const float* w, size_t cols, size_t row_begin, size_t row_end, GroupQuantized& out,
                          std::string_view tensor);
GroupQuantized allocate_q8g128(size_t rows, size_t cols);
GroupQuantized allocate_q4g128(size_t rows, size_t cols);

// value = q × f16_to_f32(scale), padding dropped: [rows, cols].
std::vector<float> dequantize_q8g128(const GroupQuantized& q, size_t rows, size_t cols);
std::vector<float> dequantize_q4g128(const GroupQuantized& q, size_t rows, size_t cols);

}  // namespace sluice::convert
