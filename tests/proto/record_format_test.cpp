// Record geometry follows FORMAT.md and the header check names what is wrong.
#include <doctest/doctest.h>

#include <vector>

#include "proto/error.h"
#include "proto/record_format.h"

using namespace sluice;

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

TEST_CASE("sections are 64-byte aligned and rows pad to 16") {
  const RecordLayout layout = RecordLayout::compute(128, 48);
  CHECK(layout.matrices[2].rows_padded() == 128);
  CHECK(layout.matrices[0].rows_padded() == 48);
  const RecordLayout odd = RecordLayout::compute(40, 24);
  CHECK(odd.matrices[0].rows_padded() == 32);
  CHECK(odd.matrices[2].rows_padded() == 48);
  for (uint32_t off : {odd.gate_off, odd.up_off, odd.down_off, odd.scales_off}) CHECK(off % 64 == 0);
  CHECK(odd.scales_offset(MatrixKind::kDown) == odd.scales_off + (32 + 32) * 2);
}

TEST_CASE("index positions cover a matrix exactly once") {
  const RvqMatrixShape shape{40, 24};
  std::vector<int> hits(shape.index_bytes(), 0);
  for (uint32_t r = 0; r < shape.rows_padded(); ++r)
    for (uint32_t v = 0; v < shape.vectors_per_row(); ++v)
      for (int s = 0; s < kRvqStages; ++s) hits.at(shape.index_position(r, v, s))++;
  for (int h : hits) CHECK(h == 1);
  CHECK(shape.index_position(17, 1, 2) == ((1 * 3 * 3 + 1 * 3 + 2) * 16) + 1);
}

TEST_CASE("widths that are not multiples of 8 are refused by name") {
  CHECK_THROWS_WITH_AS(RecordLayout::compute(128, 50), doctest::Contains("width 50"), Error);
}

TEST_CASE("a record too large for the header's 32-bit offsets is refused, not wrapped") {
  CHECK_THROWS_WITH_AS(RecordLayout::compute(65536, 65536), doctest::Contains("more than a record header"), Error);
  CHECK(RecordLayout::compute(7168, 2048).stride > 0);  // DeepSeek-V3 experts fit
}

TEST_CASE("header round trip and checks") {
  const RecordLayout layout = RecordLayout::compute(128, 64);
  RecordHeader header = expected_header(layout, 3, 17, 9);
  header.crc32 = 0xdeadbeef;
  uint8_t bytes[kRecordHeaderBytes];
  header.encode(bytes);
  const RecordHeader back = RecordHeader::decode(bytes);
  CHECK(back.crc32 == 0xdeadbeef);
  CHECK_FALSE(check_header(back, expected_header(layout, 3, 17, 9)).has_value());

  bytes[0] ^= 0x01;
  const auto bad_magic = check_header(RecordHeader::decode(bytes), expected_header(layout, 3, 17, 9));
  REQUIRE(bad_magic.has_value());
  CHECK(bad_magic->find("layer 3 expert 17: header magic mismatch") == 0);

  const auto wrong_expert = check_header(back, expected_header(layout, 3, 18, 9));
  REQUIRE(wrong_expert.has_value());
  CHECK(wrong_expert->find("expert id mismatch") != std::string::npos);

  const auto wrong_stride = check_header(back, expected_header(RecordLayout::compute(256, 64), 3, 17, 9));
  REQUIRE(wrong_stride.has_value());
  CHECK(wrong_stride->find("stride") != std::string::npos);
}
