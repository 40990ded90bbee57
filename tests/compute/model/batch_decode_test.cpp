// tests/compute/model/batch_decode_test.cpp: several sequences decoded in
// one step (Transformer::forward_batch, Engine::step): with every expert
// through tables, and with every expert decoding its weights once, each
// sequence's greedy tokens and logits are bit-identical to that sequence
// decoded alone, for OLMoE (GQA) and Kimi-Linear (KDA + MLA); each MoE layer
// requests the union of the step's experts once; misuse is refused. (Between
// the two paths the logits differ by the tables' int8 rounding, rvq.h.)
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "compute/kernels/rvq_crossover.h"
#include "compute/model/engine.h"
#include "proto/error.h"
#include "tests/compute/model/tiny_models.h"
#include "tests/proto/container_fixture.h"
#include "tests/proto/pinned_environment.h"

using namespace sluice;
using namespace sluice::testing;

namespace {

const std::vector<std::vector<int32_t>> kPrompts = {
    {5, 88, 301},
    {12, 7, 260, 44, 3, 91, 150},
    {400, 2, 33, 17, 210, 9, 71, 5, 120, 66, 8, 250},
};
constexpr int kSteps = 6;

struct Decoded {
  std::vector<int32_t> tokens;
  std::vector<float> rows;  // the logits after the prompt, then after each step
};

// Each prompt on its own engine: the reference.
std::vector<Decoded> decode_alone(const std::string& model) {
  std::vector<Decoded> out;
  for (const auto& prompt : kPrompts) {
    Engine engine(model, small_options());
    Decoded d;
    continue_greedy(engine, engine.sequence(), prompt, kSteps, d.rows);
    const size_t vocab = engine.config().vocab;
    for (int i = 0; i < kSteps; ++i) {
      d.tokens.push_back(
          greedy_token(std::span<const float>(d.rows).subspan(size_t(i) * vocab, vocab)));
    }
    out.push_back(std::move(d));
  }
  return out;
}

void check_batched_equals_alone(const std::string& model) {
  const std::vector<Decoded> alone = decode_alone(model);
  Engine engine(model, small_options());
  const size_t vocab = engine.config().vocab;
  std::vector<SequenceState> states;
  std::vector<Decoded> batched(kPrompts.size());
  std::vector<float> logits(kPrompts.size() * vocab);
  for (size_t i = 0; i < kPrompts.size(); ++i) {
    states.push_back(engine.new_sequence());
    std::vector<float> row(vocab);
    REQUIRE(engine.prefill(states[i], kPrompts[i], row));
    std::copy(row.begin(), row.end(), logits.begin() + static_cast<std::ptrdiff_t>(i * vocab));
    batched[i].rows = row;
  }
  std::vector<SequenceState*> sequences;
  for (SequenceState& s : states) sequences.push_back(&s);
  for (int step = 0; step < kSteps; ++step) {
    std::vector<int32_t> tokens;
    for (size_t i = 0; i < kPrompts.size(); ++i) {
      tokens.push_back(greedy_token(std::span<const float>(logits).subspan(i * vocab, vocab)));
      batched[i].tokens.push_back(tokens.back());
    }
    const uint64_t requests_before = engine.experts().stats().requests;
    engine.step(sequences, tokens, logits);
    // Each MoE layer asked for the union of the three tokens' experts, once.
    uint64_t union_sizes = 0;
    const auto& routing = engine.transformer().last_routing();
    REQUIRE(routing.size() == kPrompts.size());
    for (size_t layer = 0; layer < routing[0].size(); ++layer) {
      std::set<uint32_t> chosen;
      for (const auto& token : routing)
        chosen.insert(token[layer].experts.begin(), token[layer].experts.end());
      union_sizes += chosen.size();
    }
    CHECK(engine.experts().stats().requests - requests_before == union_sizes);
    for (size_t i = 0; i < kPrompts.size(); ++i) {
      batched[i].rows.insert(batched[i].rows.end(),
                             logits.begin() + static_cast<std::ptrdiff_t>(i * vocab),
                             logits.begin() + static_cast<std::ptrdiff_t>((i + 1) * vocab));
    }
  }
  for (size_t i = 0; i < kPrompts.size(); ++i) {
    CAPTURE(i);
    CHECK(batched[i].tokens == alone[i].tokens);
    CHECK(bit_identical(batched[i].rows, alone[i].rows));
    CHECK(states[i].position() == kPrompts[i].size() + kSteps);
  }
  // The engine's default sequence took no part.
  CHECK(engine.sequence().position() == 0);
}

}  // namespace

TEST_CASE("three OLMoE sequences decoded together are each bit-identical to decoding alone") {
  const PinnedEnvironment tables_for_every_token("SLUICE_RVQ_CROSSOVER", std::to_string(kernels::kRvqCrossoverMax));
  check_batched_equals_alone(tiny_model("olmoe"));
}

TEST_CASE("three Kimi-Linear sequences decoded together are each bit-identical to decoding alone") {
  const PinnedEnvironment tables_for_every_token("SLUICE_RVQ_CROSSOVER", std::to_string(kernels::kRvqCrossoverMax));
  check_batched_equals_alone(tiny_model("kimi_linear"));
}

TEST_CASE("with every expert decoding its weights once, decoding together is bit-identical too") {
  // Below kRvqInt8TilesFrom tokens an expert's decoded arithmetic does not
  // depend on how many tokens share it, and three sequences stay below.
  const PinnedEnvironment decode_once_always("SLUICE_RVQ_CROSSOVER", "1");
  check_batched_equals_alone(tiny_model("olmoe"));
  check_batched_equals_alone(tiny_model("kimi_linear"));
}

TEST_CASE(
    "a batched step refuses a sequence given twice, a token count that does not match, a full "
    "context") {
  Engine engine(tiny_model("olmoe"), small_options(8));
  SequenceState a = engine.new_sequence(), b = engine.new_sequence();
  std::vector<float> logits(2 * engine.config().vocab);
  const std::vector<int32_t> two = {1, 2};
  std::vector<SequenceState*> twice = {&a, &a};
  SLUICE_CHECK_ERROR_CONTAINS(engine.step(twice, two, logits), "sequence 1 is also sequence 0");
  std::vector<SequenceState*> pair = {&a, &b};
  SLUICE_CHECK_ERROR_CONTAINS(engine.step(pair, std::vector<int32_t>{1}, logits),
                              "1 tokens for 2 sequences");
  std::vector<float> row(engine.config().vocab);
  REQUIRE(engine.prefill(b, std::vector<int32_t>(8, 3), row));
  SLUICE_CHECK_ERROR_CONTAINS(engine.step(pair, two, logits), "context full");
  CHECK(a.position() == 0);
  CHECK(b.position() == 8);
}
