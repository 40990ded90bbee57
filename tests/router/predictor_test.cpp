// tests/router/predictor_test.cpp: the router's predictor, loaded from a real
// (tiny) container, ranks experts exactly as the model's router does when it
// is given the same input (softmax and sigmoid grouped routers); bad inputs.
#include <doctest/doctest.h>

#include "compute/model/engine.h"
#include "proto/error.h"
#include "router/predictor.h"
#include "tests/ctl/tiny_container.h"

using namespace sluice;

namespace {

// Runs a short generation and checks every guess made from the real MoE
// input against the routing the model chose.
void check_guesses_equal_routing(const std::string& model) {
  EngineOptions options;
  options.threads = 1;
  options.prefill_chunk = 4;
  Engine engine(model, options);
  const router::Predictor predictor(engine.container());
  REQUIRE(predictor.hidden() == engine.config().hidden);
  REQUIRE(predictor.top_k() == engine.config().top_k);

  struct Seen {
    uint32_t layer;
    std::vector<float> input;
    std::vector<uint32_t> real;
  };
  std::vector<Seen> seen;
  const uint32_t hidden = engine.config().hidden;
  engine.transformer().set_moe_hook([&](uint32_t layer, size_t moe_index, uint32_t tokens, std::span<const float> input) {
    for (uint32_t t = 0; t < tokens; ++t) {
      seen.push_back({layer, std::vector<float>(input.begin() + size_t{t} * hidden, input.begin() + size_t{t + 1} * hidden),
                      engine.transformer().last_routing()[t][moe_index].experts});
    }
  });
  std::vector<int32_t> prompt;
  for (int32_t i = 0; i < 9; ++i) prompt.push_back((i * 37 + 5) % static_cast<int32_t>(engine.config().vocab));
  SamplingParams greedy;
  greedy.temperature = 0;
  engine.generate(prompt, 4, greedy, {}, true, [](int32_t, std::span<const float>) { return true; });
  engine.transformer().set_moe_hook(nullptr);

  REQUIRE(seen.size() >= 12 * engine.container().moe_layers().size());
  const uint32_t k = engine.config().top_k;
  size_t mismatches = 0;
  for (const Seen& s : seen) {
    const auto guess = predictor.predict(s.layer, s.input, k);
    if (guess != s.real) ++mismatches;
    // A wider guess starts with the same experts.
    const auto wider = predictor.predict(s.layer, s.input, k + 2);
    CHECK(std::equal(s.real.begin(), s.real.end(), wider.begin()));
  }
  CHECK(mismatches == 0);
}

}  // namespace

TEST_CASE("the predictor's top-K equals the real router's top-K on the real input: softmax routing") {
  check_guesses_equal_routing(testing::tiny_container());
}

TEST_CASE("the predictor's top-K equals the real router's top-K: sigmoid routing with bias and groups") {
  check_guesses_equal_routing(testing::make_tiny_container("deepseek", {"--seed", "3"}, "deepseek_v3"));
}

TEST_CASE("layers without a router and inputs of the wrong size are refused") {
  const std::string& model = testing::tiny_container();
  const Container container = Container::open(model);
  const router::Predictor predictor(container);
  const uint32_t first = container.moe_layers().front().layer;
  CHECK_THROWS_AS(predictor.predict(first, std::vector<float>(predictor.hidden() + 1), 2), Error);
  CHECK_THROWS_AS(predictor.predict(container.layer_count(), std::vector<float>(predictor.hidden()), 2), Error);
  const auto next = predictor.next_moe_layer(first);
  if (container.moe_layers().size() > 1) {
    REQUIRE(next.has_value());
    CHECK(*next == container.moe_layers()[1].layer);
  }
  CHECK_FALSE(predictor.next_moe_layer(container.moe_layers().back().layer).has_value());
}
