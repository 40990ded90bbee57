// Record geometry follows FORMAT.md, codes pack as its "Index bytes" say
// (checked against bytes worked out here from its text), and the header
// check names what is wrong.
#include "proto/record_format.h"

#include <doctest/doctest.h>

#include <random>
#include <vector>

#include "proto/error.h"

using namespace sluice;

namespace {

// FORMAT.md's layout rowblock32.vector.split6, written out from its text:
// the 48-byte unit of (row block r / 32, vector v), lane i = r % 16, half
// h = (r % 32) / 16; the low 4 bits of the code at byte 16s + i, bits 4h..,
// the high 2 bits at byte 32 + i, bits 4s + 2h...
void formula_set(std::vector<uint8_t>& bytes, uint32_t nv, uint32_t r, uint32_t v, int s,
                 uint8_t code) {
  const size_t unit = (size_t{r / 32} * nv + v) * 48;
  const uint32_t i = r % 16, h = r % 32 / 16;
  const int lo_shift = 4 * h, hi_shift = 4 * s + 2 * h;
  uint8_t& lo = bytes[unit + 16 * s + i];
  uint8_t& hi = bytes[unit + 32 + i];
  lo = static_cast<uint8_t>((lo & ~(0xF << lo_shift)) | (code & 0xF) << lo_shift);
  hi = static_cast<uint8_t>((hi & ~(0x3 << hi_shift)) | (code >> 4) << hi_shift);
}

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> bytes(n);
  for (uint8_t& b : bytes) b = static_cast<uint8_t>(rng());
  return bytes;
}

}  // namespace

TEST_CASE("OLMoE-1B-7B record is the size the architecture notes give") {
  const RecordLayout layout = RecordLayout::compute(2048, 1024);
  // 3 matrices x 2048*1024 weights x 3 bits = 2,359,296 B of indices, plus
  // 64 B of header and 4096 f16 scales, padded to 4 KiB.
  CHECK(layout.gate_off == 64);
  CHECK(layout.up_off - layout.gate_off == 786432);
  CHECK(layout.payload_end == 64 + 2359296 + 4096 * 2);
  CHECK(layout.stride == 579 * 4096);
  CHECK(layout.stride % 4096 == 0);
}

TEST_CASE("sections are 64-byte aligned and rows pad to 32") {
  const RecordLayout layout = RecordLayout::compute(128, 48);
  CHECK(layout.matrices[2].rows_padded() == 128);
  CHECK(layout.matrices[0].rows_padded() == 64);
  const RecordLayout odd = RecordLayout::compute(40, 24);
  CHECK(odd.matrices[0].rows_padded() == 32);
  CHECK(odd.matrices[2].rows_padded() == 64);
  // gate [24, 40]: 1 row block × 10 vectors × 48 bytes; down [40, 24]: 2 × 6 × 48.
  CHECK(odd.matrices[0].index_bytes() == 480);
  CHECK(odd.matrices[2].index_bytes() == 576);
  CHECK(odd.up_off == 64 + 512);
  CHECK(odd.down_off == odd.up_off + 512);
  CHECK(odd.scales_off == odd.down_off + 576);
  for (uint32_t off : {odd.gate_off, odd.up_off, odd.down_off, odd.scales_off}) CHECK(off % 64 == 0);
  CHECK(odd.scales_offset(MatrixKind::kDown) == odd.scales_off + (32 + 32) * 2);
  CHECK(odd.payload_end == odd.scales_off + (32 + 32 + 64) * 2);
}

TEST_CASE("codes sit at the bytes and bits FORMAT.md gives") {
  const RvqMatrixShape shape{40, 24};  // 6 vectors per row, 2 row blocks
  REQUIRE(shape.index_bytes() == 576);
  SUBCASE("row 17, vector 1, stage 1, code 45") {
    // Block 0, unit (0 · 6 + 1) · 48 = 48; i = 1, h = 1; 45 = 13 + 16 · 2:
    // 13 in bits 4-7 of byte 48 + 16 + 1, 2 in bits 6-7 of byte 48 + 32 + 1.
    std::vector<uint8_t> bytes(shape.index_bytes(), 0);
    shape.set_code(bytes.data(), 17, 1, 1, 45);
    std::vector<uint8_t> want(shape.index_bytes(), 0);
    want[65] = 0xD0;
    want[81] = 0x80;
    CHECK(bytes == want);
    CHECK(shape.code(bytes.data(), 17, 1, 1) == 45);
  }
  SUBCASE("row 39, vector 5, stage 1, code 63") {
    // Block 1, unit (1 · 6 + 5) · 48 = 528; i = 7, h = 0: the low nibble of
    // byte 528 + 16 + 7 and bits 4-5 of byte 528 + 32 + 7.
    std::vector<uint8_t> bytes(shape.index_bytes(), 0);
    shape.set_code(bytes.data(), 39, 5, 1, 63);
    std::vector<uint8_t> want(shape.index_bytes(), 0);
    want[551] = 0x0F;
    want[567] = 0x30;
    CHECK(bytes == want);
  }
  SUBCASE("row 0, vector 0, stage 0, code 16: only a high bit") {
    std::vector<uint8_t> bytes(shape.index_bytes(), 0);
    shape.set_code(bytes.data(), 0, 0, 0, 16);
    std::vector<uint8_t> want(shape.index_bytes(), 0);
    want[32] = 0x01;
    CHECK(bytes == want);
  }
  SUBCASE("reading bytes written by hand") {
    // Row 30 (i = 14, h = 1), vector 2 of block 0 (unit 96): stage 0 low 9,
    // stage 1 low 4, high bits 1 (stage 0, bits 2-3) and 3 (stage 1, bits 6-7).
    std::vector<uint8_t> bytes(shape.index_bytes(), 0);
    bytes[96 + 14] = 0x90;
    bytes[96 + 16 + 14] = 0x40;
    bytes[96 + 32 + 14] = 0x04 | 0xC0;
    CHECK(shape.code(bytes.data(), 30, 2, 0) == 9 + 16 * 1);
    CHECK(shape.code(bytes.data(), 30, 2, 1) == 4 + 16 * 3);
    CHECK(shape.code(bytes.data(), 14, 2, 0) == 0);  // the other half of the same bytes
    CHECK(shape.code(bytes.data(), 14, 2, 1) == 0);
  }
}

TEST_CASE("every code of an odd-shaped matrix round-trips and leaves its neighbours alone") {
  const RvqMatrixShape shape{40, 24};
  const uint32_t nv = shape.vectors_per_row();
  // Random bytes first: set_code must keep every bit that is not its own.
  std::vector<uint8_t> bytes = random_bytes(shape.index_bytes(), 1);
  std::vector<uint8_t> want = bytes;
  std::mt19937 rng(2);
  std::vector<uint8_t> codes(size_t{shape.rows_padded()} * nv * kRvqStages);
  for (uint32_t r = 0; r < shape.rows_padded(); ++r) {
    for (uint32_t v = 0; v < nv; ++v) {
      for (int s = 0; s < kRvqStages; ++s) {
        const auto code = static_cast<uint8_t>(rng() % 64);
        codes[(size_t{r} * nv + v) * kRvqStages + s] = code;
        shape.set_code(bytes.data(), r, v, s, code);
        formula_set(want, nv, r, v, s, code);
        if (bytes != want) {
          FAIL("set_code(row ", r, ", vector ", v, ", stage ", s, ", ", int{code},
               ") wrote other bits than FORMAT.md's");
        }
      }
    }
  }
  for (uint32_t r = 0; r < shape.rows_padded(); ++r) {
    for (uint32_t v = 0; v < nv; ++v) {
      for (int s = 0; s < kRvqStages; ++s) {
        const uint8_t code = codes[(size_t{r} * nv + v) * kRvqStages + s];
        if (shape.code(bytes.data(), r, v, s) != code) {
          FAIL("code(row ", r, ", vector ", v, ", stage ", s, ") is ",
               int{shape.code(bytes.data(), r, v, s)}, ", set ", int{code});
        }
      }
    }
  }
}

TEST_CASE("the codes of a matrix fill its index bytes exactly, without overlap") {
  const RvqMatrixShape shape{40, 24};
  std::vector<uint8_t> all(shape.index_bytes(), 0);
  size_t codes = 0;
  for (uint32_t r = 0; r < shape.rows_padded(); ++r) {
    for (uint32_t v = 0; v < shape.vectors_per_row(); ++v) {
      for (int s = 0; s < kRvqStages; ++s) {
        std::vector<uint8_t> one(shape.index_bytes(), 0);
        shape.set_code(one.data(), r, v, s, 63);
        int bits = 0;
        for (size_t b = 0; b < one.size(); ++b) {
          bits += __builtin_popcount(one[b]);
          REQUIRE((all[b] & one[b]) == 0);  // no two codes share a bit
          all[b] |= one[b];
        }
        REQUIRE(bits == 6);
        ++codes;
      }
    }
  }
  CHECK(codes * 6 == shape.index_bytes() * 8);
  for (uint8_t b : all) CHECK(b == 0xFF);
}

TEST_CASE("widths that are not multiples of 8 are refused by name") {
  CHECK_THROWS_WITH_AS(RecordLayout::compute(128, 50), doctest::Contains("width 50"), Error);
  // A multiple of the vector width that the kernels' vector pairs cannot take.
  CHECK_THROWS_WITH_AS(RecordLayout::compute(44, 64),
                       doctest::Contains("hidden 44 x width 64 cannot be stored"), Error);
}

TEST_CASE("a record too large for the header's 32-bit offsets is refused, not wrapped") {
  CHECK_THROWS_WITH_AS(RecordLayout::compute(65536, 65536), doctest::Contains("more than a record header"), Error);
  CHECK(RecordLayout::compute(7168, 2048).stride > 0);  // DeepSeek-V3 experts fit
}

TEST_CASE("header round trip and checks") {
  const RecordLayout layout = RecordLayout::compute(128, 64);
  RecordHeader header = expected_header(layout, 3, 17, 6);
  header.crc32 = 0xdeadbeef;
  uint8_t bytes[kRecordHeaderBytes];
  header.encode(bytes);
  CHECK(bytes[4] == 2);  // record format version 2 (container format 3)
  CHECK(bytes[5] == 0);
  const RecordHeader back = RecordHeader::decode(bytes);
  CHECK(back.crc32 == 0xdeadbeef);
  CHECK_FALSE(check_header(back, expected_header(layout, 3, 17, 6)).has_value());

  bytes[0] ^= 0x01;
  const auto bad_magic =
      check_header(RecordHeader::decode(bytes), expected_header(layout, 3, 17, 6));
  REQUIRE(bad_magic.has_value());
  CHECK(bad_magic->find("layer 3 expert 17: header magic mismatch") == 0);
  bytes[0] ^= 0x01;

  bytes[4] = 1;  // a record of container format 2
  const auto old_version =
      check_header(RecordHeader::decode(bytes), expected_header(layout, 3, 17, 6));
  REQUIRE(old_version.has_value());
  CHECK(*old_version == "layer 3 expert 17: header format version mismatch (found 1, expected 2)");

  const auto wrong_expert = check_header(back, expected_header(layout, 3, 18, 6));
  REQUIRE(wrong_expert.has_value());
  CHECK(wrong_expert->find("expert id mismatch") != std::string::npos);

  const auto wrong_stride =
      check_header(back, expected_header(RecordLayout::compute(256, 64), 3, 17, 6));
  REQUIRE(wrong_stride.has_value());
  CHECK(wrong_stride->find("stride") != std::string::npos);
}
