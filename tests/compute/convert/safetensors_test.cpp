// tests/compute/convert/safetensors_test.cpp: the safetensors reader on
// files built here byte by byte: valid ones convert exactly, damaged or
// lying ones are refused with the file and tensor named.
#include "compute/convert/safetensors.h"

#include <bit>
#include <cstring>

#include <doctest/doctest.h>

#include <cmath>

#include "proto/f16.h"
#include "tests/compute/convert/test_util.h"

namespace sluice::convert {
namespace {

using test::contains;
using test::error_of;

std::string le64(uint64_t v) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(v >> (8 * i));
  return out;
}

std::string safetensors_bytes(const std::string& header, const std::string& data) {
  return le64(header.size()) + header + data;
}

template <typename T>
std::string raw(const std::vector<T>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
}

std::unique_ptr<SafetensorsFile> open_file(const std::string& path) {
  return std::make_unique<SafetensorsFile>(posix_file_system().open(path, OpenMode::kBuffered), "model.safetensors");
}

// One tensor of each convertible dtype with values exact in every format.
std::string valid_file() {
  const std::vector<float> f32 = {1.0f, -2.5f, 3.25f, 0.0f};
  std::vector<uint16_t> bf16, f16;
  for (float v : {0.5f, -1.0f, 2.0f, 4.0f, -8.0f, 0.125f}) bf16.push_back(static_cast<uint16_t>(std::bit_cast<uint32_t>(v) >> 16));
  for (float v : {1.5f, -0.25f}) f16.push_back(f32_to_f16(v));
  const std::string header =
      R"({"__metadata__":{"format":"pt"},)"
      R"("a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},)"
      R"("b":{"dtype":"BF16","shape":[2,3],"data_offsets":[16,28]},)"
      R"("c":{"dtype":"F16","shape":[2],"data_offsets":[28,32]}}   )";
  return safetensors_bytes(header, raw(f32) + raw(bf16) + raw(f16));
}

TEST_CASE("a valid file converts every supported dtype exactly") {
  test::TempDir dir;
  test::write_bytes(dir.file("model.safetensors"), valid_file());
  const auto file = open_file(dir.file("model.safetensors"));
  REQUIRE(file->tensors().size() == 3);
  const TensorInfo* b = file->find("b");
  REQUIRE(b != nullptr);
  CHECK(b->shape == std::vector<uint64_t>{2, 3});
  std::vector<float> out(6);
  file->read_f32(*b, out.data());
  CHECK(out == std::vector<float>{0.5f, -1.0f, 2.0f, 4.0f, -8.0f, 0.125f});
  std::vector<float> a(4), c(2);
  file->read_f32(*file->find("a"), a.data());
  file->read_f32(*file->find("c"), c.data());
  CHECK(a == std::vector<float>{1.0f, -2.5f, 3.25f, 0.0f});
  CHECK(c == std::vector<float>{1.5f, -0.25f});
  CHECK(file->find("missing") == nullptr);
}

TEST_CASE("the header crc identifies the file") {
  test::TempDir dir;
  const std::string data(8, '\0');
  test::write_bytes(dir.file("x.safetensors"),
                    safetensors_bytes(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", data));
  const uint32_t first = open_file(dir.file("x.safetensors"))->header_crc32();
  CHECK(open_file(dir.file("x.safetensors"))->header_crc32() == first);
  test::write_bytes(dir.file("x.safetensors"),
                    safetensors_bytes(R"({"v":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", data));
  CHECK(open_file(dir.file("x.safetensors"))->header_crc32() != first);
}

TEST_CASE("a truncated file is refused naming the file and the tensor") {
  test::TempDir dir;
  const std::string bytes = valid_file();
  test::write_bytes(dir.file("model.safetensors"), bytes.substr(0, bytes.size() - 3));
  const std::string message = error_of([&] { open_file(dir.file("model.safetensors")); });
  CHECK(contains(message, "model.safetensors"));
  CHECK(contains(message, "tensor c"));
  CHECK(contains(message, "outside"));

  test::write_bytes(dir.file("model.safetensors"), bytes.substr(0, 40));
  CHECK(contains(error_of([&] { open_file(dir.file("model.safetensors")); }), "exceeds the file size"));
  test::write_bytes(dir.file("model.safetensors"), bytes.substr(0, 5));
  CHECK(contains(error_of([&] { open_file(dir.file("model.safetensors")); }), "too short"));
}

TEST_CASE("a header lying about offsets is refused") {
  test::TempDir dir;
  const std::string data(16, '\0');
  test::write_bytes(dir.file("model.safetensors"),
                    safetensors_bytes(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}})", data));
  std::string message = error_of([&] { open_file(dir.file("model.safetensors")); });
  CHECK(contains(message, "model.safetensors: tensor w"));
  CHECK(contains(message, "outside"));

  test::write_bytes(dir.file("model.safetensors"),
                    safetensors_bytes(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[12,4]}})", data));
  CHECK(contains(error_of([&] { open_file(dir.file("model.safetensors")); }), "tensor w"));

  test::write_bytes(dir.file("model.safetensors"),
                    safetensors_bytes(R"({"v":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                      R"("w":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                                      data));
  message = error_of([&] { open_file(dir.file("model.safetensors")); });
  CHECK(contains(message, "tensor w: data overlaps tensor v"));

  // A header length that claims more than the cap is refused before reading it.
  test::write_bytes(dir.file("model.safetensors"), le64(uint64_t{1} << 62) + "{}");
  CHECK(contains(error_of([&] { open_file(dir.file("model.safetensors")); }), "header length"));
}

TEST_CASE("bad header JSON is refused") {
  test::TempDir dir;
  test::write_bytes(dir.file("model.safetensors"), safetensors_bytes(R"({"w":{"dtype":"F32",)", std::string(8, '\0')));
  const std::string message = error_of([&] { open_file(dir.file("model.safetensors")); });
  CHECK(contains(message, "model.safetensors: header is not valid JSON"));
  test::write_bytes(dir.file("model.safetensors"), safetensors_bytes(R"([1,2])", ""));
  CHECK(contains(error_of([&] { open_file(dir.file("model.safetensors")); }), "not a JSON object"));
  test::write_bytes(dir.file("model.safetensors"),
                    safetensors_bytes(R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,0]}})", ""));
  CHECK(contains(error_of([&] { open_file(dir.file("model.safetensors")); }), "tensor w: shape entry"));
}

TEST_CASE("unsupported and unknown dtypes are refused by name") {
  test::TempDir dir;
  test::write_bytes(dir.file("model.safetensors"),
                    safetensors_bytes(R"({"X":{"dtype":"F8_E5M2","shape":[4],"data_offsets":[0,4]}})", std::string(4, '\0')));
  const auto file = open_file(dir.file("model.safetensors"));
  std::vector<float> out(4);
  CHECK(error_of([&] { file->read_f32(*file->find("X"), out.data()); }) ==
        "model.safetensors: tensor X: unsupported dtype F8_E5M2");
  test::write_bytes(dir.file("model.safetensors"),
                    safetensors_bytes(R"({"Y":{"dtype":"Q9","shape":[4],"data_offsets":[0,4]}})", std::string(4, '\0')));
  CHECK(contains(error_of([&] { open_file(dir.file("model.safetensors")); }), "tensor Y: unknown dtype Q9"));
}

TEST_CASE("fp8 e4m3fn bytes decode as architectures.md §0.9 defines them") {
  CHECK(e4m3_to_f32(0x00) == 0.0f);
  CHECK(e4m3_to_f32(0x01) == std::ldexp(1.0f, -9));  // smallest subnormal: 1/8 · 2^-6
  CHECK(e4m3_to_f32(0x07) == 7.0f / 8.0f * std::ldexp(1.0f, -6));
  CHECK(e4m3_to_f32(0x08) == std::ldexp(1.0f, -6));  // smallest normal
  CHECK(e4m3_to_f32(0x38) == 1.0f);
  CHECK(e4m3_to_f32(0x3c) == 1.5f);
  CHECK(e4m3_to_f32(0x7e) == 448.0f);  // largest finite
  CHECK(e4m3_to_f32(0xb8) == -1.0f);
  CHECK(std::signbit(e4m3_to_f32(0x80)));
  CHECK(std::isnan(e4m3_to_f32(0x7f)));
  CHECK(std::isnan(e4m3_to_f32(0xff)));
  // Every other byte is finite, and the positive ones increase strictly.
  for (int b = 1; b < 0x7f; ++b) {
    CHECK(e4m3_to_f32(static_cast<uint8_t>(b)) > e4m3_to_f32(static_cast<uint8_t>(b - 1)));
    CHECK(e4m3_to_f32(static_cast<uint8_t>(b | 0x80)) == -e4m3_to_f32(static_cast<uint8_t>(b)));
  }
}

TEST_CASE("a shape that does not match the byte span is refused") {
  test::TempDir dir;
  test::write_bytes(dir.file("model.safetensors"),
                    safetensors_bytes(R"({"w":{"dtype":"BF16","shape":[2,3],"data_offsets":[0,8]}})", std::string(8, '\0')));
  const std::string message = error_of([&] { open_file(dir.file("model.safetensors")); });
  CHECK(contains(message, "model.safetensors: tensor w: shape [2, 3] of BF16 needs 12 bytes but data_offsets span 8"));
}

TEST_CASE("sharded checkpoints resolve tensors through the index") {
  test::TempDir dir;
  const std::vector<float> one = {1.0f, 2.0f}, two = {3.0f};
  test::write_bytes(dir.file("s1.safetensors"),
                    safetensors_bytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", raw(one)));
  test::write_bytes(dir.file("s2.safetensors"),
                    safetensors_bytes(R"({"b":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", raw(two)));
  test::write_bytes(dir.file("model.safetensors.index.json"),
                    R"({"metadata":{},"weight_map":{"a":"s1.safetensors","b":"s2.safetensors"}})");
  const Checkpoint checkpoint = Checkpoint::open(posix_file_system(), dir.path());
  CHECK(checkpoint.files().size() == 2);
  CHECK(checkpoint.read_f32("a") == one);
  CHECK(checkpoint.read_f32("b") == two);
  CHECK(checkpoint.find("a")->file->name() == "s1.safetensors");
  CHECK(contains(error_of([&] { checkpoint.read_f32("c"); }), "model.safetensors.index.json: tensor c missing"));

  test::write_bytes(dir.file("model.safetensors.index.json"), R"({"weight_map":{"a":"s2.safetensors"}})");
  CHECK(contains(error_of([&] { Checkpoint::open(posix_file_system(), dir.path()); }),
                 "tensor a is mapped to s2.safetensors, which does not hold it"));
  test::write_bytes(dir.file("model.safetensors.index.json"), R"({"weight_map":{"a":"../s1.safetensors"}})");
  CHECK(contains(error_of([&] { Checkpoint::open(posix_file_system(), dir.path()); }), "not a plain file name"));
  test::write_bytes(dir.file("model.safetensors.index.json"), R"({"weight_map":)");
  CHECK(contains(error_of([&] { Checkpoint::open(posix_file_system(), dir.path()); }), "not valid JSON"));
}

TEST_CASE("a directory without safetensors is refused") {
  test::TempDir dir;
  CHECK(contains(error_of([&] { Checkpoint::open(posix_file_system(), dir.path()); }), "neither model.safetensors"));
}

}  // namespace
}  // namespace sluice::convert
