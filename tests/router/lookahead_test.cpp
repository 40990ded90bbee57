// tests/router/lookahead_test.cpp: the router loop sends the predictor's guess
// for the next MoE layer and scores it against the real routing; and the
// model's output is bit-identical with lookahead off, on, and stopped
// mid-generation, on a cache smaller than the model.
#include <doctest/doctest.h>

#include <cstring>

#include "compute/model/cached_expert_source.h"
#include "compute/model/engine.h"
#include "router/engine_tap.h"
#include "router/lookahead.h"
#include "tests/ctl/tiny_container.h"

using namespace sluice;
using namespace sluice::router;

TEST_CASE("the router guesses the next MoE layer and scores the guess when its real routing arrives") {
  const Container container = Container::open(testing::tiny_container_or_skip());
  REQUIRE(container.moe_layers().size() >= 2);
  const Predictor predictor(container);
  const uint32_t first = container.moe_layers()[0].layer, second = container.moe_layers()[1].layer;
  auto mailbox = Mailbox::in_process({predictor.hidden(), 1, predictor.top_k()}, container.identity());
  std::vector<std::pair<uint32_t, std::vector<uint32_t>>> sent;
  Lookahead lookahead(predictor, *mailbox, 3, [&](uint32_t layer, std::span<const uint32_t> experts) {
    sent.emplace_back(layer, std::vector<uint32_t>(experts.begin(), experts.end()));
  });
  CHECK_FALSE(lookahead.poll(std::chrono::milliseconds(0)));

  std::vector<float> hidden(predictor.hidden());
  for (size_t i = 0; i < hidden.size(); ++i) hidden[i] = std::sin(0.37f * static_cast<float>(i));
  std::vector<uint32_t> real_first_ids(predictor.top_k());
  for (uint32_t i = 0; i < predictor.top_k(); ++i) real_first_ids[i] = i;
  REQUIRE(mailbox->publish(1, first, 1, hidden, predictor.top_k(), real_first_ids));
  REQUIRE(lookahead.poll(std::chrono::milliseconds(100)));
  REQUIRE(sent.size() == 1);
  CHECK(sent[0].first == second);
  const auto expected = predictor.predict(second, hidden, 3);
  CHECK(sent[0].second == expected);

  // The real routing of `second` holds the rank-1 guess and one more of the
  // three; the rest are experts the guess missed.
  std::vector<uint32_t> real = {expected[0], expected[2]};
  for (uint32_t e = 0; real.size() < predictor.top_k(); ++e) {
    if (std::find(expected.begin(), expected.end(), e) == expected.end()) real.push_back(e);
  }
  REQUIRE(mailbox->publish(1, second, 1, hidden, predictor.top_k(), real));
  REQUIRE(lookahead.poll(std::chrono::milliseconds(100)));
  const auto accuracy = mailbox->accuracy();
  REQUIRE(accuracy.size() == 1);
  CHECK(accuracy[0].layer == second);
  CHECK(accuracy[0].scored == 1);
  CHECK(accuracy[0].rank1_hits == 1);
  CHECK(accuracy[0].recalled == 2);
  CHECK(accuracy[0].real == predictor.top_k());
  // A guess is scored only against the step it was made for.
  REQUIRE(mailbox->publish(2, second, 1, hidden, predictor.top_k(), real));
  REQUIRE(lookahead.poll(std::chrono::milliseconds(100)));
  CHECK(mailbox->accuracy()[0].scored == 1);
  CHECK(mailbox->router_counters().messages == 3);
}

namespace {

enum class Mode { kOff, kOn, kStopped };

struct Outcome {
  std::vector<int32_t> tokens;
  std::vector<float> logits;  // every row the sampler saw
  shm::StatsSnapshot cache;
  std::vector<LayerAccuracy> accuracy;
};

Outcome generate(Mode mode) {
  const std::string& model = testing::tiny_container_or_skip();
  CachedExpertSource* cached = nullptr;
  EngineOptions options;
  options.threads = 1;
  options.prefill_chunk = 4;
  options.expert_source = [&](const Container& container) {
    ioworker::WorkerOptions worker;
    worker.readers = 2;
    worker.quiet = true;
    // The smallest cache: most experts miss, so prefetches evict and compete.
    worker.cache_bytes = ioworker::min_cache_bytes(container, worker.max_clients);
    auto source = CachedExpertSource::embedded(container, worker);
    cached = source.get();
    return source;
  };
  Engine engine(model, options);
  const Predictor predictor(engine.container());
  auto mailbox = Mailbox::in_process({predictor.hidden(), 1, predictor.top_k()}, engine.container().identity());
  Publisher publisher(*mailbox, false);
  Lookahead lookahead(predictor, *mailbox, kDefaultLookahead, [&](uint32_t layer, std::span<const uint32_t> experts) {
    cached->worker()->prefetch(layer, experts, ioworker::PrefetchOrigin::kRouter);
  });
  EngineTap tap(engine.transformer(), static_cast<uint32_t>(engine.container().moe_layers().size()));
  if (mode != Mode::kOff) {
    tap.set_publisher(&publisher);
    lookahead.start();
  }
  std::vector<int32_t> prompt;
  for (int32_t i = 0; i < 7; ++i) prompt.push_back((i * 53 + 11) % static_cast<int32_t>(engine.config().vocab));
  SamplingParams sampling;
  sampling.temperature = 0.8f;
  sampling.seed = 1234;
  Outcome out;
  engine.generate(prompt, 16, sampling, {}, true, [&](int32_t token, std::span<const float> logits) {
    out.tokens.push_back(token);
    out.logits.insert(out.logits.end(), logits.begin(), logits.end());
    if (mode == Mode::kStopped && out.tokens.size() == 6) lookahead.stop();  // the router dies mid-generation
    return true;
  });
  lookahead.stop();
  out.cache = cached->cache_stats();
  out.accuracy = mailbox->accuracy();
  return out;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("output is bit-identical with lookahead off, on, and with the router stopped mid-generation") {
  const Outcome off = generate(Mode::kOff);
  const Outcome on = generate(Mode::kOn);
  const Outcome stopped = generate(Mode::kStopped);
  REQUIRE(off.tokens.size() == 16);
  CHECK(on.tokens == off.tokens);
  CHECK(stopped.tokens == off.tokens);
  CHECK(same_bits(on.logits, off.logits));
  CHECK(same_bits(stopped.logits, off.logits));
  // The comparison means something only if lookahead actually prefetched.
  CHECK(off.cache.prefetch_requests == 0);
  CHECK(on.cache.prefetch_requests > 0);
  CHECK(stopped.cache.prefetch_requests > 0);
  CHECK(stopped.cache.prefetch_requests < on.cache.prefetch_requests);
  REQUIRE_FALSE(on.accuracy.empty());
  for (const LayerAccuracy& a : on.accuracy) {
    CHECK(a.precision_at_1() >= 0.0);
    CHECK(a.precision_at_1() <= 1.0);
    CHECK(a.recalled <= a.real);
  }
  MESSAGE("lookahead on: ", on.cache.prefetch_reads, " prefetch reads, ", on.cache.hits, " hits, ", on.cache.misses,
          " misses; off: ", off.cache.hits, " hits, ", off.cache.misses, " misses");
}
