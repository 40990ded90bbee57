// proto/trunk_format.h: the resident tensor formats of trunk.bin (FORMAT.md,
// "Trunk tensor formats"): their geometry, the in-memory quantized form the
// engine computes on, and a plain dequantizer. No I/O here.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "proto/aligned_buffer.h"

namespace sluice {

enum class TrunkFormat { kF32, kQ8G128, kQ6G128, kQ4G128 };
inline constexpr uint64_t kTrunkGroup = 128;
inline constexpr uint64_t kTrunkAlign = 64;

const char* trunk_format_name(TrunkFormat format);
std::optional<TrunkFormat> parse_trunk_format(std::string_view name);

// Bytes of one stored row of a grouped format (q8g128, q6g128, q4g128).
uint64_t trunk_row_bytes(TrunkFormat format, uint64_t padded_cols);
// The stored integer q of `column` in a row of a grouped format, and its
// inverse (q within the format's range). The one statement of each layout
// in code; kernels unpack the same bytes their own way and are tested
// against this.
int trunk_integer(TrunkFormat format, const uint8_t* row, uint64_t column);
void set_trunk_integer(TrunkFormat format, uint8_t* row, uint64_t column, int q);

// One entry of the manifest's trunk table, validated. A 1-D tensor of n
// values is stored as rows = 1, cols = n (shape keeps the manifest's form).
struct TrunkTensorInfo {
  std::string name;
  TrunkFormat format = TrunkFormat::kF32;
  std::vector<uint64_t> shape;
  uint64_t rows = 0;
  uint64_t cols = 0;
  uint64_t offset = 0;
  uint64_t bytes = 0;
  uint64_t scale_offset = 0;
  uint64_t scale_bytes = 0;
  uint32_t crc32 = 0;  // of the data bytes followed by the scale bytes

  // cols rounded up to the 128-wide group for the grouped formats; cols for f32.
  uint64_t padded_cols() const;
  uint64_t groups_per_row() const {
    return format == TrunkFormat::kF32 ? 0 : padded_cols() / kTrunkGroup;
  }
  // What `bytes` and `scale_bytes` must be for this format and shape.
  uint64_t expected_bytes() const;
  uint64_t expected_scale_bytes() const;
};

// A trunk tensor loaded into RAM in its stored form. data() is 64-byte
// aligned: f32 values, or rows of trunk_row_bytes() (FORMAT.md). scales()
// holds f16 group scales [rows][groups_per_row] (empty for f32).
class TrunkTensor {
 public:
  TrunkTensor(TrunkTensorInfo info, AlignedBuffer data, AlignedBuffer scales)
      : info_(std::move(info)), data_(std::move(data)), scales_(std::move(scales)) {}

  const TrunkTensorInfo& info() const { return info_; }
  const std::string& name() const { return info_.name; }
  TrunkFormat format() const { return info_.format; }
  uint64_t rows() const { return info_.rows; }
  uint64_t cols() const { return info_.cols; }
  uint64_t padded_cols() const { return info_.padded_cols(); }
  const uint8_t* data() const { return data_.data(); }
  const uint16_t* scales() const { return reinterpret_cast<const uint16_t*>(scales_.data()); }

 private:
  TrunkTensorInfo info_;
  AlignedBuffer data_;
  AlignedBuffer scales_;
};

// crc32 of a tensor's stored bytes: its data, then its scales (FORMAT.md).
uint32_t trunk_tensor_crc32(const TrunkTensorInfo& info, const uint8_t* data, const uint16_t* scales);

// The first value the format does not allow, described for a person: a
// non-finite f32, a q8 value of -128, non-zero padding, a scale that is
// negative or not finite. Nothing when every value is in range.
std::optional<std::string> trunk_values_problem(const TrunkTensorInfo& info, const uint8_t* data,
                                                const uint16_t* scales);

// rows × cols f32, row-major, padding dropped: q × f16_to_f32(group scale).
std::vector<float> dequantize(const TrunkTensor& tensor);

}  // namespace sluice
