// tests/router/run_trace_out_test.cpp: `sluice run --trace-out` writes one
// JSON line per token run through the model, {"tok": N, "layers": [...],
// "weights": [...]}, with the routing the model actually used (recorded here in-process through the
// MoE hook of an identical greedy run).
#include <doctest/doctest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "compute/model/engine.h"
#include "tests/ctl/tiny_container.h"

using namespace sluice;

TEST_CASE("sluice run --trace-out records the real routing of every token") {
  const std::string& model = testing::tiny_container();
  const std::string trace = testing::scratch_dir() + "/trace.jsonl";
  std::string output;
  const int status = testing::run_command({testing::sluice_bin(), "run", model, "--prompt-ids", "3,1,4,1,5", "-n", "4",
                                           "--temp", "0", "--ignore-eos", "--threads", "1", "--chunk", "2",
                                           "--trace-out", trace},
                                          &output);
  INFO(output);
  REQUIRE(status == 0);

  // The same run in-process: routing of every token, from the model's hook.
  EngineOptions options;
  options.threads = 1;
  options.prefill_chunk = 2;
  Engine engine(model, options);
  std::vector<std::vector<std::vector<uint32_t>>> expected;  // [token][moe layer]
  std::vector<std::vector<std::vector<float>>> expected_weights;
  engine.transformer().set_moe_hook([&](uint32_t, size_t moe_index, uint32_t tokens, std::span<const float>) {
    const uint32_t first = engine.transformer().last_positions()[0];
    for (uint32_t t = 0; t < tokens; ++t) {
      if (expected.size() <= first + t) expected.resize(first + t + 1), expected_weights.resize(first + t + 1);
      expected[first + t].push_back(engine.transformer().last_routing()[t][moe_index].experts);
      expected_weights[first + t].push_back(engine.transformer().last_routing()[t][moe_index].weights);
    }
  });
  SamplingParams greedy;
  greedy.temperature = 0;
  const std::vector<int32_t> prompt = {3, 1, 4, 1, 5};
  engine.generate(prompt, 4, greedy, {}, true, [](int32_t, std::span<const float>) { return true; });
  // 5 prompt tokens and 3 of the 4 generated ones went through the model.
  REQUIRE(expected.size() == 8);

  std::ifstream in(trace);
  std::string line;
  size_t n = 0;
  const size_t moe_layers = engine.container().moe_layers().size();
  while (std::getline(in, line)) {
    const nlohmann::json j = nlohmann::json::parse(line);
    REQUIRE(j.is_object());
    CHECK(j.size() == 3);
    CHECK(j.at("tok").get<uint64_t>() == n);
    const auto layers = j.at("layers").get<std::vector<std::vector<uint32_t>>>();
    REQUIRE(layers.size() == moe_layers);
    REQUIRE(n < expected.size());
    CHECK(layers == expected[n]);
    CHECK(j.at("weights").get<std::vector<std::vector<float>>>() == expected_weights[n]);
    for (const auto& ids : layers) CHECK(ids.size() == engine.config().top_k);
    ++n;
  }
  CHECK(n == expected.size());
}

TEST_CASE("an unwritable --trace-out is an error naming the file") {
  const std::string& model = testing::tiny_container();
  std::string output;
  const int status = testing::run_command(
      {testing::sluice_bin(), "run", model, "--prompt-ids", "1", "-n", "1", "--trace-out", "/nonexistent/dir/t.jsonl"},
      &output);
  CHECK(status == 1);
  CHECK(output.find("/nonexistent/dir/t.jsonl") != std::string::npos);
}
