// proto/record_format.h: the byte layout of one expert record (FORMAT.md,
// "Expert records"): its geometry, its 64-byte header, and the O(1) check
// every reader applies to a header it read from disk. No I/O here.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace sluice {

inline constexpr uint32_t kRecordMagic = 0x52584C53;  // "SLXR"
// Record version 2: codes of 4 weights, 2 stages of 64 entries (FORMAT.md).
inline constexpr uint16_t kFormatVersion = 2;
inline constexpr size_t kRecordHeaderBytes = 64;
inline constexpr size_t kRecordAlign = 4096;
inline constexpr size_t kSectionAlign = 64;
inline constexpr int kRvqStages = 2;
inline constexpr int kRvqEntries = 64;
inline constexpr int kRvqVecDim = 4;
// Rows are stored 32 at a time, so that one 32-byte load holds the low code
// bits of 16 rows for both stages (FORMAT.md, "Index bytes").
inline constexpr int kRowBlock = 32;
inline constexpr int kRvqCodeBits = 6;
static_assert(1 << kRvqCodeBits == kRvqEntries);
// Bytes of one row block's codes for one vector: 32 rows × 2 stages × 6 bits.
inline constexpr size_t kRvqUnitBytes = 48;
// The manifest's name for the index layout (FORMAT.md).
inline constexpr const char* kRvqIndexLayout = "rowblock32.vector.split6";
// Matrix widths are whole multiples of this: the kernels take vectors in pairs.
inline constexpr uint32_t kRvqColsMultiple = 8;
inline constexpr size_t kCodebookBytes = size_t{kRvqEntries} * kRvqVecDim * sizeof(float);

enum class MatrixKind : int { kGate = 0, kUp = 1, kDown = 2 };
inline constexpr std::array<MatrixKind, 3> kMatrixKinds = {MatrixKind::kGate, MatrixKind::kUp,
                                                          MatrixKind::kDown};
const char* matrix_kind_name(MatrixKind kind);

// One RVQ matrix as stored: `rows` outputs of `cols` inputs.
struct RvqMatrixShape {
  uint32_t rows = 0;
  uint32_t cols = 0;
  uint32_t rows_padded() const { return (rows + kRowBlock - 1) / kRowBlock * kRowBlock; }
  uint32_t vectors_per_row() const { return cols / kRvqVecDim; }
  size_t index_bytes() const {
    return size_t{rows_padded() / kRowBlock} * vectors_per_row() * kRvqUnitBytes;
  }
  // Offset of the codes of row block `block` for `vector` in this matrix's indices.
  size_t unit_offset(uint32_t block, uint32_t vector) const {
    return (size_t{block} * vectors_per_row() + vector) * kRvqUnitBytes;
  }
  // The 6-bit code of (row, vector, stage) in `indices`, this matrix's index bytes.
  uint8_t code(const uint8_t* indices, uint32_t row, uint32_t vector, int stage) const {
    const uint8_t* unit = indices + unit_offset(row / kRowBlock, vector);
    const uint32_t half = row % kRowBlock / 16, lane = row % 16;
    const int low = unit[16 * stage + lane] >> (4 * half) & 15;
    const int high = unit[32 + lane] >> (4 * stage + 2 * half) & 3;
    return static_cast<uint8_t>(low | high << 4);
  }
  // Stores `value` (below 64) as the code of (row, vector, stage).
  void set_code(uint8_t* indices, uint32_t row, uint32_t vector, int stage, uint8_t value) const {
    uint8_t* unit = indices + unit_offset(row / kRowBlock, vector);
    const uint32_t half = row % kRowBlock / 16, lane = row % 16;
    const int low_shift = 4 * half, high_shift = 4 * stage + 2 * half;
    uint8_t& low = unit[16 * stage + lane];
    uint8_t& high = unit[32 + lane];
    low = static_cast<uint8_t>((low & ~(15 << low_shift)) | (value & 15) << low_shift);
    high = static_cast<uint8_t>((high & ~(3 << high_shift)) | (value >> 4 & 3) << high_shift);
  }
};

// Where everything sits in a record of a layer with this hidden size and
// expert width. Both the writer and every reader derive it from the manifest.
struct RecordLayout {
  std::array<RvqMatrixShape, 3> matrices;  // gate, up, down
  uint32_t gate_off = 0, up_off = 0, down_off = 0, scales_off = 0, payload_end = 0;
  uint32_t stride = 0;

  // Throws Error when the shape cannot be stored (widths not multiples of kRvqColsMultiple).
  static RecordLayout compute(uint32_t hidden, uint32_t expert_width);
  uint32_t matrix_offset(MatrixKind kind) const;
  // Offset of the first f16 scale of `kind` (scales are contiguous, gate first).
  uint32_t scales_offset(MatrixKind kind) const;
};

struct RecordHeader {
  uint32_t magic = kRecordMagic;
  uint16_t version = kFormatVersion;
  uint16_t layer = 0;
  uint32_t expert = 0;
  uint32_t codebook_id = 0;
  uint32_t stride = 0;
  uint32_t gate_off = 0, up_off = 0, down_off = 0, scales_off = 0, payload_end = 0;
  uint32_t crc32 = 0;

  void encode(uint8_t* out) const;  // writes kRecordHeaderBytes bytes
  static RecordHeader decode(const uint8_t* in);
};

// What a header must say for (layer, expert) of a layer with `layout`.
RecordHeader expected_header(const RecordLayout& layout, uint32_t layer, uint32_t expert,
                             uint32_t codebook_base);

// Checks a header read from disk against what it must be. Returns the first
// problem as "layer L expert E: <what>", or nothing when it is sound.
std::optional<std::string> check_header(const RecordHeader& found, const RecordHeader& expected);

// crc32 (zlib polynomial) of the payload a header covers: [64, payload_end).
uint32_t payload_crc32(const uint8_t* record, uint32_t payload_end);

}  // namespace sluice
