// tests/proto/info_verify_cli_test.cpp: `sluice info` and `sluice verify`
// run as the real binary ($SLUICE_BIN) on hand-written fixtures, clean and
// damaged; expected numbers come from the fixture, not from the reader.
#include <doctest/doctest.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/proto/container_fixture.h"

namespace sluice {
namespace {

using nlohmann::json;

struct Run {
  int status = -1;
  std::string out;
};

// Runs `sluice ARGS`, capturing stdout (and stderr when `with_stderr`).
Run sluice(const std::string& args, bool with_stderr = false) {
  const char* bin = std::getenv("SLUICE_BIN");
  REQUIRE_MESSAGE(bin != nullptr, "SLUICE_BIN is not set; run through meson test");
  const std::string command =
      std::string(bin) + " " + args + (with_stderr ? " 2>&1" : " 2>/dev/null");
  FILE* pipe = ::popen(command.c_str(), "r");
  REQUIRE(pipe != nullptr);
  Run run;
  char chunk[4096];
  size_t got;
  while ((got = std::fread(chunk, 1, sizeof chunk, pipe)) > 0) run.out.append(chunk, got);
  const int raw = ::pclose(pipe);
  run.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  return run;
}

TEST_CASE("sluice info --json reports the numbers the fixture was built with") {
  testing::TempDir tmp;
  testing::FixtureSpec spec;
  spec.layers = 3;
  spec.experts = 6;
  spec.top_k = 3;
  spec.hidden = 48;
  spec.expert_width = 40;
  spec.vocab = 100;
  const testing::Fixture fx = testing::write_fixture(tmp.path(), spec);
  const Run run = sluice("info --json " + tmp.path());
  REQUIRE(run.status == 0);
  const json d = json::parse(run.out);
  CHECK(d["arch"] == "olmoe");
  CHECK(d["layers"] == 3);
  CHECK(d["moe_layers"] == 3);
  CHECK(d["experts"] == 6);
  CHECK(d["top_k"] == 3);
  CHECK(d["hidden"] == 48);
  CHECK(d["expert_width"] == 40);
  CHECK(d["vocab_size"] == 100);
  CHECK(d["trunk_bytes"] == fx.trunk_bytes);
  CHECK(d["trunk_tensors"] == fx.trunk.size());
  CHECK(d["records"] == 18);
  CHECK(d["record_bytes"] == fx.record_stride);
  CHECK(d["expert_bytes"] == uint64_t{18} * fx.record_stride);
  CHECK(d["codebook_count"] == 18);
  CHECK(d["codebooks_bytes"] == 18 * 1024);
  CHECK(d["codebook_sharing"] == "layer.matrix.stage");
  CHECK(d["index_bits_per_weight"] == 3.0);
  CHECK(d["bits_per_weight"].get<double>() ==
        doctest::Approx(fx.record_stride * 8.0 / (3.0 * spec.hidden * spec.expert_width)));
  CHECK(d["tokenizer_files"] == json::array({"tokenizer.json", "tokenizer_config.json"}));
  CHECK(d["chat_template"] == false);
  CHECK(d["moe_layer_table"].size() == 3);
  CHECK(d["moe_layer_table"][2]["file"] == "experts-L002.bin");

  const Run text = sluice("info " + tmp.path());
  CHECK(text.status == 0);
  CHECK(text.out.find("olmoe") != std::string::npos);
  CHECK(text.out.find("top-k 3") != std::string::npos);
}

TEST_CASE("sluice verify passes a sound container") {
  testing::TempDir tmp;
  const testing::Fixture fx = testing::write_fixture(tmp.path());
  const Run run = sluice("verify --json " + tmp.path());
  CHECK(run.status == 0);
  const json d = json::parse(run.out);
  CHECK(d["records"] == fx.spec.layers * fx.spec.experts);
  CHECK(d["bytes"] == uint64_t{fx.spec.layers} * fx.spec.experts * fx.record_stride);
  CHECK(d["damaged"].empty());
  CHECK(d["seconds"].is_number());
  CHECK(d["gb_per_s"].is_number());
  const Run text = sluice("verify " + tmp.path());
  CHECK(text.status == 0);
  CHECK(text.out.find("all sound") != std::string::npos);
}

TEST_CASE("sluice verify names every damaged record and exits 1") {
  testing::TempDir tmp;
  const testing::Fixture fx = testing::write_fixture(tmp.path());
  testing::flip_byte(fx.bank_path(1),
                     fx.record_offset(3) + 500);                 // payload: only the crc32 sees it
  testing::flip_byte(fx.bank_path(0), fx.record_offset(1) + 1);  // header magic
  const Run run = sluice("verify --json " + tmp.path());
  CHECK(run.status == 1);
  const json d = json::parse(run.out);
  CHECK(d["records"] == fx.spec.layers * fx.spec.experts);
  REQUIRE(d["damaged"].size() == 2);
  CHECK(d["damaged"][0]["layer"] == 0);
  CHECK(d["damaged"][0]["expert"] == 1);
  CHECK(d["damaged"][0]["problem"].get<std::string>().starts_with("header magic mismatch"));
  CHECK(d["damaged"][1]["layer"] == 1);
  CHECK(d["damaged"][1]["expert"] == 3);
  CHECK(d["damaged"][1]["problem"].get<std::string>().starts_with("checksum mismatch"));
  const Run text = sluice("verify " + tmp.path());
  CHECK(text.status == 1);
  CHECK(text.out.find("layer 1 expert 3: checksum mismatch") != std::string::npos);
  CHECK(text.out.find("layer 0 expert 1: header magic mismatch") != std::string::npos);
  CHECK(text.out.find("2 damaged") != std::string::npos);
}

TEST_CASE("sluice verify names a damaged trunk tensor and damaged codebooks") {
  testing::TempDir tmp;
  const testing::Fixture fx = testing::write_fixture(tmp.path());
  testing::flip_byte(tmp.path() + "/trunk.bin", fx.trunk[1].offset + 17);  // q_proj data
  testing::flip_byte(tmp.path() + "/codebooks.bin", 6 * 1024 + 4);
  const Run run = sluice("verify --json " + tmp.path());
  CHECK(run.status == 1);
  const json d = json::parse(run.out);
  REQUIRE(d["damaged"].size() == 2);
  CHECK(d["damaged"][0]["tensor"] == "model.layers.0.self_attn.q_proj.weight");
  CHECK(d["damaged"][0]["problem"].get<std::string>().find("checksum mismatch") != std::string::npos);
  CHECK(d["damaged"][1]["file"] == "codebooks.bin");
  const Run text = sluice("verify " + tmp.path());
  CHECK(text.status == 1);
  CHECK(text.out.find("trunk tensor \"model.layers.0.self_attn.q_proj.weight\": checksum mismatch") !=
        std::string::npos);
  CHECK(text.out.find("codebooks.bin: checksum mismatch") != std::string::npos);
}

TEST_CASE("sluice verify catches a bank of sound records that are not the converted ones") {
  // Another fixture's layer-1 bank: every header and payload crc32 checks
  // out, only records_crc32 tells the records apart.
  testing::TempDir tmp, other;
  const testing::Fixture fx = testing::write_fixture(tmp.path());
  testing::FixtureSpec spec;
  spec.seed = 99;
  const testing::Fixture foreign = testing::write_fixture(other.path(), spec);
  std::filesystem::copy_file(foreign.bank_path(1), fx.bank_path(1),
                             std::filesystem::copy_options::overwrite_existing);
  const Run run = sluice("verify --json " + tmp.path());
  CHECK(run.status == 1);
  const json d = json::parse(run.out);
  REQUIRE(d["damaged"].size() == 1);
  CHECK(d["damaged"][0]["layer"] == 1);
  CHECK(d["damaged"][0]["problem"] == "records_crc32 mismatch");
  const Run text = sluice("verify " + tmp.path());
  CHECK(text.out.find("experts-L001.bin: records_crc32 mismatch") != std::string::npos);
}

TEST_CASE("info and verify refuse a container that is not there or not finished") {
  testing::TempDir tmp;
  const testing::Fixture fx = testing::write_fixture(tmp.path());
  std::remove(fx.manifest_path().c_str());
  for (const char* command : {"info ", "verify "}) {
    const Run run = sluice(command + tmp.path(), true);
    CHECK(run.status == 1);
    CHECK(run.out.find("sluice: error: " + tmp.path() +
                       ": incomplete container: conversion did not finish") != std::string::npos);
  }
  const Run missing = sluice("verify " + tmp.path() + "/absent.sluice", true);
  CHECK(missing.status == 1);
  CHECK(missing.out.find("no such container directory") != std::string::npos);
}

TEST_CASE("info and verify refuse a format_version 2 container, saying to convert it again") {
  testing::TempDir tmp;
  const testing::Fixture fx = testing::write_fixture(tmp.path());
  json manifest = testing::read_json(fx.manifest_path());
  manifest["format_version"] = 2;
  testing::write_manifest(fx.manifest_path(), manifest);
  for (const char* command : {"info ", "verify "}) {
    CAPTURE(command);
    const Run run = sluice(command + tmp.path(), true);
    CHECK(run.status == 1);
    CHECK(run.out.find(fx.manifest_path() +
                       ": format_version 2 is not supported (this build reads format_version 3; "
                       "convert the checkpoint again)") != std::string::npos);
  }
}

}  // namespace
}  // namespace sluice
