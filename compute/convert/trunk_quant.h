// compute/convert/trunk_quant.h: the grouped integer trunk formats of
// FORMAT.md ("Trunk tensor formats"), both directions. Pure functions on
// memory; the dequantizers exist for error measurement and tests.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "compute/convert/error_sums.h"
#include "proto/trunk_format.h"

namespace sluice::convert {

inline constexpr size_t kTrunkGroup = 128;

// One grouped tensor's bytes (proto/trunk_format.h: trunk_row_bytes per row)
// and its f16 scales, [rows][padded_cols / 128].
struct GroupQuantized {
  std::vector<uint8_t> data;
  std::vector<uint16_t> scales;
};

inline size_t padded_cols(size_t cols) { return (cols + kTrunkGroup - 1) / kTrunkGroup * kTrunkGroup; }

// `format` is q8g128, q6g128 or q4g128.
GroupQuantized allocate_grouped(TrunkFormat format, size_t rows, size_t cols);

// Quantizes rows [row_begin, row_end) of a row-major [rows, cols] matrix into
// `out`, which must already be sized for all rows: callers split rows among
// threads. `tensor` names the tensor when a group scale overflows f16.
// Returns the error of those rows.
ErrorSums quantize_grouped_rows(TrunkFormat format, const float* w, size_t cols, size_t row_begin, size_t row_end,
                                GroupQuantized& out, std::string_view tensor);

// value = q × f16_to_f32(scale), padding dropped: [rows, cols].
std::vector<float> dequantize_grouped(TrunkFormat format, const GroupQuantized& q, size_t rows, size_t cols);

}  // namespace sluice::convert
