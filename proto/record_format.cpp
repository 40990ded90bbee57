// proto/record_format.cpp: record geometry, header (de)serialisation and checks.
#include "proto/record_format.h"

#include <cstring>

#include <fmt/format.h>

#include "proto/checksum.h"
#include "proto/error.h"

namespace sluice {
namespace {

size_t align_up(size_t value, size_t alignment) { return (value + alignment - 1) / alignment * alignment; }

void put_u32(uint8_t* out, uint32_t value) {
  for (int i = 0; i < 4; ++i) out[i] = static_cast<uint8_t>(value >> (8 * i));
}
void put_u16(uint8_t* out, uint16_t value) {
  out[0] = static_cast<uint8_t>(value);
  out[1] = static_cast<uint8_t>(value >> 8);
}
uint32_t get_u32(const uint8_t* in) {
  return uint32_t{in[0]} | uint32_t{in[1]} << 8 | uint32_t{in[2]} << 16 | uint32_t{in[3]} << 24;
}
uint16_t get_u16(const uint8_t* in) { return static_cast<uint16_t>(in[0] | in[1] << 8); }

}  // namespace

const char* matrix_kind_name(MatrixKind kind) {
  switch (kind) {
    case MatrixKind::kGate: return "gate";
    case MatrixKind::kUp: return "up";
    case MatrixKind::kDown: return "down";
  }
  return "?";
}

RecordLayout RecordLayout::compute(uint32_t hidden, uint32_t expert_width) {
  if (hidden == 0 || expert_width == 0 || hidden % kRvqColsMultiple != 0 ||
      expert_width % kRvqColsMultiple != 0) {
    fail("expert shape hidden {} x width {} cannot be stored: both must be non-zero multiples of {}",
         hidden, expert_width, kRvqColsMultiple);
  }
  RecordLayout layout;
  layout.matrices = {RvqMatrixShape{expert_width, hidden}, RvqMatrixShape{expert_width, hidden},
                     RvqMatrixShape{hidden, expert_width}};
  // Offsets are computed in 64 bits and refused when a record would not fit
  // the header's 32-bit fields, instead of wrapping.
  size_t offsets[4];
  size_t cursor = kRecordHeaderBytes;
  for (int m = 0; m < 3; ++m) {
    offsets[m] = cursor;
    cursor = align_up(cursor + layout.matrices[m].index_bytes(), kSectionAlign);
  }
  offsets[3] = cursor;
  size_t scale_count = 0;
  for (const auto& m : layout.matrices) scale_count += m.rows_padded();
  const size_t payload_end = cursor + scale_count * sizeof(uint16_t);
  const size_t stride = align_up(payload_end, kRecordAlign);
  if (stride > UINT32_MAX) {
    fail("expert shape hidden {} x width {} makes a {}-byte record, more than a record header can address", hidden,
         expert_width, stride);
  }
  layout.gate_off = static_cast<uint32_t>(offsets[0]);
  layout.up_off = static_cast<uint32_t>(offsets[1]);
  layout.down_off = static_cast<uint32_t>(offsets[2]);
  layout.scales_off = static_cast<uint32_t>(offsets[3]);
  layout.payload_end = static_cast<uint32_t>(payload_end);
  layout.stride = static_cast<uint32_t>(stride);
  return layout;
}

uint32_t RecordLayout::matrix_offset(MatrixKind kind) const {
  switch (kind) {
    case MatrixKind::kGate: return gate_off;
    case MatrixKind::kUp: return up_off;
    case MatrixKind::kDown: return down_off;
  }
  return 0;
}

uint32_t RecordLayout::scales_offset(MatrixKind kind) const {
  uint32_t offset = scales_off;
  for (MatrixKind k : kMatrixKinds) {
    if (k == kind) break;
    offset += matrices[static_cast<int>(k)].rows_padded() * sizeof(uint16_t);
  }
  return offset;
}

void RecordHeader::encode(uint8_t* out) const {
  std::memset(out, 0, kRecordHeaderBytes);
  put_u32(out + 0, magic);
  put_u16(out + 4, version);
  put_u16(out + 6, layer);
  put_u32(out + 8, expert);
  put_u32(out + 12, codebook_id);
  put_u32(out + 16, stride);
  put_u32(out + 20, gate_off);
  put_u32(out + 24, up_off);
  put_u32(out + 28, down_off);
  put_u32(out + 32, scales_off);
  put_u32(out + 36, payload_end);
  put_u32(out + 40, crc32);
}

RecordHeader RecordHeader::decode(const uint8_t* in) {
  RecordHeader h;
  h.magic = get_u32(in + 0);
  h.version = get_u16(in + 4);
  h.layer = get_u16(in + 6);
  h.expert = get_u32(in + 8);
  h.codebook_id = get_u32(in + 12);
  h.stride = get_u32(in + 16);
  h.gate_off = get_u32(in + 20);
  h.up_off = get_u32(in + 24);
  h.down_off = get_u32(in + 28);
  h.scales_off = get_u32(in + 32);
  h.payload_end = get_u32(in + 36);
  h.crc32 = get_u32(in + 40);
  return h;
}

RecordHeader expected_header(const RecordLayout& layout, uint32_t layer, uint32_t expert,
                             uint32_t codebook_base) {
  RecordHeader h;
  h.layer = static_cast<uint16_t>(layer);
  h.expert = expert;
  h.codebook_id = codebook_base;
  h.stride = layout.stride;
  h.gate_off = layout.gate_off;
  h.up_off = layout.up_off;
  h.down_off = layout.down_off;
  h.scales_off = layout.scales_off;
  h.payload_end = layout.payload_end;
  return h;
}

std::optional<std::string> check_header(const RecordHeader& found, const RecordHeader& expected) {
  auto problem = [&](std::string_view what, uint64_t got, uint64_t want) {
    return fmt::format("layer {} expert {}: header {} mismatch (found {}, expected {})", expected.layer,
                       expected.expert, what, got, want);
  };
  if (found.magic != kRecordMagic) {
    return fmt::format("layer {} expert {}: header magic mismatch (found 0x{:08x}, expected 0x{:08x})", expected.layer,
                       expected.expert, found.magic, kRecordMagic);
  }
  if (found.version != kFormatVersion) return problem("format version", found.version, kFormatVersion);
  if (found.layer != expected.layer) return problem("layer", found.layer, expected.layer);
  if (found.expert != expected.expert) return problem("expert id", found.expert, expected.expert);
  if (found.stride != expected.stride) return problem("record stride", found.stride, expected.stride);
  if (found.codebook_id != expected.codebook_id) {
    return problem("codebook id", found.codebook_id, expected.codebook_id);
  }
  if (found.gate_off != expected.gate_off) return problem("gate offset", found.gate_off, expected.gate_off);
  if (found.up_off != expected.up_off) return problem("up offset", found.up_off, expected.up_off);
  if (found.down_off != expected.down_off) return problem("down offset", found.down_off, expected.down_off);
  if (found.scales_off != expected.scales_off) {
    return problem("scales offset", found.scales_off, expected.scales_off);
  }
  if (found.payload_end != expected.payload_end) {
    return problem("payload end", found.payload_end, expected.payload_end);
  }
  return std::nullopt;
}

uint32_t payload_crc32(const uint8_t* record, uint32_t payload_end) {
  const uint8_t* begin = record + kRecordHeaderBytes;
  return crc32_bytes(begin, payload_end - kRecordHeaderBytes);
}

}  // namespace sluice
