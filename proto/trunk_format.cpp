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
    case TrunkFormat::kQ6G128:
      return "q6g128";
    case TrunkFormat::kQ4G128:
      return "q4g128";
  }
  return "?";
}

std::optional<TrunkFormat> parse_trunk_format(std::string_view name) {
  if (name == "f32") return TrunkFormat::kF32;
  if (name == "q8g128") return TrunkFormat::kQ8G128;
  if (name == "q6g128") return TrunkFormat::kQ6G128;
  if (name == "q4g128") return TrunkFormat::kQ4G128;
  return std::nullopt;
}

uint64_t TrunkTensorInfo::padded_cols() const {
  if (format == TrunkFormat::kF32) return cols;
  return (cols + kTrunkGroup - 1) / kTrunkGroup * kTrunkGroup;
}

uint64_t trunk_row_bytes(TrunkFormat format, uint64_t padded_cols) {
  switch (format) {
    case TrunkFormat::kF32:
      return padded_cols * sizeof(float);
    case TrunkFormat::kQ8G128:
      return padded_cols;
    case TrunkFormat::kQ6G128:
      return padded_cols / 4 * 3;
    case TrunkFormat::kQ4G128:
      return padded_cols / 2;
  }
  return 0;
}

namespace {

// q6g128: 24 bytes per block of 32 columns. Byte i < 16 holds the low four
// bits of column i (low nibble) and of column 16 + i (high nibble); byte
// 16 + j holds the top two bits of columns j, j + 8, j + 16 and j + 24 at
// bits 0-1, 2-3, 4-5 and 6-7. Stored: q + 32.
constexpr uint64_t kQ6Block = 32, kQ6BlockBytes = 24;

}  // namespace

int trunk_integer(TrunkFormat format, const uint8_t* row, uint64_t column) {
  switch (format) {
    case TrunkFormat::kQ8G128:
      return static_cast<int8_t>(row[column]);
    case TrunkFormat::kQ6G128: {
      const uint8_t* block = row + column / kQ6Block * kQ6BlockBytes;
      const uint64_t p = column % kQ6Block;
      const int low = (block[p % 16] >> (p < 16 ? 0 : 4)) & 0x0f;
      const int high = (block[16 + p % 8] >> (2 * (p / 8))) & 0x03;
      return (low | high << 4) - 32;
    }
    case TrunkFormat::kQ4G128:
      return ((row[column / 2] >> (column % 2 == 0 ? 0 : 4)) & 0x0f) - 8;
    case TrunkFormat::kF32:
      break;
  }
  fail("trunk_integer: f32 holds no integers");
}

void set_trunk_integer(TrunkFormat format, uint8_t* row, uint64_t column, int q) {
  switch (format) {
    case TrunkFormat::kQ8G128:
      row[column] = static_cast<uint8_t>(static_cast<int8_t>(q));
      return;
    case TrunkFormat::kQ6G128: {
      uint8_t* block = row + column / kQ6Block * kQ6BlockBytes;
      const uint64_t p = column % kQ6Block;
      const auto u = static_cast<unsigned>(q + 32);
      const unsigned low_shift = p < 16 ? 0 : 4, high_shift = 2 * (p / 8);
      block[p % 16] = static_cast<uint8_t>((block[p % 16] & ~(0x0fu << low_shift)) | (u & 0x0f) << low_shift);
      block[16 + p % 8] =
          static_cast<uint8_t>((block[16 + p % 8] & ~(0x03u << high_shift)) | (u >> 4) << high_shift);
      return;
    }
    case TrunkFormat::kQ4G128: {
      const unsigned shift = column % 2 == 0 ? 0 : 4;
      row[column / 2] = static_cast<uint8_t>((row[column / 2] & ~(0x0fu << shift)) | static_cast<unsigned>(q + 8) << shift);
      return;
    }
    case TrunkFormat::kF32:
      break;
  }
  fail("set_trunk_integer: f32 holds no integers");
}

uint64_t TrunkTensorInfo::expected_bytes() const {
  if (format == TrunkFormat::kF32) return rows * cols * sizeof(float);
  return rows * trunk_row_bytes(format, padded_cols());
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

// q6g128 and q4g128 pad with q = 0; every stored pattern is a valid value.
std::optional<std::string> padding_problem(const TrunkTensorInfo& info, const uint8_t* data) {
  const uint64_t padded = info.padded_cols(), row_bytes = trunk_row_bytes(info.format, padded);
  if (info.cols == padded) return std::nullopt;
  for (uint64_t r = 0; r < info.rows; ++r) {
    for (uint64_t c = info.cols; c < padded; ++c) {
      const int q = trunk_integer(info.format, data + r * row_bytes, c);
      if (q != 0) return fmt::format("row {} padding column {} holds {}, not 0", r, c, q);
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
    case TrunkFormat::kQ6G128:
    case TrunkFormat::kQ4G128:
      if (auto problem = padding_problem(info, data)) return problem;
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
  if (info.format == TrunkFormat::kF32) {
    std::memcpy(out.data(), tensor.data(), out.size() * sizeof(float));
    return out;
  }
  const uint64_t groups = info.groups_per_row(), row_bytes = trunk_row_bytes(info.format, info.padded_cols());
  for (uint64_t r = 0; r < info.rows; ++r) {
    const uint8_t* row = tensor.data() + r * row_bytes;
    for (uint64_t c = 0; c < info.cols; ++c) {
      out[r * info.cols + c] = static_cast<float>(trunk_integer(info.format, row, c)) *
                               f16_to_f32(tensor.scales()[r * groups + c / kTrunkGroup]);
    }
  }
  return out;
}

}  // namespace sluice
