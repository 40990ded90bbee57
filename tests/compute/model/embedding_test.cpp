// tests/compute/model/embedding_test.cpp: an untied embedding left on disk
// (compute/model/embedding.h): each row read per token equals the resident
// table's, a damaged table is refused at load, a row changed after the load
// is caught at its lookup, and the trunk the model holds no longer counts it.
#include <doctest/doctest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "compute/model/embedding.h"
#include "compute/model/weights.h"
#include "proto/container.h"
#include "proto/error.h"
#include "proto/tensor_inventory.h"
#include "tests/compute/model/tiny_models.h"

using namespace sluice;
using sluice::testing::scratch_path;
using sluice::testing::tiny_model;

namespace {

struct Table {
  Container container;
  const TrunkTensorInfo* info;
};

Table open_table(const std::string& dir) {
  Container container = Container::open(dir);
  const ModelConfig config = ModelConfig::from_json(container.arch(), container.config());
  const TrunkTensorInfo* info = container.find_trunk_tensor(tensor_name(config, TensorRole::kEmbed));
  REQUIRE(info != nullptr);
  return {std::move(container), info};
}

// Changes one q8 value of trunk.bin to another valid one (0 and 1 both are),
// so that only a checksum can tell.
void change_byte(const std::string& path, uint64_t offset) {
  std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
  REQUIRE(file);
  file.seekg(static_cast<std::streamoff>(offset));
  char byte = 0;
  file.read(&byte, 1);
  byte = static_cast<char>(byte == 0 ? 1 : 0);
  file.seekp(static_cast<std::streamoff>(offset));
  file.write(&byte, 1);
  REQUIRE(file);
}

std::string copy_of(const std::string& dir, const std::string& name) {
  const std::string copy = scratch_path() + "/" + name;
  std::filesystem::remove_all(copy);
  std::filesystem::copy(dir, copy, std::filesystem::copy_options::recursive);
  return copy;
}

}  // namespace

TEST_CASE("every row read from disk equals the resident table's row, bit for bit") {
  for (const char* family : {"olmoe", "kimi_linear"}) {
    CAPTURE(family);
    const Table t = open_table(tiny_model(family));
    const Linear resident(t.container.load_trunk_tensor(t.info->name));
    // Small blocks, so the load crosses block boundaries and ends on a partial one.
    const DiskRows rows(t.container, *t.info, 7);
    REQUIRE(rows.rows() == resident.rows());
    REQUIRE(rows.cols() == resident.cols());
    std::vector<float> want(rows.cols()), got(rows.cols());
    for (uint32_t r = 0; r < rows.rows(); ++r) {
      resident.row(r, want.data());
      rows.row(r, got.data());
      REQUIRE(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)) == 0);
    }
    CHECK(rows.resident_bytes() < t.info->bytes);
  }
}

TEST_CASE("a model's weights hold the row sums, not the table") {
  const Table t = open_table(tiny_model("olmoe"));
  const ModelConfig config = ModelConfig::from_json(t.container.arch(), t.container.config());
  const ModelWeights w = ModelWeights::load(t.container, config);
  REQUIRE(w.embed_rows != nullptr);
  const Linear resident(t.container.load_trunk_tensor(t.info->name));
  std::vector<float> want(resident.cols()), got(resident.cols());
  resident.row(3, want.data());
  w.embed_row(3, got.data());
  CHECK(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)) == 0);
  // Resident: every other tensor as stored, the codebooks in f32, and the row sums.
  uint64_t others = 0;
  for (const TrunkTensorInfo& info : t.container.trunk_tensors()) {
    if (info.name != t.info->name) others += info.bytes + info.scale_bytes;
  }
  const uint64_t codebooks = t.container.load_codebooks().values().size() * sizeof(float);
  CHECK(w.bytes == others + codebooks + w.embed_rows->resident_bytes());
}

TEST_CASE("a damaged table is refused at load, naming the tensor") {
  const Table t = open_table(tiny_model("olmoe"));
  REQUIRE(t.info->format == TrunkFormat::kQ8G128);
  const std::string copy = copy_of(tiny_model("olmoe"), "damaged_embedding.sluice");
  change_byte(copy + "/trunk.bin", t.info->offset + 5);
  const Container damaged = Container::open(copy);
  CHECK_THROWS_WITH_AS(DiskRows(damaged, *t.info), doctest::Contains("checksum mismatch"), Error);
  CHECK_THROWS_WITH_AS(DiskRows(damaged, *t.info), doctest::Contains(t.info->name.c_str()), Error);
}

TEST_CASE("a row changed after the load is caught at its lookup; the other rows still read") {
  const std::string copy = copy_of(tiny_model("olmoe"), "changed_embedding.sluice");
  const Table t = open_table(copy);
  const DiskRows rows(t.container, *t.info);
  const uint64_t row_bytes = trunk_row_bytes(t.info->format, t.info->padded_cols());
  change_byte(copy + "/trunk.bin", t.info->offset + 2 * row_bytes + 1);
  std::vector<float> out(rows.cols());
  CHECK_THROWS_WITH_AS(rows.row(2, out.data()), doctest::Contains("row 2: checksum mismatch"), Error);
  CHECK_NOTHROW(rows.row(1, out.data()));
  CHECK_NOTHROW(rows.row(3, out.data()));
  CHECK_THROWS_WITH_AS(rows.row(rows.rows(), out.data()), doctest::Contains("out of range"), Error);
}
