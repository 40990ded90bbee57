// tests/router/bench_decode_test.cpp: `sluice bench decode --compare-lookahead`
// runs every arm the asked number of rounds on the same tokens, the arm with
// lookahead off never prefetches while the others do, and nonsense is refused.
// It measures nothing here: speed belongs to the benchmark, not to tests.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "tests/ctl/tiny_container.h"

using namespace sluice;

namespace {

nlohmann::json run_json(const std::vector<std::string>& argv) {
  std::string output;
  const int status = testing::run_command(argv, &output);
  INFO(output);
  REQUIRE(status == 0);
  return nlohmann::json::parse(output.substr(output.find('{')));
}

}  // namespace

// Four MoE layers at the floor: a cache below one token's working set, where
// guesses may fill cold slots (the shared tiny container has only two layers).
const std::string& four_layer_container() {
  static const std::string path = testing::make_tiny_container_or_skip("four", {"--set", "num_hidden_layers=4"});
  return path;
}

TEST_CASE("bench decode compares lookahead off and on over interleaved rounds") {
  const std::string& model = four_layer_container();
  const nlohmann::json plan = run_json({testing::sluice_bin(), "plan", model, "--json"});
  const std::string budget = std::to_string(plan.at("floor_bytes").get<uint64_t>());
  const nlohmann::json out =
      run_json({testing::sluice_bin(), "bench", "decode", model, "--budget", budget, "--compare-lookahead",
                "--repeat", "2", "-n", "6", "--prompt-tokens", "8", "--temp", "0.8", "--seed", "3", "--threads", "1",
                "--json"});
  CHECK(out.at("repeat").get<uint32_t>() == 2);
  const auto& arms = out.at("arms");
  REQUIRE(arms.size() == 3);
  CHECK(arms[0].at("lookahead").get<uint32_t>() == 0);
  CHECK(arms[1].at("lookahead").get<uint32_t>() > 0);
  CHECK(arms[2].at("lookahead_in_prefill").get<bool>());
  for (size_t a = 0; a < arms.size(); ++a) {
    const auto& runs = arms[a].at("runs");
    REQUIRE(runs.size() == 2);
    uint64_t prefetched = 0;
    for (const auto& run : runs) {
      prefetched += run.at("decode").at("prefetch_reads").get<uint64_t>();
      CHECK(run.at("decode").at("demand_hit_rate").get<double>() >= 0.0);
    }
    if (a == 0) {
      CHECK(prefetched == 0);
    } else {
      CHECK(prefetched > 0);
    }
    const auto& median = arms[a].at("median");
    CHECK(median.at("decode_tok_per_s").get<double>() > 0.0);
    CHECK(median.at("bytes_read_per_token").get<double>() > 0.0);
  }
  CHECK(arms[0].at("median").at("decode_speedup_vs_first_arm").get<double>() == 1.0);
}

TEST_CASE("bench decode refuses zero rounds and a budget under the floor") {
  const std::string& model = four_layer_container();
  std::string output;
  CHECK(testing::run_command({testing::sluice_bin(), "bench", "decode", model, "--budget", "1G", "--repeat", "0"},
                             &output) != 0);
  CHECK(output.find("--repeat 0") != std::string::npos);
  CHECK(testing::run_command({testing::sluice_bin(), "bench", "decode", model, "--budget", "1M"}, &output) != 0);
  CHECK(output.find("floor") != std::string::npos);
}
