// tests/compute/model/never_sampled_test.cpp: the engine's never-sampled
// ids (Engine::set_tokenizer_ids): the ids past the tokenizer are listed
// once, and generate() never returns one of them, greedy or sampled.
#include <doctest/doctest.h>

#include <algorithm>
#include <vector>

#include "compute/model/engine.h"
#include "tests/compute/model/tiny_models.h"

using namespace sluice;
using namespace sluice::testing;

namespace {

std::vector<int32_t> generated(Engine& engine, float temperature) {
  SamplingParams sampling;
  sampling.temperature = temperature;
  sampling.seed = 7;
  const std::vector<int32_t> prompt = {5, 88, 301};
  std::vector<int32_t> tokens;
  engine.generate(prompt, 12, sampling, {}, true, [&](int32_t token, std::span<const float>) {
    tokens.push_back(token);
    return true;
  });
  return tokens;
}

}  // namespace

TEST_CASE("ids past the tokenizer are never sampled, and are listed once") {
  const std::string& model = tiny_model("olmoe");
  Engine unrestricted(model, small_options());
  const std::vector<int32_t> free_tokens = generated(unrestricted, 0.0f);
  // Without the ban the tiny model's greedy reply uses ids above 3; the test
  // would prove nothing otherwise.
  REQUIRE(std::any_of(free_tokens.begin(), free_tokens.end(), [](int32_t t) { return t >= 3; }));
  CHECK(unrestricted.never_sampled().empty());

  Engine engine(model, small_options());
  engine.set_tokenizer_ids(3);
  const std::span<const int32_t> banned = engine.never_sampled();
  REQUIRE(banned.size() == engine.config().vocab - 3);
  CHECK(banned.front() == 3);
  CHECK(banned.back() == static_cast<int32_t>(engine.config().vocab - 1));
  for (float temperature : {0.0f, 1.0f}) {
    CAPTURE(temperature);
    engine.sequence().reset();
    const std::vector<int32_t> tokens = generated(engine, temperature);
    REQUIRE(tokens.size() == 12);
    for (int32_t token : tokens) CHECK(token < 3);
  }
}
