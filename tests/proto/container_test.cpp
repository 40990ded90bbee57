// tests/proto/container_test.cpp: opening containers, loading resident data
// and reading records, from a hand-written fixture, with damaged files and
// with a file system that injects EIO, short reads and flipped bytes.
#include "proto/container.h"

#include <doctest/doctest.h>

#include <zlib.h>

#include <cstring>
#include <fstream>
#include <sstream>

#include "proto/aligned_buffer.h"
#include "proto/error.h"
#include "proto/f16.h"
#include "tests/proto/container_fixture.h"
#include "tests/proto/faulty_file_system.h"

namespace sluice {
namespace {

using testing::Fault;
using testing::FaultyFileSystem;
using testing::Fixture;

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

uint32_t zlib_crc(const std::string& bytes, uint32_t running = 0) {
  return static_cast<uint32_t>(
      ::crc32(running, reinterpret_cast<const Bytef*>(bytes.data()), static_cast<uInt>(bytes.size())));
}

void overwrite(const std::string& path, uint64_t offset, const std::string& bytes) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Writes 4 bytes into codebooks.bin and records the file's new crc32, as a
// converter bug (not damage) would: only the value check can catch it.
void overwrite_and_reseal_codebooks(const Fixture& fx, uint64_t offset, const char (&bytes)[4]) {
  const std::string path = fx.dir + "/codebooks.bin";
  overwrite(path, offset, std::string(bytes, 4));
  nlohmann::json m = testing::read_json(fx.manifest_path());
  m["codebooks"]["crc32"] = zlib_crc(slurp(path));
  testing::write_manifest(fx.manifest_path(), m);
}

// Same for trunk tensor `index`: overwrite at `offset` inside its data, reseal.
void overwrite_and_reseal_trunk(const Fixture& fx, size_t index, uint64_t offset, const std::string& bytes) {
  nlohmann::json m = testing::read_json(fx.manifest_path());
  nlohmann::json& t = m["trunk"]["tensors"][index];
  const std::string path = fx.dir + "/trunk.bin";
  overwrite(path, t["offset"].get<uint64_t>() + offset, bytes);
  const std::string trunk = slurp(path);
  const uint32_t data_crc = zlib_crc(trunk.substr(t["offset"], t["bytes"]));
  t["crc32"] = zlib_crc(trunk.substr(t["scale_offset"], t["scale_bytes"]), data_crc);
  testing::write_manifest(fx.manifest_path(), m);
}

TEST_CASE("damaged or impossible trunk values are refused at load, naming the tensor") {
  testing::TempDir tmp;
  const Fixture fx = testing::write_fixture(tmp.path());
  // Fixture order: 0 embed (q8g128, 64 x 32), 1 q_proj (q4g128, 16 x 136),
  // 2 norm (f32), 3 router (f32).
  SUBCASE("a flipped byte") {
    testing::flip_byte(tmp.path() + "/trunk.bin", fx.trunk[2].offset + 5);
    const Container c = Container::open(tmp.path());
    SLUICE_CHECK_ERROR_CONTAINS(c.load_trunk_tensor("model.norm.weight"),
                                "trunk tensor \"model.norm.weight\": checksum mismatch");
    CHECK_NOTHROW(c.load_trunk_tensor("model.embed_tokens.weight"));
  }
  SUBCASE("q8 value -128") {
    overwrite_and_reseal_trunk(fx, 0, 128 * 3 + 7, std::string(1, static_cast<char>(0x80)));
    const Container c = Container::open(tmp.path());
    SLUICE_CHECK_ERROR_CONTAINS(c.load_trunk_tensor("model.embed_tokens.weight"),
                                "\"model.embed_tokens.weight\": row 3 column 7 holds -128");
  }
  SUBCASE("q8 padding that is not zero") {
    overwrite_and_reseal_trunk(fx, 0, 128 * 2 + 40, std::string(1, '\x05'));
    const Container c = Container::open(tmp.path());
    SLUICE_CHECK_ERROR_CONTAINS(c.load_trunk_tensor("model.embed_tokens.weight"),
                                "row 2 padding column 40 is 5, not 0");
  }
  SUBCASE("q4 padding nibble that is not 8 (q = 0)") {
    // Row 0 of q_proj: 136 columns padded to 256; byte 100 holds columns 200, 201.
    overwrite_and_reseal_trunk(fx, 1, 100, std::string(1, '\x87'));
    const Container c = Container::open(tmp.path());
    SLUICE_CHECK_ERROR_CONTAINS(c.load_trunk_tensor("model.layers.0.self_attn.q_proj.weight"),
                                "row 0 padding column 200 holds -1, not 0");
  }
  SUBCASE("a NaN in an f32 tensor") {
    overwrite_and_reseal_trunk(fx, 2, 4 * 9, std::string("\x00\x00\xc0\x7f", 4));
    const Container c = Container::open(tmp.path());
    SLUICE_CHECK_ERROR_CONTAINS(c.load_trunk_tensor("model.norm.weight"), "element 9 is nan, not a finite number");
  }
  SUBCASE("a negative group scale") {
    nlohmann::json m = testing::read_json(fx.manifest_path());
    const uint64_t scales_at = m["trunk"]["tensors"][0]["scale_offset"].get<uint64_t>() -
                               m["trunk"]["tensors"][0]["offset"].get<uint64_t>();
    overwrite_and_reseal_trunk(fx, 0, scales_at + 2 * 5, std::string("\x00\xbc", 2));  // -1.0
    const Container c = Container::open(tmp.path());
    SLUICE_CHECK_ERROR_CONTAINS(c.load_trunk_tensor("model.embed_tokens.weight"),
                                "scale of row 5 group 0 is -1, not a finite non-negative number");
  }
}

TEST_CASE("a valid container opens and reports what the fixture wrote") {
  testing::TempDir tmp;
  testing::FixtureSpec spec;
  spec.chat_template = "{{ messages }}";
  const Fixture fx = testing::write_fixture(tmp.path(), spec);
  const Container c = Container::open(tmp.path());
  CHECK(c.arch() == "olmoe");
  CHECK(c.layer_count() == spec.layers);
  CHECK(c.top_k() == spec.top_k);
  CHECK(c.vocab_size() == spec.vocab);
  CHECK(c.hidden_size() == spec.hidden);
  CHECK(c.config()["model_type"] == "olmoe");
  REQUIRE(c.moe_layers().size() == spec.layers);
  for (uint32_t l = 0; l < spec.layers; ++l) {
    const MoeLayerInfo& info = c.moe_layer(l);
    CHECK(info.experts == spec.experts);
    CHECK(info.record_stride == fx.record_stride);
    CHECK(info.layout.payload_end == fx.payload_end);
    CHECK(info.codebook_base == 6 * l);
  }
  CHECK(c.find_moe_layer(spec.layers) == nullptr);
  SLUICE_CHECK_ERROR_CONTAINS(c.moe_layer(spec.layers), "is not a MoE layer");
  CHECK(c.expert_bytes() == uint64_t{spec.layers} * spec.experts * fx.record_stride);
  CHECK(c.record_count() == uint64_t{spec.layers} * spec.experts);
  CHECK(c.trunk_bytes() == fx.trunk_bytes);
  CHECK(c.codebooks_bytes() == uint64_t{fx.codebook_count} * 1024);
  CHECK(c.trunk_tensors().size() == fx.trunk.size());
  REQUIRE(c.tokenizer_paths().size() == 2);
  CHECK(c.tokenizer_paths()[0] == tmp.path() + "/tokenizer.json");
  REQUIRE(c.chat_template().has_value());
  CHECK(*c.chat_template() == "{{ messages }}");
  CHECK(c.identity() == fnv1a64(slurp(fx.manifest_path())));
}

TEST_CASE("the identity follows the manifest bytes") {
  testing::TempDir a, b;
  testing::write_fixture(a.path());
  testing::FixtureSpec spec;
  spec.chat_template = "x";
  testing::write_fixture(b.path(), spec);
  CHECK(Container::open(a.path()).identity() != Container::open(b.path()).identity());
  testing::TempDir a2;
  testing::write_fixture(a2.path());
  CHECK(Container::open(a.path()).identity() == Container::open(a2.path()).identity());
}

TEST_CASE("codebooks and trunk tensors load with the values written") {
  testing::TempDir tmp;
  const Fixture fx = testing::write_fixture(tmp.path());
  const Container c = Container::open(tmp.path());
  const Codebooks books = c.load_codebooks();
  REQUIRE(books.count() == fx.codebook_count);
  for (uint32_t id = 0; id < books.count(); ++id) {
    for (uint32_t code = 0; code < 64; code += 9) {
      for (uint32_t j = 0; j < 4; ++j)
        CHECK(books.entry(id, static_cast<uint8_t>(code))[j] ==
              testing::fixture_codebook_value(id, code, j));
    }
  }
  for (const testing::FixtureTrunkTensor& t : fx.trunk) {
    CAPTURE(t.name);
    const TrunkTensor tensor = c.load_trunk_tensor(t.name);
    CHECK(reinterpret_cast<uintptr_t>(tensor.data()) % 64 == 0);
    CHECK(trunk_format_name(tensor.format()) == t.format);
    CHECK(tensor.rows() == t.rows);
    CHECK(tensor.cols() == t.cols);
    const std::vector<float> values = dequantize(tensor);
    REQUIRE(values.size() == t.rows * t.cols);
    const uint64_t groups = (t.cols + 127) / 128;
    for (uint64_t r = 0; r < t.rows; ++r) {
      for (uint64_t col = 0; col < t.cols; ++col) {
        const float want = t.format == "f32" ? t.values[r * t.cols + col]
                                             : static_cast<float>(t.q[r * t.cols + col]) *
                                                   f16_to_f32(t.scales[r * groups + col / 128]);
        if (values[r * t.cols + col] != want) FAIL(t.name, " [", r, ",", col, "]");
      }
    }
  }
  SLUICE_CHECK_ERROR_CONTAINS(c.load_trunk_tensor("lm_head.weight"),
                              "no tensor \"lm_head.weight\"");
}

TEST_CASE("records read with O_DIRECT where the file system allows it, and pass every check") {
  testing::TempDir tmp;
  const Fixture fx = testing::write_fixture(tmp.path());
  const Container c = Container::open(tmp.path());
  INFO("O_DIRECT in effect: ", c.bank_direct(0));
  AlignedBuffer buffer(fx.record_stride, 4096);
  for (uint32_t l = 0; l < fx.spec.layers; ++l) {
    for (uint32_t e = 0; e < fx.spec.experts; ++e) {
      CHECK_NOTHROW(c.read_record(l, e, buffer.data(), true));
      CHECK(RecordHeader::decode(buffer.data()).expert == e);
    }
  }
  SLUICE_CHECK_ERROR_CONTAINS(c.read_record(0, fx.spec.experts, buffer.data(), false),
                              "no such expert");
  SLUICE_CHECK_ERROR_CONTAINS(c.read_record(0, 0, buffer.data() + 64, false),
                              "not 4096-byte aligned");
  const Container buffered = Container::open(tmp.path(), posix_file_system(), OpenMode::kBuffered);
  CHECK_FALSE(buffered.bank_direct(1));
  CHECK_NOTHROW(buffered.read_record(1, 2, buffer.data(), true));
}

TEST_CASE("a flipped header byte on disk is refused on every read") {
  testing::TempDir tmp;
  const Fixture fx = testing::write_fixture(tmp.path());
  AlignedBuffer buffer(fx.record_stride, 4096);
  SUBCASE("magic") {
    testing::flip_byte(fx.bank_path(1), fx.record_offset(3) + 0);
    const Container c = Container::open(tmp.path());
    SLUICE_CHECK_ERROR_STARTS(c.read_record(1, 3, buffer.data(), false),
                              "layer 1 expert 3: header magic mismatch");
    CHECK_NOTHROW(c.read_record(1, 2, buffer.data(), true));
  }
  SUBCASE("expert id") {
    testing::flip_byte(fx.bank_path(0), fx.record_offset(2) + 8);
    const Container c = Container::open(tmp.path());
    SLUICE_CHECK_ERROR_STARTS(c.read_record(0, 2, buffer.data(), false),
                              "layer 0 expert 2: header expert id mismatch");
  }
  SUBCASE("an offset") {
    testing::flip_byte(fx.bank_path(0), fx.record_offset(4) + 28);
    const Container c = Container::open(tmp.path());
    SLUICE_CHECK_ERROR_STARTS(c.read_record(0, 4, buffer.data(), false),
                              "layer 0 expert 4: header down offset mismatch");
  }
}

TEST_CASE("a flipped payload byte passes a plain read and fails a verified one") {
  testing::TempDir tmp;
  const Fixture fx = testing::write_fixture(tmp.path());
  testing::flip_byte(fx.bank_path(1), fx.record_offset(3) + fx.payload_end - 1);  // last scale byte
  const Container c = Container::open(tmp.path());
  AlignedBuffer buffer(fx.record_stride, 4096);
  CHECK_NOTHROW(c.read_record(1, 3, buffer.data(), false));
  SLUICE_CHECK_ERROR_STARTS(c.read_record(1, 3, buffer.data(), true),
                            "layer 1 expert 3: checksum mismatch");
  const auto problem = c.try_read_record(1, 3, buffer.data(), true);
  REQUIRE(problem.has_value());
  CHECK(problem->starts_with("checksum mismatch"));
  CHECK_FALSE(c.try_read_record(1, 2, buffer.data(), true).has_value());
}

TEST_CASE("injected read faults are refused naming the record or file") {
  testing::TempDir tmp;
  const Fixture fx = testing::write_fixture(tmp.path());
  FaultyFileSystem fs;
  AlignedBuffer buffer(fx.record_stride, 4096);
  SUBCASE("EIO on a bank") {
    fs.add({"experts-L000.bin", Fault::kEio, fx.record_offset(2) + 100});
    const Container c = Container::open(tmp.path(), fs);
    CHECK_NOTHROW(c.read_record(0, 1, buffer.data(), true));
    SLUICE_CHECK_ERROR_CONTAINS(c.read_record(0, 2, buffer.data(), true),
                                "layer 0 expert 2: " + fx.bank_path(0) + ": read of");
  }
  SUBCASE("short read on a bank") {
    fs.add({"experts-L001.bin", Fault::kShortRead, fx.record_offset(4) + 4000});
    const Container c = Container::open(tmp.path(), fs);
    SLUICE_CHECK_ERROR_STARTS(c.read_record(1, 4, buffer.data(), false),
                              "layer 1 expert 4: short read: 4000 of");
  }
  SUBCASE("flipped payload byte in flight") {
    fs.add({"experts-L001.bin", Fault::kFlip, fx.record_offset(0) + 200});
    const Container c = Container::open(tmp.path(), fs);
    CHECK_NOTHROW(c.read_record(1, 0, buffer.data(), false));
    SLUICE_CHECK_ERROR_STARTS(c.read_record(1, 0, buffer.data(), true),
                              "layer 1 expert 0: checksum mismatch");
  }
  SUBCASE("flipped header byte in flight") {
    fs.add({"experts-L001.bin", Fault::kFlip, fx.record_offset(1) + 16});
    const Container c = Container::open(tmp.path(), fs);
    SLUICE_CHECK_ERROR_STARTS(c.read_record(1, 1, buffer.data(), false),
                              "layer 1 expert 1: header record stride mismatch");
  }
  SUBCASE("EIO on the trunk") {
    fs.add({"trunk.bin", Fault::kEio, fx.trunk[1].offset});
    const Container c = Container::open(tmp.path(), fs);
    CHECK_NOTHROW(c.load_trunk_tensor(fx.trunk[0].name));
    SLUICE_CHECK_ERROR_CONTAINS(
        c.load_trunk_tensor(fx.trunk[1].name),
        "trunk tensor \"" + fx.trunk[1].name + "\": " + tmp.path() + "/trunk.bin");
  }
  SUBCASE("short read on the trunk") {
    fs.add({"trunk.bin", Fault::kShortRead, fx.trunk[2].offset + 8});
    const Container c = Container::open(tmp.path(), fs);
    SLUICE_CHECK_ERROR_CONTAINS(c.load_trunk_tensor(fx.trunk[2].name), "short read");
  }
  SUBCASE("EIO on the codebooks") {
    fs.add({"codebooks.bin", Fault::kEio, 1024 * 3});
    const Container c = Container::open(tmp.path(), fs);
    SLUICE_CHECK_ERROR_CONTAINS(c.load_codebooks(), tmp.path() + "/codebooks.bin");
  }
  SUBCASE("EIO on the manifest") {
    fs.add({"manifest.json", Fault::kEio, 10});
    SLUICE_CHECK_ERROR_CONTAINS(Container::open(tmp.path(), fs), fx.manifest_path());
  }
  SUBCASE("a flipped manifest byte is caught by the parser") {
    fs.add({"manifest.json", Fault::kFlip, 0});  // '{' becomes 'z'
    SLUICE_CHECK_ERROR_CONTAINS(Container::open(tmp.path(), fs), "not valid JSON");
  }
}

TEST_CASE("damaged or missing files are refused at open, naming the file") {
  testing::TempDir tmp;
  const Fixture fx = testing::write_fixture(tmp.path());
  SUBCASE("truncated bank") {
    testing::truncate_file(fx.bank_path(1), fx.record_stride * 3 + 100);
    SLUICE_CHECK_ERROR_STARTS(
        Container::open(tmp.path()),
        fx.bank_path(1) + ": file is " + std::to_string(fx.record_stride * 3 + 100) + " bytes");
  }
  SUBCASE("bank longer than the manifest says") {
    testing::truncate_file(fx.bank_path(0), fx.record_stride * (fx.spec.experts + 1));
    SLUICE_CHECK_ERROR_STARTS(Container::open(tmp.path()), fx.bank_path(0));
  }
  SUBCASE("missing bank") {
    std::remove(fx.bank_path(1).c_str());
    SLUICE_CHECK_ERROR_CONTAINS(Container::open(tmp.path()), fx.bank_path(1) + ": cannot open");
  }
  SUBCASE("truncated trunk") {
    testing::truncate_file(tmp.path() + "/trunk.bin", fx.trunk_bytes - 64);
    SLUICE_CHECK_ERROR_CONTAINS(Container::open(tmp.path()), "trunk.bin: file is");
  }
  SUBCASE("codebooks of the wrong size") {
    testing::truncate_file(tmp.path() + "/codebooks.bin", 1024);
    SLUICE_CHECK_ERROR_CONTAINS(Container::open(tmp.path()), "codebooks.bin: file is 1024 bytes");
  }
  SUBCASE("a flipped codebook byte") {
    testing::flip_byte(tmp.path() + "/codebooks.bin", 3 * 1024 + 77);
    const Container c = Container::open(tmp.path());
    SLUICE_CHECK_ERROR_CONTAINS(c.load_codebooks(), "codebooks.bin: checksum mismatch (manifest says");
  }
  SUBCASE("a non-finite codebook entry under a matching checksum") {
    const char inf[4] = {0, 0, static_cast<char>(0x80), 0x7f};
    overwrite_and_reseal_codebooks(fx, ((2 * 64 + 5) * 4 + 3) * 4, inf);
    const Container c = Container::open(tmp.path());
    SLUICE_CHECK_ERROR_CONTAINS(c.load_codebooks(), "codebook 2 entry 5 element 3 is inf, outside [-4, 4]");
  }
  SUBCASE("a finite but impossible codebook entry under a matching checksum") {
    const float huge = 6.7e28f;  // the value one flipped byte made in the probe
    char bytes[4];
    std::memcpy(bytes, &huge, 4);
    overwrite_and_reseal_codebooks(fx, ((7 * 64) * 4) * 4, bytes);
    const Container c = Container::open(tmp.path());
    SLUICE_CHECK_ERROR_CONTAINS(c.load_codebooks(), "codebook 7 entry 0 element 0 is 6.7e+28, outside [-4, 4]");
  }
  SUBCASE("a damaged tokenizer file") {
    testing::flip_byte(tmp.path() + "/tokenizer.json", 3);
    SLUICE_CHECK_ERROR_CONTAINS(Container::open(tmp.path()), "tokenizer.json: checksum mismatch");
  }
  SUBCASE("missing tokenizer file") {
    std::remove((tmp.path() + "/tokenizer_config.json").c_str());
    SLUICE_CHECK_ERROR_CONTAINS(Container::open(tmp.path()),
                                "tokenizer_config.json: tokenizer file");
  }
  SUBCASE("missing manifest") {
    std::remove(fx.manifest_path().c_str());
    SLUICE_CHECK_ERROR_CONTAINS(Container::open(tmp.path()),
                                tmp.path() + ": incomplete container: conversion did not finish");
  }
  SUBCASE("no such directory") {
    SLUICE_CHECK_ERROR_CONTAINS(Container::open(tmp.path() + "/nope.sluice"), "no such container");
  }
  SUBCASE("format_version 4, from a newer build") {
    auto manifest = testing::read_json(fx.manifest_path());
    manifest["format_version"] = 4;
    testing::write_manifest(fx.manifest_path(), manifest);
    SLUICE_CHECK_ERROR_CONTAINS(Container::open(tmp.path()), "format_version 4 is not supported");
  }
  SUBCASE("format_version 2, the layout of 8-weight codes") {
    auto manifest = testing::read_json(fx.manifest_path());
    manifest["format_version"] = 2;
    testing::write_manifest(fx.manifest_path(), manifest);
    SLUICE_CHECK_ERROR_CONTAINS(Container::open(tmp.path()),
                                fx.manifest_path() +
                                    ": format_version 2 is not supported (this build reads "
                                    "format_version 3; convert the checkpoint again)");
  }
}

}  // namespace
}  // namespace sluice
