// tests/router/bench_decode_test.cpp: `sluice bench decode --compare-lookahead`
// runs every arm the asked number of rounds on the same tokens, the arm with
// lookahead off never prefetches while the others do, only the held arm of
// --compare-hold holds records, a routing trace replaces
// the model's router in the cache's accesses, and nonsense is refused.
// It measures nothing here: speed belongs to the benchmark, not to tests.
#include <doctest/doctest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "proto/container.h"
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
  static const std::string path = testing::make_tiny_container("four", {"--set", "num_hidden_layers=4"});
  return path;
}

TEST_CASE("bench decode compares lookahead off and on over interleaved rounds") {
  const std::string& model = four_layer_container();
  // The floor of the bench's one thread: the minimum cache.
  const nlohmann::json plan =
      run_json({testing::sluice_bin(), "plan", model, "--threads", "1", "--json"});
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
    // Where a token's time went: every part is reported; this model has
    // attention layers, routed experts and an LM head but no KDA layer and
    // no shared expert.
    const auto& parts = median.at("decode_seconds_per_token");
    for (const char* part : {"embedding", "kda", "attention", "routed_experts", "shared_experts", "waiting_on_reads",
                             "dense_ffn", "lm_head", "other"}) {
      CHECK(parts.at(part).get<double>() >= 0.0);
    }
    CHECK(parts.at("kda").get<double>() == 0.0);
    CHECK(parts.at("shared_experts").get<double>() == 0.0);
    CHECK(parts.at("attention").get<double>() > 0.0);
    CHECK(parts.at("routed_experts").get<double>() > 0.0);
    CHECK(parts.at("embedding").get<double>() > 0.0);
    CHECK(parts.at("lm_head").get<double>() > 0.0);
  }
  CHECK(arms[0].at("median").at("decode_speedup_vs_first_arm").get<double>() == 1.0);
}

TEST_CASE("bench decode --compare-hold runs the next batch not held and held on the same tokens") {
  const std::string& model = four_layer_container();
  // A cache of every expert: after the prompt, each guess is cached and held at once.
  const nlohmann::json out =
      run_json({testing::sluice_bin(), "bench", "decode", model, "--budget", "4G", "--compare-hold", "--lookahead",
                "0", "--repeat", "2", "-n", "6", "--prompt-tokens", "8", "--temp", "0.8", "--seed", "3",
                "--threads", "1", "--disk-seconds", "0.2", "--json"});
  const auto& arms = out.at("arms");
  REQUIRE(arms.size() == 2);
  CHECK(arms[0].at("hold").get<uint32_t>() == 0);
  CHECK(arms[1].at("hold").get<uint32_t>() == Container::open(model).top_k());
  for (size_t a = 0; a < arms.size(); ++a) {
    for (const auto& run : arms[a].at("runs")) {
      const auto& decode = run.at("decode");
      const uint64_t held = decode.at("held").get<uint64_t>();
      CHECK((a == 0 ? held == 0 : held > 0));
      CHECK(decode.at("held_used").get<uint64_t>() <= held);
      CHECK(decode.at("held_reads").get<uint64_t>() <= held);
      CHECK(decode.at("prefetch_reads").get<uint64_t>() ==
            0);  // lookahead off: holds are no prefetches
      CHECK(decode.at("read_depth").get<uint64_t>() > 0);
    }
  }
  std::string output;
  CHECK(testing::run_command({testing::sluice_bin(), "bench", "decode", model, "--budget", "4G", "--compare-hold",
                              "--compare-lookahead"},
                             &output) != 0);
  CHECK(output.find("pick one comparison") != std::string::npos);
}

TEST_CASE("bench decode --warm: with a cache of every expert the measured prefill reads nothing") {
  const std::string& model = four_layer_container();
  const auto prefill_bytes = [&](bool warm) {
    std::vector<std::string> argv = {testing::sluice_bin(), "bench", "decode", model, "--budget", "4G",
                                     "--lookahead", "0", "-n", "2", "--prompt-tokens", "8", "--threads", "1",
                                     "--disk-seconds", "0.1", "--json"};
    if (warm) argv.push_back("--warm");
    const nlohmann::json out = run_json(argv);
    CHECK(out.at("warm").get<bool>() == warm);
    return out.at("arms")[0].at("runs")[0].at("prefill").at("bytes_read").get<uint64_t>();
  };
  CHECK(prefill_bytes(false) > 0);  // a fresh cache: the prompt's experts are read
  CHECK(prefill_bytes(true) == 0);
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

TEST_CASE(
    "bench decode with a routing trace asks the cache for the trace's experts, and measures the "
    "machine") {
  const std::string& model = four_layer_container();
  const Container container = Container::open(model);
  // Every token routes each layer to its first top-k experts: after the first
  // decode token every request hits (the cache holds all of them), which the
  // model's own routing would not do.
  const std::string trace = testing::scratch_dir() + "/same-experts.jsonl";
  {
    std::ofstream out(trace);
    for (int t = 0; t < 4; ++t) {
      nlohmann::json layers = nlohmann::json::array();
      for (size_t l = 0; l < container.moe_layers().size(); ++l) {
        nlohmann::json ids = nlohmann::json::array();
        for (uint32_t e = 0; e < container.top_k(); ++e) ids.push_back(e);
        layers.push_back(ids);
      }
      out << nlohmann::json{{"tok", t}, {"layers", layers}}.dump() << '\n';
    }
  }
  const nlohmann::json out =
      run_json({testing::sluice_bin(), "bench", "decode", model, "--budget", "4G", "--routing", trace, "--lookahead",
                "0", "-n", "8", "--prompt-tokens", "4", "--threads", "1", "--disk-seconds", "0.2", "--json"});
  CHECK(out.at("routing").get<std::string>() == trace);
  CHECK(out.at("disk").at("o_direct_gbps").get<double>() > 0.0);
  CHECK(out.at("memory_gbps").get<double>() > 0.0);
  CHECK(out.at("queue_depth").get<uint32_t>() > 0);
  const auto& arm = out.at("arms").at(0);
  const auto& run = arm.at("runs").at(0).at("decode");
  const uint64_t per_token = uint64_t{container.top_k()} * container.moe_layers().size();
  // Only the first decode token can miss: at most its experts are read.
  CHECK(run.at("demand_reads").get<uint64_t>() <= per_token);
  CHECK(arm.at("hit_rate").get<double>() >= 7.0 / 8.0);
  const auto& rate = arm.at("decode_tok_per_s");
  CHECK(rate.at("min").get<double>() <= rate.at("median").get<double>());
  CHECK(rate.at("median").get<double>() <= rate.at("max").get<double>());
  CHECK(arm.at("io_bound_ratio").get<double>() > 0.0);
  CHECK(arm.at("read_wait_share").get<double>() >= 0.0);
  // The disk figure of the ratio is taken at the depth the worker kept while it read.
  const auto& bound = arm.at("io_bound");
  CHECK(bound.at("disk_threads").get<uint32_t>() >= 1);
  CHECK(bound.at("o_direct_gbps_at_depth").get<double>() > 0.0);
  // Busy time never exceeds the reads' summed latency, so the mean depth is at least one.
  if (run.at("demand_reads").get<uint64_t>() > 0) CHECK(run.at("read_depth_mean").get<double>() >= 0.99);
}

TEST_CASE(
    "bench decode refuses replaced routing with lookahead, and routing that does not fit the "
    "model") {
  const std::string& model = four_layer_container();
  std::string output;
  CHECK(testing::run_command(
            {testing::sluice_bin(), "bench", "decode", model, "--budget", "4G", "--routing", "synthetic:2"}, &output) !=
        0);
  CHECK(output.find("--lookahead 0") != std::string::npos);
  const std::string trace = testing::scratch_dir() + "/wrong-layers.jsonl";
  std::ofstream(trace) << "{\"tok\": 0, \"layers\": [[0, 1]]}\n";
  CHECK(testing::run_command(
            {testing::sluice_bin(), "bench", "decode", model, "--budget", "4G", "--routing", trace, "--lookahead", "0"},
            &output) != 0);
  CHECK(output.find("MoE layers per token") != std::string::npos);
  // One reading of --routing serves decode and replay: a seed that is not
  // digits, or a colon with no seed, is an argument error in both.
  CHECK(testing::run_command({testing::sluice_bin(), "bench", "decode", model, "--budget", "4G", "--routing",
                              "synthetic:x1", "--lookahead", "0"},
                             &output) == 2);
  CHECK(output.find("'synthetic:x1' is not synthetic, synthetic:SEED or a trace file") != std::string::npos);
  CHECK(testing::run_command(
            {testing::sluice_bin(), "bench", "replay", "--geometry", "2,8,2", "--routing", "synthetic:"}, &output) ==
        2);
  CHECK(output.find("'synthetic:' is not synthetic, synthetic:SEED or a trace file") != std::string::npos);
}
