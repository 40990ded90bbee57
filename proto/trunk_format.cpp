// proto/trunk_format.cpp: trunk tensor geometry and the reference dequantizer.
// The dequantizer is ground truth for tests, never a hot path.
#include "proto/trunk_format.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "proto/checksum.h"
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

uint32_t trunk_tensor_crc32(const TrunkTensorInfo& info, const uint8_t* data, const uint16_t* scales) {
  return crc32_bytes(scales, info.scale_bytes, crc32_bytes(data, info.bytes));
}

namespace {

// Each check first sweeps a row with branch-free ors (which the compiler
// vectorises: the scan costs about what the crc32 does) and only looks for
// the culprit in a row that has one.

// True when any byte of `word` is 0 (the classic SWAR test; exact).
bool has_zero_byte(uint64_t word) {
  return ((word - 0x0101010101010101ull) & ~word & 0x8080808080808080ull) != 0;
}

bool non_finite_bits(uint32_t bits) { return (bits & 0x7f800000u) == 0x7f800000u; }

std::optional<std::string> f32_problem(const TrunkTensorInfo& info, const uint8_t* data) {
  const uint64_t count = info.rows * info.cols;
  constexpr uint64_t kBlock = 4096;
  for (uint64_t begin = 0; begin < count; begin += kBlock) {
    const uint64_t end = std::min(count, begin + kBlock);
    bool any = false;
    for (uint64_t i = begin; i < end; ++i) {
      uint32_t bits;
      std::memcpy(&bits, data + i * sizeof bits, sizeof bits);
      any |= non_finite_bits(bits);
    }
    if (!any) continue;
    for (uint64_t i = begin; i < end; ++i) {
      float value;
      std::memcpy(&value, data + i * sizeof value, sizeof value);
      if (!std::isfinite(value)) return fmt::format("element {} is {}, not a finite number", i, value);
    }
  }
  return std::nullopt;
}

std::optional<std::string> q8_problem(const TrunkTensorInfo& info, const uint8_t* data) {
  const uint64_t padded = info.padded_cols();
  for (uint64_t r = 0; r < info.rows; ++r) {
    const uint8_t* row = data + r * padded;
    bool minimum = false;
    uint64_t c = 0;
    for (; c + 8 <= info.cols; c += 8) {
      uint64_t word;
      std::memcpy(&word, row + c, sizeof word);
      minimum |= has_zero_byte(word ^ 0x8080808080808080ull);
    }
    for (; c < info.cols; ++c) minimum |= row[c] == 0x80;
    uint8_t padding = 0;
    for (uint64_t c = info.cols; c < padded; ++c) padding |= row[c];
    if (!minimum && padding == 0) continue;
    for (uint64_t c = 0; c < info.cols; ++c) {
      if (row[c] == 0x80) return fmt::format("row {} column {} holds -128 (q8g128 values lie in [-127, 127])", r, c);
    }
    for (uint64_t c = info.cols; c < padded; ++c) {
      if (row[c] != 0) return fmt::format("row {} padding column {} is {}, not 0", r, c, static_cast<int8_t>(row[c]));
    }
  }
  return std::nullopt;
}

std::optional<std::string> q4_problem(const TrunkTensorInfo& info, const uint8_t* data) {
  if (info.cols == info.padded_cols()) return std::nullopt;  // every nibble is a valid value
  const uint64_t padded = info.padded_cols();
  for (uint64_t r = 0; r < info.rows; ++r) {
    for (uint64_t c = info.cols; c < padded; ++c) {
      const uint64_t index = r * padded + c;
      const uint8_t byte = data[index / 2];
      const int nibble = index % 2 == 0 ? (byte & 0x0f) : (byte >> 4);
      if (nibble != 8) return fmt::format("row {} padding column {} has nibble {}, not 8", r, c, nibble);
    }
  }
  return std::nullopt;
}

}  // namespace

std::optional<std::string> trunk_values_problem(const TrunkTensorInfo& info, const uint8_t* data,
                                                const uint16_t* scales) {
  switch (info.format) {
    case TrunkFormat::kF32:
      return f32_problem(info, data);
    case TrunkFormat::kQ8G128:
      if (auto problem = q8_problem(info, data)) return problem;
      break;
    case TrunkFormat::kQ4G128:
      if (auto problem = q4_problem(info, data)) return problem;
      break;
  }
  // An amax-derived scale is finite and never negative.
  auto bad_scale = [](uint16_t bits) { return (bits & 0x7c00u) == 0x7c00u || (bits & 0x8000u) != 0; };
  const uint64_t groups = info.groups_per_row();
  bool any = false;
  for (uint64_t i = 0; i < info.rows * groups; ++i) any |= bad_scale(scales[i]);
  if (!any) return std::nullopt;
  for (uint64_t i = 0; i < info.rows * groups; ++i) {
    if (bad_scale(scales[i])) {
      return fmt::format("scale of row {} group {} is {}, not a finite non-negative number", i / groups, i % groups,
                         f16_to_f32(scales[i]));
    }
  }
  return std::nullopt;
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
