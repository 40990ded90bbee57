// tests/proto/manifest_test.cpp: manifest.json as untrusted input. Every
// bound of FORMAT.md is violated once and must be refused with a message
// naming the field; hostile values anywhere must give an Error, never a crash.
#include "proto/manifest.h"

#include <doctest/doctest.h>

#include <functional>

#include "proto/error.h"
#include "tests/proto/container_fixture.h"

namespace sluice {
namespace {

using nlohmann::json;

// A valid manifest, written by the fixture once (doctest reruns a test case
// per SUBCASE); each caller gets its own copy to break.
json valid_manifest() {
  static const json manifest = [] {
    testing::TempDir tmp;
    testing::FixtureSpec spec;
    spec.layers = 3;
    const testing::Fixture fx = testing::write_fixture(tmp.path(), spec);
    return testing::read_json(fx.manifest_path());
  }();
  return manifest;
}

Manifest parse(const json& manifest) {
  return parse_manifest(manifest.dump(), "M/manifest.json");
}

void refused(const json& manifest, const std::string& message) {
  CAPTURE(message);
  SLUICE_CHECK_ERROR_CONTAINS(parse(manifest), message);
}

TEST_CASE("the fixture's manifest parses to the numbers it was written with") {
  const json m = valid_manifest();
  const Manifest parsed = parse(m);
  CHECK(parsed.arch == "olmoe");
  CHECK(parsed.layer_count == 3);
  CHECK(parsed.top_k == 2);
  CHECK(parsed.vocab_size == 64);
  CHECK(parsed.hidden_size == 32);
  CHECK(parsed.codebook_count == 18);
  CHECK(parsed.bits_per_weight == 3.0);
  REQUIRE(parsed.moe_layers.size() == 3);
  CHECK(parsed.moe_layers[2].layer == 2);
  CHECK(parsed.moe_layers[2].file == "experts-L002.bin");
  CHECK(parsed.moe_layers[2].codebook_base == 12);
  CHECK(parsed.trunk_tensors.size() == 4);
  CHECK(parsed.tokenizer_files.size() == 2);
  CHECK_FALSE(parsed.chat_template.has_value());
  CHECK(parsed.identity == fnv1a64(m.dump()));
}

TEST_CASE("any edit of a manifest value is caught by manifest_crc32, however well-formed") {
  json m = valid_manifest();
  SUBCASE("the untouched manifest passes") { CHECK_NOTHROW(parse(m)); }
  SUBCASE("a config value the reader does not check itself") {
    m["config"]["rope_theta"] = 10001.0;
    refused(m, "M/manifest.json: checksum mismatch: manifest_crc32 is");
  }
  SUBCASE("a trunk tensor's crc32") {
    m["trunk"]["tensors"][0]["crc32"] = m["trunk"]["tensors"][0]["crc32"].get<uint32_t>() ^ 1;
    refused(m, "checksum mismatch");
  }
  SUBCASE("the same edit, resealed, is accepted") {
    m["config"]["rope_theta"] = 10001.0;
    CHECK_NOTHROW(parse(testing::sealed(m)));
  }
  SUBCASE("missing manifest_crc32") {
    m.erase("manifest_crc32");
    refused(m, "manifest_crc32 is missing");
  }
}

TEST_CASE("version, format and arch are checked first") {
  json m = valid_manifest();
  SUBCASE("format_version 4") {
    m["format_version"] = 4;
    refused(m, "format_version 4 is not supported (this build reads format_version 3)");
  }
  SUBCASE("format_version 2, a container of 8-weight codes in 3 stages") {
    m["format_version"] = 2;
    refused(m,
            "M/manifest.json: format_version 2 is not supported (this build reads "
            "format_version 3; convert the checkpoint again)");
  }
  SUBCASE("format_version 1, a container from before the checksums") {
    m["format_version"] = 1;
    refused(m,
            "format_version 1 is not supported (this build reads format_version 3; convert the "
            "checkpoint again)");
  }
  SUBCASE("format_version 0") {
    m["format_version"] = 0;
    refused(m, "format_version 0 is not supported");
  }
  SUBCASE("format_version as a string") {
    m["format_version"] = "1";
    refused(m, "format_version must be a non-negative integer, found string");
  }
  SUBCASE("missing format_version") {
    m.erase("format_version");
    refused(m, "format_version is missing");
  }
  SUBCASE("not a sluice manifest") {
    m["format"] = "waste";
    refused(m, "format is \"waste\"");
  }
  SUBCASE("unknown arch") {
    m["arch"] = "llama";
    refused(m, "unknown arch \"llama\"");
  }
  SUBCASE("not JSON") {
    SLUICE_CHECK_ERROR_CONTAINS(parse_manifest("{\"format\": ", "M"), "M: not valid JSON");
  }
  SUBCASE("not an object") {
    SLUICE_CHECK_ERROR_CONTAINS(parse_manifest("[1, 2]", "M"), "must be an object");
  }
}

TEST_CASE("FORMAT.md bounds are enforced") {
  json m = valid_manifest();
  json& layer0 = m["moe_layers"][0];
  json& tensor0 = m["trunk"]["tensors"][0];
  SUBCASE("huge expert count") {
    layer0["experts"] = 1000000;
    refused(m, "moe_layers[0].experts is 1000000, above the limit of 4096");
  }
  SUBCASE("more experts than the bank holds") {
    layer0["experts"] = 6;
    refused(m, "moe_layers[0].bytes is");
  }
  SUBCASE("too many layers") {
    m["config"]["num_hidden_layers"] = 257;
    refused(m, "config: key num_hidden_layers is 257, outside [1, 256]");
  }
  SUBCASE("top-k") {
    m["config"]["num_experts_per_tok"] = 65;
    refused(m, "config: key num_experts_per_tok is 65, outside [1, ");
  }
  SUBCASE("top-k above the expert count") {
    // The family spec reads the config before the layer table is looked at.
    m["config"]["num_experts_per_tok"] = 6;
    refused(m, "config: key num_experts_per_tok is 6, outside [1, 5]");
  }
  SUBCASE("vocabulary") {
    m["config"]["vocab_size"] = 1048577;
    refused(m, "config: key vocab_size is 1048577, outside [1, 1048576]");
  }
  SUBCASE("hidden") {
    layer0["hidden"] = 65536 + 8;
    refused(m, "moe_layers[0].hidden is 65544, above the limit of 65536");
  }
  SUBCASE("expert width not a multiple of 8") {
    layer0["expert_width"] = 20;
    refused(m, "expert_width 20 must both be multiples of 8");
  }
  SUBCASE("the largest shapes within bounds need records above 1 GiB") {
    layer0["hidden"] = 65536;
    layer0["expert_width"] = 65536;
    refused(m, "need records above the 1073741824-byte limit");
  }
  SUBCASE("stride not a multiple of 4096") {
    layer0["record_stride"] = 6000;
    refused(m, "moe_layers[0].record_stride 6000 is not a multiple of 4096");
  }
  SUBCASE("stride above 1 GiB") {
    layer0["record_stride"] = (uint64_t{1} << 30) + 4096;
    refused(m, "above the limit of 1073741824");
  }
  SUBCASE("stride that disagrees with the geometry") {
    layer0["record_stride"] = layer0["record_stride"].get<uint64_t>() + 4096;
    refused(m, "moe_layers[0].record_stride is");
  }
  SUBCASE("codebook id out of range") {
    m["moe_layers"][2]["codebook_base"] = 13;
    refused(
        m,
        "moe_layers[2].codebook_base is 13; it needs codebooks up to 18 but the container has 18");
  }
  SUBCASE("codebook bytes disagree with the count") {
    m["codebooks"]["count"] = 19;
    refused(m, "codebooks.bytes is");
  }
  SUBCASE("codebook bytes of the old 256 × 8 codebooks") {
    m["codebooks"]["bytes"] = 18 * 8192;
    refused(m, "codebooks.bytes is 147456, but 18 codebooks of 1024 bytes take 18432");
  }
  SUBCASE("layer index beyond the model") {
    m["moe_layers"][2]["layer"] = 3;
    refused(m, "moe_layers[2].layer is 3, above the limit of 2");
  }
  SUBCASE("layers out of order") {
    std::swap(m["moe_layers"][0], m["moe_layers"][1]);
    refused(m, "moe_layers[1].layer is 0, not after the previous entry's 1");
  }
  SUBCASE("bank file named for another layer") {
    layer0["file"] = "experts-L001.bin";
    refused(
        m, "moe_layers[0].file is \"experts-L001.bin\"; layer 0 is stored in \"experts-L000.bin\"");
  }
  SUBCASE("a path out of the container") {
    m["tokenizer"]["files"][0] = "../../etc/passwd";
    refused(m, "tokenizer.files[0] \"../../etc/passwd\" is not a plain file name");
  }
  SUBCASE("tensor past the end of trunk.bin") {
    tensor0["offset"] = m["trunk"]["bytes"].get<uint64_t>() - 64;
    refused(m, "run past the end of trunk.bin");
  }
  SUBCASE("tensor offset beyond trunk.bin") {
    tensor0["offset"] = uint64_t{1} << 62;
    refused(m,
            "trunk.tensors[0] (model.embed_tokens.weight).offset is 4611686018427387904, above the "
            "limit");
  }
  SUBCASE("scales past the end of trunk.bin") {
    tensor0["scale_offset"] = m["trunk"]["bytes"].get<uint64_t>() - 64;
    refused(m, "scales [");
  }
  SUBCASE("misaligned scales") {
    tensor0["scale_offset"] = tensor0["scale_offset"].get<uint64_t>() + 2;
    refused(m, ".scale_offset " + std::to_string(tensor0["scale_offset"].get<uint64_t>()) +
                   " is not a multiple of 64");
  }
  SUBCASE("scales laid over another tensor's data") {
    // Tensor 1 (q4g128) gets tensor 0's data range for its scales.
    json& tensor1 = m["trunk"]["tensors"][1];
    tensor1["scale_offset"] = tensor0["offset"];
    refused(m, "trunk.tensors[1] (model.layers.0.self_attn.q_proj.weight) scales [0, ");
    refused(m, "overlaps trunk.tensors[0] (model.embed_tokens.weight) data [0, ");
  }
  SUBCASE("two tensors on the same bytes") {
    json& norm = m["trunk"]["tensors"][2];
    norm["offset"] = m["trunk"]["tensors"][3]["offset"];
    refused(m, "overlaps");
  }
  SUBCASE("a trunk tensor without its crc32") {
    tensor0.erase("crc32");
    refused(m, "trunk.tensors[0] (model.embed_tokens.weight).crc32 is missing");
  }
  SUBCASE("a crc32 that is not 32 bits") {
    tensor0["crc32"] = uint64_t{1} << 32;
    refused(m, "crc32 is 4294967296, above the limit of 4294967295");
  }
  SUBCASE("codebooks without their crc32") {
    m["codebooks"].erase("crc32");
    refused(m, "codebooks.crc32 is missing");
  }
  SUBCASE("a bank without records_crc32") {
    layer0.erase("records_crc32");
    refused(m, "moe_layers[0].records_crc32 is missing");
  }
  SUBCASE("tokenizer sums that do not match the file list") {
    m["tokenizer"]["crc32"].erase(1);
    refused(m, "tokenizer.crc32 has 1 entries for 2 files");
  }
  SUBCASE("misaligned tensor") {
    tensor0["offset"] = 32;
    refused(m, ".offset 32 is not a multiple of 64");
  }
  SUBCASE("bytes inconsistent with shape") {
    tensor0["shape"][1] = 200;  // 64 × 256 padded int8 ≠ 64 × 128
    refused(m,
            "(model.embed_tokens.weight).bytes is 8192, but a q8g128 tensor of shape 64x200 takes "
            "16384");
  }
  SUBCASE("scale bytes inconsistent with shape") {
    tensor0["scale_bytes"] = 2;
    refused(m, ".scale_bytes is 2, but 64 rows of 1 groups take 128");
  }
  SUBCASE("f32 tensor with scales") {
    m["trunk"]["tensors"][2]["scale_bytes"] = 4;
    refused(m, "(model.norm.weight) is f32 but has scales");
  }
  SUBCASE("1-D quantized tensor") {
    tensor0["shape"] = json::array({8192});
    refused(m, "is 1-D but stored as q8g128");
  }
  SUBCASE("3-D quantized tensor") {
    tensor0["shape"] = json::array({2, 2, 2});
    refused(m, "is 3-D but stored as q8g128; only matrices are quantized");
  }
  SUBCASE("5-D tensor") {
    tensor0["shape"] = json::array({2, 2, 2, 2, 2});
    refused(m, "shape has 5 dimensions; tensors have 1 to 4");
  }
  SUBCASE("huge dimension") {
    tensor0["shape"][0] = uint64_t{1} << 40;
    refused(m, "shape[0] is 1099511627776, above the limit of 16777216");
  }
  SUBCASE("unknown tensor format") {
    tensor0["format"] = "q3";
    refused(m, ".format \"q3\" is not one of f32, q8g128, q6g128, q4g128");
  }
  SUBCASE("repeated tensor name") {
    m["trunk"]["tensors"][1]["name"] = "model.embed_tokens.weight";
    refused(m, "trunk.tensors[1] repeats the tensor name");
  }
  SUBCASE("unsupported quantization") {
    m["expert_quant"]["stages"] = 3;
    refused(m, "expert_quant.stages is 3; this build reads only 2");
  }
  SUBCASE("the old codebook shape") {
    m["expert_quant"]["entries"] = 256;
    refused(m, "expert_quant.entries is 256; this build reads only 64");
    m["expert_quant"]["entries"] = 64;
    m["expert_quant"]["vec_dim"] = 8;
    refused(m, "expert_quant.vec_dim is 8; this build reads only 4");
  }
  SUBCASE("the old code layout") {
    m["expert_quant"]["index_layout"] = "rowblock16.vector.stage.row";
    refused(m,
            "expert_quant.index_layout is \"rowblock16.vector.stage.row\"; this build reads only "
            "\"rowblock32.vector.split6\"");
    m["expert_quant"]["index_layout"] = "rowblock32.vector.split6";
    m["expert_quant"]["index_bits"] = 8;
    refused(m, "expert_quant.index_bits is 8; this build reads only 6");
    m["expert_quant"]["index_bits"] = 6;
    m["expert_quant"]["row_block"] = 16;
    refused(m, "expert_quant.row_block is 16; this build reads only 32");
  }
  SUBCASE("no MoE layers") {
    m["moe_layers"] = json::array();
    refused(m, "moe_layers is empty");
  }
}

TEST_CASE("bad JSON types are refused with a message naming the field") {
  json m = valid_manifest();
  SUBCASE("experts as a string") {
    m["moe_layers"][0]["experts"] = "5";
    refused(m, "moe_layers[0].experts must be a non-negative integer, found string \"5\"");
  }
  SUBCASE("negative experts") {
    m["moe_layers"][0]["experts"] = -5;
    refused(m, "moe_layers[0].experts is -5, a negative number");
  }
  SUBCASE("fractional stride") {
    m["moe_layers"][0]["record_stride"] = 4096.5;
    refused(m, "moe_layers[0].record_stride must be a non-negative integer, found number 4096.5");
  }
  SUBCASE("config as an array") {
    m["config"] = json::array();
    refused(m, "config must be an object, found array");
  }
  SUBCASE("moe_layers as an object") {
    m["moe_layers"] = json::object();
    refused(m, "moe_layers must be an array, found object");
  }
  SUBCASE("a moe_layers entry that is a number") {
    m["moe_layers"][1] = 7;
    refused(m, "moe_layers[1] must be an object, found number");
  }
  SUBCASE("chat template as a number") {
    m["tokenizer"]["chat_template"] = 3;
    refused(m, "tokenizer.chat_template must be a string, found number");
  }
  SUBCASE("tensor shape as a string") {
    m["trunk"]["tensors"][0]["shape"] = "64x32";
    refused(m, "shape must be an array, found string");
  }
}

// Replaces every scalar in the manifest, one at a time, with each hostile
// value; the parser must answer with Error or accept, and never anything else.
TEST_CASE("hostile values anywhere give an Error, never a crash") {
  const json valid = valid_manifest();
  const std::vector<json> hostile = {
      json(0),       json(-1),      json(UINT64_MAX), json(1e300), json("x"),
      json(nullptr), json::array(), json::object(),   json(true),  json(uint64_t{1} << 32),
      json(4096)};
  std::function<void(const json::json_pointer&, const json&)> visit;
  int cases = 0;
  visit = [&](const json::json_pointer& where, const json& node) {
    if (node.is_structured()) {
      if (node.is_object()) {
        for (auto it = node.begin(); it != node.end(); ++it) visit(where / it.key(), it.value());
      } else {
        for (size_t i = 0; i < node.size(); ++i) visit(where / i, node[i]);
      }
      if (where.empty() || where.to_string().starts_with("/config/")) return;
    }
    for (const json& value : hostile) {
      json m = valid;
      m[where] = value;
      ++cases;
      try {
        parse(m);
      } catch (const Error&) {
      } catch (const std::exception& e) {
        FAIL("replacing ", where.to_string(), " with ", value.dump(),
             " threw a non-sluice exception: ", e.what());
      }
    }
  };
  visit(json::json_pointer(), valid);
  CHECK(cases > 500);
  const std::string text = valid.dump();
  for (size_t cut = 0; cut < text.size(); cut += 7) {
    CHECK_THROWS_AS(parse_manifest(text.substr(0, cut), "M"), Error);
  }
}

}  // namespace
}  // namespace sluice
