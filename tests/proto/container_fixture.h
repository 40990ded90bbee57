// tests/proto/container_fixture.h: writes small, valid containers by hand,
// straight from FORMAT.md, so reader tests can predict every decoded value
// without the code under test. Test-only; never used by the engine.
#pragma once

#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "proto/error.h"

// Check that EXPR throws sluice::Error whose message starts with / contains
// TEXT; the message is shown when the check fails.
#define SLUICE_CHECK_ERROR_STARTS(expr, text)                                                    \
  do {                                                                                           \
    const std::string sluice_message_ = ::sluice::testing::error_message([&] { (void)(expr); }); \
    INFO("error message: ", sluice_message_);                                                    \
    CHECK(sluice_message_.starts_with(text));                                                    \
  } while (0)
#define SLUICE_CHECK_ERROR_CONTAINS(expr, text)                                                  \
  do {                                                                                           \
    const std::string sluice_message_ = ::sluice::testing::error_message([&] { (void)(expr); }); \
    INFO("error message: ", sluice_message_);                                                    \
    CHECK(sluice_message_.find(text) != std::string::npos);                                      \
  } while (0)

namespace sluice::testing {

// The message of the sluice::Error `f` throws, or "(no error)".
template <typename F>
std::string error_message(F&& f) {
  try {
    f();
  } catch (const sluice::Error& e) {
    return e.what();
  }
  return "(no error)";
}

// A fresh directory under $TMPDIR (or /tmp), removed with everything in it.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

struct FixtureSpec {
  uint32_t layers = 2;  // every layer is MoE
  uint32_t experts = 5;
  uint32_t top_k = 2;
  uint32_t hidden = 32;
  uint32_t expert_width = 24;  // not a multiple of 32: gate/up have padding rows
  uint32_t vocab = 64;
  uint64_t seed = 7;
  std::optional<std::string> chat_template;
  // The tokenizer files (their sums go in the manifest); a stub when absent.
  std::optional<std::string> tokenizer_json, tokenizer_config;
};

// One expert matrix as the fixture wrote it.
struct FixtureMatrix {
  uint32_t rows = 0;
  uint32_t cols = 0;
  std::vector<uint8_t> indices;  // 6-bit codes [row][vector of 4][stage of 2], rows unpadded
  std::vector<uint16_t> scales;  // f16 bits per row
  uint8_t index(uint32_t row, uint32_t vector, int stage) const {
    return indices[(size_t{row} * (cols / 4) + vector) * 2 + static_cast<size_t>(stage)];
  }
};

// One trunk tensor as the fixture wrote it: q values (or f32 values) and f16
// group scales, so a test can dequantize it by hand.
struct FixtureTrunkTensor {
  std::string name;
  std::string format;  // f32, q8g128, q4g128
  uint64_t rows = 0;
  uint64_t cols = 0;
  bool one_d = false;
  std::vector<float> values;     // f32 tensors, rows × cols
  std::vector<int> q;            // quantized tensors, rows × cols
  std::vector<uint16_t> scales;  // [rows][groups]
  uint64_t offset = 0;           // where the data sits in trunk.bin
};

struct Fixture {
  std::string dir;
  FixtureSpec spec;
  uint32_t codebook_count = 0;
  uint32_t record_stride = 0;
  uint32_t payload_end = 0;
  uint64_t trunk_bytes = 0;
  std::vector<std::vector<std::array<FixtureMatrix, 3>>>
      experts;  // [layer][expert][gate, up, down]
  std::vector<FixtureTrunkTensor> trunk;

  std::string bank_path(uint32_t layer) const;
  std::string manifest_path() const { return dir + "/manifest.json"; }
  // Byte offset in the bank of `expert`'s record.
  uint64_t record_offset(uint32_t expert) const { return uint64_t{expert} * record_stride; }
};

// The f32 value of entry `code`, element `j`, of codebook `id`: a dyadic
// rational, so stage sums and their product with the fixture's scales are
// exact in f32 whatever the summation order.
float fixture_codebook_value(uint32_t id, uint32_t code, uint32_t j);

// Writes a complete container into `dir` (which must exist).
Fixture write_fixture(const std::string& dir, const FixtureSpec& spec = {});

nlohmann::json read_json(const std::string& path);
void write_json(const std::string& path, const nlohmann::json& value);
// `manifest` with its manifest_crc32 set to the sum of its content, so a test
// that edits one field reaches the check of that field.
nlohmann::json sealed(nlohmann::json manifest);
// write_json of sealed(manifest).
void write_manifest(const std::string& path, const nlohmann::json& manifest);
void write_bytes(const std::string& path, const std::string& bytes);
void flip_byte(const std::string& path, uint64_t offset);
void truncate_file(const std::string& path, uint64_t size);

}  // namespace sluice::testing
