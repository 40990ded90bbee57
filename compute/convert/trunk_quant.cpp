// compute/convert/trunk_quant.cpp: group quantization with f16 scales.
// The scale is rounded to f16 before dividing so that stored q times the
// stored scale is exactly what a reader reconstructs.
#include "compute/convert/trunk_quant.h"

#include <algorithm>
#include <cmath>
#include <utility>

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

// The format's q range: symmetric but for the one extra negative value the
// packed formats have room for.
std::pair<int, int> q_range(TrunkFormat format) {
  switch (format) {
    case TrunkFormat::kQ8G128:
      return {-127, 127};
    case TrunkFormat::kQ6G128:
      return {-32, 31};
    case TrunkFormat::kQ4G128:
      return {-8, 7};
    case TrunkFormat::kF32:
      break;
  }
  fail("trunk quantization: {} is not a grouped format", trunk_format_name(format));
}

size_t row_bytes(TrunkFormat format, size_t cols) { return trunk_row_bytes(format, padded_cols(cols)); }

}  // namespace

GroupQuantized allocate_grouped(TrunkFormat format, size_t rows, size_t cols) {
  q_range(format);  // refuses f32
  return {std::vector<uint8_t>(rows * row_bytes(format, cols)),
          std::vector<uint16_t>(rows * padded_cols(cols) / kTrunkGroup)};
}

ErrorSums quantize_grouped_rows(TrunkFormat format, const float* w, size_t cols, size_t row_begin, size_t row_end,
                                GroupQuantized& out, std::string_view tensor) {
  const auto [lo, hi] = q_range(format);
  ErrorSums err;
  const size_t bytes = row_bytes(format, cols), groups = padded_cols(cols) / kTrunkGroup;
  for (size_t r = row_begin; r < row_end; ++r) {
    uint8_t* dst = out.data.data() + r * bytes;
    quantize_row(w + r * cols, cols, hi, lo, out.scales.data() + r * groups, tensor, err,
                 [&](size_t i, int q) { set_trunk_integer(format, dst, i, q); });
  }
  return err;
}

std::vector<float> dequantize_grouped(TrunkFormat format, const GroupQuantized& q, size_t rows, size_t cols) {
  const size_t bytes = row_bytes(format, cols), groups = padded_cols(cols) / kTrunkGroup;
  std::vector<float> out(rows * cols);
  for (size_t r = 0; r < rows; ++r) {
    for (size_t c = 0; c < cols; ++c) {
      out[r * cols + c] = static_cast<float>(trunk_integer(format, q.data.data() + r * bytes, c)) *
                          f16_to_f32(q.scales[r * groups + c / kTrunkGroup]);
    }
  }
  return out;
}

}  // namespace sluice::convert
