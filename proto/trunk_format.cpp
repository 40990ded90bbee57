// proto/trunk_format.cpp: trunk tensor geometry and the reference dequantizer.
// The dequantizer is ground truth for tests, never a hot path.
#include "proto/trunk_format.h"

#include "proto/error.h"
#include "proto/f16.h"

namespace sluice {

const char* trunk_format_name(TrunkFormat format) {
  switch (format) {
    case TrunkFormat::kF32:
      return "f32";
    case TrunkFormat::kQ8G128:
      return "q8g128";
    case TrunkFormat::kQ4G128:
      return "q4g128";
  }
  return "?";
}

std::optional<TrunkFormat> parse_trunk_format(std::string_view name) {
  if (name == "f32") return TrunkFormat::kF32;
  if (name == "q8g128") return TrunkFormat::kQ8G128;
  if (name == "q4g128") return TrunkFormat::kQ4G128;
  return std::nullopt;
}

uint64_t TrunkTensorInfo::padded_cols() const {
  if (format == TrunkFormat::kF32) return cols;
  return (cols + kTrunkGroup - 1) / kTrunkGroup * kTrunkGroup;
}

uint64_t TrunkTensorInfo::expected_bytes() const {
  switch (format) {
    case TrunkFormat::kF32:
      return rows * cols * sizeof(float);
    case TrunkFormat::kQ8G128:
      return rows * padded_cols();
    case TrunkFormat::kQ4G128:
      return rows * padded_cols() / 2;
  }
  return 0;
}

uint64_t TrunkTensorInfo::expected_scale_bytes() const {
  return rows * groups_per_row() * sizeof(uint16_t);
}

std::vector<float> dequantize(const TrunkTensor& tensor) {
  const TrunkTensorInfo& info = tensor.info();
  std::vector<float> out(info.rows * info.cols);
  const uint64_t padded = info.padded_cols();
  const uint64_t groups = info.groups_per_row();
  for (uint64_t r = 0; r < info.rows; ++r) {
    for (uint64_t c = 0; c < info.cols; ++c) {
      float value = 0.0f;
      switch (info.format) {
        case TrunkFormat::kF32: {
          value = reinterpret_cast<const float*>(tensor.data())[r * info.cols + c];
          break;
        }
        case TrunkFormat::kQ8G128: {
          const auto q = static_cast<int8_t>(tensor.data()[r * padded + c]);
          value = static_cast<float>(q) * f16_to_f32(tensor.scales()[r * groups + c / kTrunkGroup]);
          break;
        }
        case TrunkFormat::kQ4G128: {
          const uint64_t index = r * padded + c;
          const uint8_t byte = tensor.data()[index / 2];
          const int nibble = (index % 2 == 0) ? (byte & 0x0f) : (byte >> 4);
          value = static_cast<float>(nibble - 8) *
                  f16_to_f32(tensor.scales()[r * groups + c / kTrunkGroup]);
          break;
        }
      }
      out[r * info.cols + c] = value;
    }
  }
  return out;
}

}  // namespace sluice
