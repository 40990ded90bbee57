// compute/convert/trunk_quant.cpp: group quantization with f16 scales.
// The scale is rounded to f16 before dividing so that stored q times the
// stored scale is exactly what a reader reconstructs.
#include "compute/convert/trunk_quant.h"

#include <algorithm>
#include <cmath>

#include "proto/error.h"
#include "proto/f16.h"

namespace sluice::convert {
namespace {

// Quantizes one row; `emit(i, q)` stores element i's q (padding included).
template <typename Emit>
void quantize_row(const float* row, size_t cols, int hi, int lo, uint16_t* scales, std::string_view tensor,
                  ErrorSums& err, Emit emit) {
  const size_t groups = padded_cols(cols) / kTrunkGroup;
  for (size_t g = 0; g < groups; ++g) {
    const size_t begin = g * kTrunkGroup, end = std::min(cols, begin + kTrunkGroup);
    float amax = 0.0f;
    for (size_t i = begin; i < end; ++i) amax = std::max(amax, std::fabs(row[i]));
    const uint16_t scale = f32_to_f16(amax / static_cast<float>(hi));
    const float s = f16_to_f32(scale);
    if (!std::isfinite(s)) fail("tensor {}: group maximum {} does not fit an f16 scale", tensor, amax);
    scales[g] = scale;
    for (size_t i = begin; i < begin + kTrunkGroup; ++i) {
      int q = 0;
      if (i < end && s != 0.0f) {
        q = static_cast<int>(std::clamp(std::nearbyint(row[i] / s), static_cast<float>(lo), static_cast<float>(hi)));
      }
      if (i < end) err.add(row[i], static_cast<float>(q) * s);
      emit(i, q);
    }
  }
}

template <typename Decode>
std::vector<float> dequantize(const GroupQuantized& q, size_t rows, size_t cols, Decode decode) {
  const size_t padded = padded_cols(cols), groups = padded / kTrunkGroup;
  std::vector<float> out(rows * cols);
  for (size_t r = 0; r < rows; ++r) {
    for (size_t c = 0; c < cols; ++c) {
      out[r * cols + c] = static_cast<float>(decode(r * padded + c)) * f16_to_f32(q.scales[r * groups + c / kTrunkGroup]);
    }
  }
  return out;
}

}  // namespace

GroupQuantized allocate_q8g128(size_t rows, size_t cols) {
  return {std::vector<uint8_t>(rows * padded_cols(cols)), std::vector<uint16_t>(rows * padded_cols(cols) / kTrunkGroup)};
}

GroupQuantized allocate_q4g128(size_t rows, size_t cols) {
  return {std::vector<uint8_t>(rows * padded_cols(cols) / 2),
          std::vector<uint16_t>(rows * padded_cols(cols) / kTrunkGroup)};
}

ErrorSums quantize_q8g128_rows(const float* w, size_t cols, size_t row_begin, size_t row_end,
                               GroupQuantized& out, std::string_view tensor) {
  ErrorSums err;
  const size_t padded = padded_cols(cols), groups = padded / kTrunkGroup;
  for (size_t r = row_begin; r < row_end; ++r) {
    uint8_t* dst = out.data.data() + r * padded;
    quantize_row(w + r * cols, cols, 127, -127, out.scales.data() + r * groups, tensor, err,
                 [&](size_t i, int q) { dst[i] = static_cast<uint8_t>(static_cast<int8_t>(q)); });
  }
  return err;
}

ErrorSums quantize_q4g128_rows(const float* w, size_t cols, size_t row_begin, size_t row_end,
                               GroupQuantized& out, std::string_view tensor) {
  ErrorSums err;
  const size_t padded = padded_cols(cols), groups = padded / kTrunkGroup;
  for (size_t r = row_begin; r < row_end; ++r) {
    uint8_t* dst = out.data.data() + r * padded / 2;
    quantize_row(w + r * cols, cols, 7, -8, out.scales.data() + r * groups, tensor, err, [&](size_t i, int q) {
      const uint8_t nibble = static_cast<uint8_t>(q + 8);
      if (i % 2 == 0) {
        dst[i / 2] = nibble;
      } else {
        dst[i / 2] = static_cast<uint8_t>(dst[i / 2] | nibble << 4);
      }
    });
  }
  return err;
}

std::vector<float> dequantize_q8g128(const GroupQuantized& q, size_t rows, size_t cols) {
  return dequantize(q, rows, cols, [&](size_t i) { return static_cast<int8_t>(q.data[i]); });
}

std::vector<float> dequantize_q4g128(const GroupQuantized& q, size_t rows, size_t cols) {
  return dequantize(q, rows, cols, [&](size_t i) { return ((q.data[i / 2] >> (4 * (i % 2))) & 0xf) - 8; });
}

}  // namespace sluice::convert
