// tests/ctl/cmd_plan_test.cpp: `sluice plan` on the tiny container. The
// expected floor is computed here from the manifest and config.json with
// design.md's formula, not by calling the plan code.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/ctl/tiny_container.h"

using nlohmann::json;
using namespace sluice::testing;

namespace {

json read_manifest() { return json::parse(read_text(tiny_container() + "/manifest.json")); }

// trunk + codebooks (less the embedding) + KV + scratch + 2 × top-k slots, for `ctx` and
// `threads`; the plan
// adds the cache segment's own tables (checked against the worker in
// memory_plan_test).
uint64_t expected_floor(const json& manifest, uint64_t ctx, uint64_t tables, uint64_t threads = 1) {
  const json& config = manifest["config"];
  const uint64_t layers = config["num_hidden_layers"], heads = config["num_attention_heads"];
  const uint64_t kv_heads = config["num_key_value_heads"], hidden = config["hidden_size"];
  const uint64_t head_dim = hidden / heads, experts = config["num_experts"], top_k = config["num_experts_per_tok"];
  const uint64_t width = config["intermediate_size"], vocab = config["vocab_size"];
  uint64_t stride = 0;
  for (const auto& layer : manifest["moe_layers"]) stride = std::max<uint64_t>(stride, layer["record_stride"]);
  // The untied embedding stays on disk; its loader keeps a crc32 per row.
  uint64_t embedding = 0;
  for (const auto& tensor : manifest["trunk"]["tensors"]) {
    if (tensor["name"] == "model.embed_tokens.weight")
      embedding = uint64_t{tensor["bytes"]} + uint64_t{tensor["scale_bytes"]};
  }
  REQUIRE(embedding > 0);
  const uint64_t resident =
      uint64_t{manifest["trunk"]["bytes"]} + uint64_t{manifest["codebooks"]["bytes"]} - embedding + vocab * 4;
  const uint64_t kv = layers * ctx * kv_heads * head_dim * 2 * 4;
  const uint64_t rows = 64;
  // Per row: x, normed, proj, top-k expert outputs, routed, table input, the
  // attention's q (twice), k and v; each row's routing at each layer.
  const uint64_t row_floats =
      (3 + top_k + 2) * hidden + 2 * heads * head_dim + 2 * kv_heads * head_dim;
  const uint64_t routing = layers * (48 + 32 + 8 * top_k);
  const uint64_t widest = std::max(hidden, width);
  const uint64_t int8 = rows * widest + rows * (widest / 32) * 4;
  // int16 codes per 4 columns × 2 stages × 64 entries, an f32 scale per 128 columns
  const auto table = [](uint64_t cols) { return cols / 4 * 2 * 64 * 2 + (cols + 127) / 128 * 4; };
  const auto tile = [](uint64_t cols) {
    return std::clamp<uint64_t>((uint64_t{256} << 10) / (cols * 4) / 32 * 32, 32, 64) * cols * 4;
  };
  const uint64_t shared = (rows * row_floats + experts) * 4 + rows * routing + int8 +
                          2 * rows * table(hidden);
  // The int8 tiles' inputs: whole 128-column groups of bytes and a scale each.
  const uint64_t tile_inputs = rows * ((std::max(hidden, width) + 127) / 128) * (128 + 4);
  // Each thread's attention: a pass's scores (heads × ctx at most), and one kv
  // head's group of queries and outputs for every row, and their counts.
  const uint64_t group = heads / kv_heads;
  const uint64_t attention = (heads * ctx + rows * (2 * group * head_dim + group)) * 4;
  const uint64_t per_thread = rows * (2 * hidden + 3 * width) * 4 + rows * 4 + 64 * table(width) +
                              std::max(tile(hidden), tile(width)) + tile_inputs + attention;
  const uint64_t scratch = shared + threads * per_thread + (rows + 1) * vocab * 4;
  const uint64_t process = (uint64_t{8} << 20) + vocab * 224;  // program and libraries, the tokenizer by vocabulary entry
  return resident + kv + scratch + process + 2 * top_k * stride + tables;
}

}  // namespace

TEST_CASE("sluice plan --json: the floor and working set from the formula") {
  const json manifest = read_manifest();
  std::string output;
  REQUIRE(run_command({sluice_bin(), "plan", tiny_container(), "--ctx", "128", "--threads",
                       "1", "--json"},
                      &output) == 0);
  const json plan = json::parse(output);
  const uint64_t tables = plan["cache_tables_bytes"].get<uint64_t>();
  CHECK(tables > 0);
  CHECK(tables < 4 * 1024 * 1024);  // header, stats, 16 clients, index, rings, mailbox of a tiny model
  CHECK(plan["floor_bytes"].get<uint64_t>() == expected_floor(manifest, 128, tables));
  std::string two_threads;
  REQUIRE(run_command({sluice_bin(), "plan", tiny_container(), "--ctx", "128", "--threads",
                       "2", "--json"},
                      &two_threads) == 0);
  CHECK(json::parse(two_threads)["floor_bytes"].get<uint64_t>() ==
        expected_floor(manifest, 128, tables, 2));
  // serve --parallel 3: three sequences and three saved prompt states, three logits rows more,
  // and lookahead mailboxes of three rows (one per sequence of a step) for each of 16 clients.
  std::string served;
  REQUIRE(run_command({sluice_bin(), "plan", tiny_container(), "--ctx", "128", "--threads",
                       "1", "--parallel", "3", "--json"},
                      &served) == 0);
  const uint64_t layers = manifest["config"]["num_hidden_layers"],
                 hidden = manifest["config"]["hidden_size"];
  const uint64_t heads = manifest["config"]["num_attention_heads"];
  const uint64_t state =
      layers * 128 * uint64_t{manifest["config"]["num_key_value_heads"]} * (hidden / heads) * 2 * 4;
  const uint64_t served_tables = json::parse(served)["cache_tables_bytes"].get<uint64_t>();
  const uint64_t mailbox_row = (hidden + uint64_t{manifest["config"]["num_experts_per_tok"]}) * 4;
  // Each mailbox is padded to 64 bytes, the tables to a page.
  CHECK(served_tables + 16 * 64 >= tables + 16 * 2 * mailbox_row);
  CHECK(served_tables <= tables + 16 * 2 * mailbox_row + 16 * 64 + 4096);
  CHECK(json::parse(served)["floor_bytes"].get<uint64_t>() ==
        expected_floor(manifest, 128, served_tables) + 5 * state +
            2 * uint64_t{manifest["config"]["vocab_size"]} * 4);

  uint64_t stride = 0;
  for (const auto& layer : manifest["moe_layers"]) stride = std::max<uint64_t>(stride, layer["record_stride"]);
  const uint64_t top_k = manifest["config"]["num_experts_per_tok"];
  CHECK(plan["working_set_bytes"].get<uint64_t>() == top_k * manifest["moe_layers"].size() * stride);
  CHECK(plan["usable_bytes"].get<uint64_t>() <= plan["physical_bytes"].get<uint64_t>());
  // The tiny model fits many times over on any test machine: every expert gets a slot, and no slot
  // is spare.
  uint64_t records = 0;
  for (const auto& layer : manifest["moe_layers"]) records += layer["experts"].get<uint64_t>();
  CHECK(plan["all_experts"].get<bool>());
  CHECK(plan["cache_slots"].get<uint64_t>() == records);
  CHECK(plan["cache_bytes"].get<uint64_t>() >= records * stride);
  CHECK(plan["budget_bytes"].get<uint64_t>() == expected_floor(manifest, 128, tables) -
                                                    2 * top_k * stride - tables +
                                                    plan["cache_bytes"].get<uint64_t>());
}

TEST_CASE(
    "sluice plan --budget above the usable memory: refused with the plan, taken with --force") {
  std::string output;
  CHECK(run_command({sluice_bin(), "plan", tiny_container(), "--budget", "1000T"},
                    &output) == 1);
  CHECK(output.find("sluice: error: --budget 1000.00 TiB is above the usable memory") !=
        std::string::npos);
  CHECK(output.find("working set") != std::string::npos);
  REQUIRE(run_command({sluice_bin(), "plan", tiny_container(), "--budget", "1000T",
                       "--force", "--json"},
                      &output) == 0);
  const json plan = json::parse(output);
  CHECK(plan["forced"].get<bool>());
  // The cache stays the container's size whatever the budget.
  CHECK(plan["all_experts"].get<bool>());
  CHECK(plan["cache_bytes"].get<uint64_t>() < 64 * 1024 * 1024);
}

TEST_CASE("sluice plan --budget: used as given; under the floor refused with the plan") {
  const json manifest = read_manifest();
  // Without --ctx the plan sizes for the model's own context, at most 4096.
  const uint64_t ctx = std::min<uint64_t>(manifest["config"]["max_position_embeddings"].get<uint64_t>(), 4096);
  std::string output;
  REQUIRE(run_command({sluice_bin(), "plan", tiny_container(), "--threads", "1", "--json"},
                      &output) == 0);
  const uint64_t floor = expected_floor(manifest, ctx, json::parse(output)["cache_tables_bytes"].get<uint64_t>());
  REQUIRE(run_command({sluice_bin(), "plan", tiny_container(), "--threads", "1", "--budget",
                       std::to_string(floor + 4096), "--json"},
                      &output) == 0);
  const json plan = json::parse(output);
  CHECK(plan["budget_given"].get<bool>());
  CHECK(plan["budget_bytes"].get<uint64_t>() == floor + 4096);

  CHECK(run_command({sluice_bin(), "plan", tiny_container(), "--threads", "1", "--budget",
                     std::to_string(floor - 1)},
                    &output) == 1);
  CHECK(output.find("sluice: error: --budget") != std::string::npos);
  CHECK(output.find("under the floor") != std::string::npos);
  CHECK(output.find("kv cache") != std::string::npos);

  CHECK(run_command({sluice_bin(), "plan", tiny_container(), "--budget", "3Q"}, &output) ==
        2);
  CHECK(output.find("sluice: error: --budget: bad size '3Q'") != std::string::npos);
}

TEST_CASE("sluice plan without --json prints the parts for people") {
  std::string output;
  REQUIRE(run_command({sluice_bin(), "plan", tiny_container()}, &output) == 0);
  for (const char* part : {"trunk + codebooks", "kv cache", "scratch", "minimum cache", "floor", "working set",
                           "usable memory", "budget", "cache"}) {
    CAPTURE(part);
    CHECK(output.find(part) != std::string::npos);
  }
}

TEST_CASE("sluice plan shows what a 32, 64 and 128 GiB machine gets, as --ram would plan each") {
  std::string output;
  REQUIRE(run_command({sluice_bin(), "plan", tiny_container(), "--json"}, &output) == 0);
  const json plan = json::parse(output);
  const json& machines = plan["machines"];
  REQUIRE(machines.size() == 3);
  const uint64_t working_set = plan["working_set_bytes"];
  for (size_t i = 0; i < machines.size(); ++i) {
    const json& m = machines[i];
    const uint64_t ram = m["ram_bytes"];
    CHECK(ram == (uint64_t{32} << (30 + i)));
    std::string alone;
    REQUIRE(run_command({sluice_bin(), "plan", tiny_container(), "--ram", std::to_string(ram), "--json"},
                        &alone) == 0);
    const json with_ram = json::parse(alone);
    CHECK(m["budget_bytes"] == with_ram["budget_bytes"]);
    CHECK(m["cache_bytes"] == with_ram["cache_bytes"]);
    CHECK(m["fits"].get<bool>());
    CHECK(m["budget_bytes"].get<uint64_t>() <= ram / 8 * 7);
    CHECK(m["cache_working_sets"].get<double>() ==
          doctest::Approx(double(m["cache_bytes"].get<uint64_t>()) / double(working_set)));
  }
  REQUIRE(run_command({sluice_bin(), "plan", tiny_container()}, &output) == 0);
  CHECK(output.find("on a machine of") != std::string::npos);
  CHECK(output.find("128 GiB  budget") != std::string::npos);
  CHECK(output.find("working sets") != std::string::npos);
}
