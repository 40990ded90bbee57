// tests/router/lookahead_test.cpp: the router loop sends the predictor's guess
// for the next MoE layers and scores the next one's against the real routing; and the
// model's output (OLMoE's and Kimi-Linear's) is bit-identical with lookahead
// off, on, and stopped mid-generation, on a cache smaller than the model.
#include <doctest/doctest.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "compute/model/cached_expert_source.h"
#include "compute/model/engine.h"
#include "compute/model/routing_tap.h"
#include "ioworker/worker.h"
#include "router/lookahead.h"
#include "shm/client.h"
#include "shm/mailbox.h"
#include "shm/stats.h"
#include "tests/ctl/tiny_container.h"
#include "tests/router/rank1_routing.h"

using namespace sluice;
using namespace sluice::router;

namespace {

// What a router sent: (layer, experts) per guess, in order.
using Sent = std::vector<std::pair<uint32_t, std::vector<uint32_t>>>;

PrefetchSink keep_in(Sent& sent) {
  return [&sent](uint32_t layer, std::span<const uint32_t> experts) {
    sent.emplace_back(layer, std::vector<uint32_t>(experts.begin(), experts.end()));
  };
}

}  // namespace

TEST_CASE("the router guesses the next MoE layer and scores the guess when its real routing arrives") {
  const Container container = Container::open(testing::tiny_container());
  REQUIRE(container.moe_layers().size() >= 2);
  const Predictor predictor(container);
  const uint32_t first = container.moe_layers()[0].layer, second = container.moe_layers()[1].layer;
  auto segment = shm::Segment::create_anonymous(
      ioworker::plan_cache_geometry(container, ioworker::min_cache_bytes(container, 2), 2), container.identity());
  shm::Mailbox mailbox(*segment, 0);
  const auto accuracy = [&] { return shm::read_stats(*segment).lookahead; };
  CHECK(accuracy().router_pid == 0);
  Sent sent;
  Lookahead lookahead(predictor, *segment, 3, keep_in(sent), 1);
  CHECK(accuracy().router_pid == ::getpid());
  CHECK(accuracy().k == 3);
  CHECK_FALSE(lookahead.poll(std::chrono::milliseconds(0)));

  std::vector<float> hidden(predictor.hidden());
  for (size_t i = 0; i < hidden.size(); ++i) hidden[i] = std::sin(0.37f * static_cast<float>(i));
  std::vector<uint32_t> real_first_ids(predictor.top_k());
  for (uint32_t i = 0; i < predictor.top_k(); ++i) real_first_ids[i] = i;
  REQUIRE(mailbox.publish(1, first, 1, hidden, predictor.top_k(), real_first_ids));
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
  REQUIRE(mailbox.publish(1, second, 1, hidden, predictor.top_k(), real));
  REQUIRE(lookahead.poll(std::chrono::milliseconds(100)));
  const auto scored = accuracy().layers;
  REQUIRE(scored.size() == 1);
  CHECK(scored[0].layer == second);
  CHECK(scored[0].scored == 1);
  CHECK(scored[0].rank1_hits == 1);
  CHECK(scored[0].recalled == 2);
  CHECK(scored[0].real == predictor.top_k());
  // A guess is scored only against the step it was made for.
  REQUIRE(mailbox.publish(2, second, 1, hidden, predictor.top_k(), real));
  REQUIRE(lookahead.poll(std::chrono::milliseconds(100)));
  CHECK(accuracy().layers[0].scored == 1);
  CHECK(accuracy().messages == 3);
}

TEST_CASE("two layers ahead: the next MoE layer and the one after are guessed, nearest first, the next scored") {
  const Container container =
      Container::open(testing::make_tiny_container("four", {"--set", "num_hidden_layers=4"}));
  REQUIRE(container.moe_layers().size() >= 3);
  const Predictor predictor(container);
  const uint32_t last = container.moe_layers().back().layer;
  std::vector<uint32_t> layers;  // the MoE layers in order
  for (const MoeLayerInfo& info : container.moe_layers()) layers.push_back(info.layer);
  auto segment = shm::Segment::create_anonymous(
      ioworker::plan_cache_geometry(container, ioworker::min_cache_bytes(container, 2), 2), container.identity());
  shm::Mailbox mailbox(*segment, 0);
  Sent sent;
  Lookahead lookahead(predictor, *segment, 3, keep_in(sent), 2);
  std::vector<float> hidden(predictor.hidden());
  for (size_t i = 0; i < hidden.size(); ++i) hidden[i] = std::cos(0.53f * static_cast<float>(i));
  std::vector<uint32_t> ids(predictor.top_k());
  for (uint32_t i = 0; i < predictor.top_k(); ++i) ids[i] = i;

  REQUIRE(mailbox.publish(1, layers[0], 1, hidden, predictor.top_k(), ids));
  REQUIRE(lookahead.poll(std::chrono::milliseconds(100)));
  REQUIRE(sent.size() == 2);
  CHECK(sent[0].first == layers[1]);
  CHECK(sent[0].second == predictor.predict(layers[1], hidden, 3));
  CHECK(sent[1].first == layers[2]);
  CHECK(sent[1].second == predictor.predict(layers[2], hidden, 3));
  CHECK(segment->client(0).lookahead_guesses == sent[0].second.size() + sent[1].second.size());

  // Only the next layer's guess is scored: its real routing holds the rank-1 guess.
  const std::vector<uint32_t> real = testing::routing_holding_rank1({sent[0].second}, predictor.top_k());
  REQUIRE(mailbox.publish(1, layers[1], 1, hidden, predictor.top_k(), real));
  REQUIRE(lookahead.poll(std::chrono::milliseconds(100)));
  auto scored = shm::read_stats(*segment).lookahead.layers;
  REQUIRE(scored.size() == 1);
  CHECK(scored[0].layer == layers[1]);
  CHECK(scored[0].rank1_hits == 1);

  // The guesses stop at the model's last MoE layer.
  sent.clear();
  REQUIRE(mailbox.publish(1, layers[layers.size() - 2], 1, hidden, predictor.top_k(), ids));
  REQUIRE(lookahead.poll(std::chrono::milliseconds(100)));
  REQUIRE(sent.size() == 1);
  CHECK(sent[0].first == last);
  CHECK_THROWS_WITH_AS(Lookahead(predictor, *segment, 3, [](uint32_t, std::span<const uint32_t>) {}, 0),
                       doctest::Contains("0 layers ahead"), Error);
}

TEST_CASE("SLUICE_LOOKAHEAD_LAYERS takes 1 to 8 layers, one when unset, and names itself otherwise") {
  ::unsetenv("SLUICE_LOOKAHEAD_LAYERS");
  CHECK(layers_ahead_from_environment() == kDefaultLayersAhead);
  ::setenv("SLUICE_LOOKAHEAD_LAYERS", "3", 1);
  CHECK(layers_ahead_from_environment() == 3);
  for (const char* bad : {"0", "9", "two", "-1"}) {
    CAPTURE(bad);
    ::setenv("SLUICE_LOOKAHEAD_LAYERS", bad, 1);
    CHECK_THROWS_WITH_AS(layers_ahead_from_environment(), doctest::Contains("SLUICE_LOOKAHEAD_LAYERS='"), Error);
  }
  ::unsetenv("SLUICE_LOOKAHEAD_LAYERS");
}

TEST_CASE("two attached clients publishing at once each get guesses, scored against their own routing") {
  const Container container = Container::open(testing::tiny_container());
  REQUIRE(container.moe_layers().size() >= 2);
  const Predictor predictor(container);
  const uint32_t first = container.moe_layers()[0].layer, second = container.moe_layers()[1].layer;
  ioworker::WorkerOptions options;
  options.instance = "lookahead-two-" + std::to_string(::getpid());
  options.quiet = true;
  options.max_clients = 4;
  options.cache_bytes = ioworker::min_cache_bytes(container, options.max_clients);
  ioworker::Worker worker(container, options);
  auto segment_a = shm::Segment::attach(worker.segment_name(), container.identity());
  auto segment_b = shm::Segment::attach(worker.segment_name(), container.identity());
  shm::Client client_a(*segment_a), client_b(*segment_b);
  REQUIRE(client_a.id() != client_b.id());
  Sent sent;
  Lookahead lookahead(predictor, worker.segment(), 3, keep_in(sent), 1);
  Publisher publisher_a(*segment_a, client_a.id(), false), publisher_b(*segment_b, client_b.id(), false);

  // Different hidden states, so a guess made from one cannot pass for the other's.
  std::vector<float> hidden_a(predictor.hidden()), hidden_b(predictor.hidden());
  for (size_t i = 0; i < hidden_a.size(); ++i) {
    hidden_a[i] = std::sin(0.37f * static_cast<float>(i));
    hidden_b[i] = std::cos(1.91f * static_cast<float>(i) + 0.5f);
  }
  std::vector<uint32_t> ids(predictor.top_k());
  for (uint32_t i = 0; i < predictor.top_k(); ++i) ids[i] = i;
  // Both publish before the router looks: with one shared mailbox the second
  // message would overwrite the first.
  publisher_a.publish(first, 1, true, hidden_a, predictor.top_k(), ids);
  publisher_b.publish(first, 1, true, hidden_b, predictor.top_k(), ids);
  REQUIRE(lookahead.poll(std::chrono::milliseconds(100)));
  REQUIRE(sent.size() == 2);
  CHECK(sent[0].first == second);
  CHECK(sent[1].first == second);
  const auto guess_a = predictor.predict(second, hidden_a, 3), guess_b = predictor.predict(second, hidden_b, 3);
  CHECK(((sent[0].second == guess_a && sent[1].second == guess_b) ||
         (sent[0].second == guess_b && sent[1].second == guess_a)));
  CHECK(worker.segment().client(client_a.id()).lookahead_messages == 1);
  CHECK(worker.segment().client(client_b.id()).lookahead_messages == 1);
  CHECK(worker.segment().client(client_a.id()).lookahead_guesses == guess_a.size());
  CHECK(worker.segment().client(client_b.id()).lookahead_guesses == guess_b.size());

  // Each client's next layer holds exactly its own rank-1 guess among other experts.
  const auto routing_with = [&](uint32_t must) {
    std::vector<uint32_t> real = {must};
    for (uint32_t e = 0; real.size() < predictor.top_k(); ++e) {
      if (e != must && std::find(guess_a.begin(), guess_a.end(), e) == guess_a.end() &&
          std::find(guess_b.begin(), guess_b.end(), e) == guess_b.end()) {
        real.push_back(e);
      }
    }
    return real;
  };
  publisher_a.publish(second, 1, true, hidden_a, predictor.top_k(), routing_with(guess_a[0]));
  publisher_b.publish(second, 1, true, hidden_b, predictor.top_k(), routing_with(guess_b[0]));
  REQUIRE(lookahead.poll(std::chrono::milliseconds(100)));
  const auto scored = shm::read_stats(worker.segment()).lookahead.layers;
  REQUIRE(scored.size() == 1);
  CHECK(scored[0].scored == 2);
  CHECK(scored[0].rank1_hits == 2);
  CHECK(shm::read_stats(worker.segment()).lookahead.skipped == 0);
}

TEST_CASE(
    "the union of several rows' guesses is ranked by how many rows want each expert, and how "
    "soon") {
  // Scores (k = 3): 4 → 3, 9 → 3, 1 → 2 + 1, 6 → 2, 2 → 1. 4 and 9 tie on
  // score and best rank (0), so the lower id leads; 1 ties with them on
  // score but its best rank is 1.
  const std::vector<std::vector<uint32_t>> rows = {{9, 1, 2}, {4, 6, 1}};
  CHECK(rank_union(rows) == std::vector<uint32_t>{4, 9, 1, 6, 2});
  // An expert every row guesses leads even when no row puts it first.
  const std::vector<std::vector<uint32_t>> shared = {{3, 7}, {5, 7}, {8, 7}};
  CHECK(rank_union(shared) == std::vector<uint32_t>{7, 3, 5, 8});
  const std::vector<std::vector<uint32_t>> one = {{2, 0, 1}};
  CHECK(rank_union(one) == std::vector<uint32_t>{2, 0, 1});
}

TEST_CASE(
    "a batched decode step publishes every sequence's row and each gets guesses, scored per row") {
  const Container container = Container::open(testing::tiny_container());
  REQUIRE(container.moe_layers().size() >= 2);
  const Predictor predictor(container);
  const uint32_t first = container.moe_layers()[0].layer, second = container.moe_layers()[1].layer;
  const uint32_t rows = 3, clients = 2;
  auto segment = shm::Segment::create_anonymous(
      ioworker::plan_cache_geometry(container, ioworker::min_cache_bytes(container, clients, rows),
                                    clients, rows),
      container.identity());
  Sent sent;
  Lookahead lookahead(predictor, *segment, 3, keep_in(sent), 1);
  Publisher publisher(*segment, 0, false);
  const uint32_t hidden = predictor.hidden(), top_k = predictor.top_k();
  std::vector<float> input(size_t{rows} * hidden);
  for (uint32_t r = 0; r < rows; ++r) {
    for (uint32_t i = 0; i < hidden; ++i)
      input[size_t{r} * hidden + i] =
          std::sin(0.37f * static_cast<float>(i) * static_cast<float>(r + 1) + r);
  }
  const auto row = [&](uint32_t r) {
    return std::span<const float>(input).subspan(size_t{r} * hidden, hidden);
  };
  std::vector<uint32_t> ids(size_t{rows} * top_k);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<uint32_t>(i % top_k);

  // Three tokens of one sequence are a prefill chunk: not published without `prefill`.
  publisher.publish(first, rows, false, input, top_k, ids);
  CHECK_FALSE(lookahead.poll(std::chrono::milliseconds(0)));
  CHECK(sent.empty());

  publisher.publish(first, rows, true, input, top_k, ids);
  REQUIRE(lookahead.poll(std::chrono::milliseconds(100)));
  REQUIRE(sent.size() == 1);
  CHECK(sent[0].first == second);
  std::vector<std::vector<uint32_t>> guesses;
  for (uint32_t r = 0; r < rows; ++r) guesses.push_back(predictor.predict(second, row(r), 3));
  CHECK(sent[0].second == rank_union(guesses));
  for (const auto& guess : guesses) {
    for (uint32_t e : guess)
      CHECK(std::find(sent[0].second.begin(), sent[0].second.end(), e) != sent[0].second.end());
  }
  CHECK(segment->client(0).lookahead_guesses == sent[0].second.size());

  // Each row's next layer holds its own rank-1 guess: every row is scored, all at rank 1.
  const std::vector<uint32_t> real = testing::routing_holding_rank1(guesses, top_k);
  publisher.publish(second, rows, true, input, top_k, real);
  REQUIRE(lookahead.poll(std::chrono::milliseconds(100)));
  const auto scored = shm::read_stats(*segment).lookahead.layers;
  REQUIRE(scored.size() == 1);
  CHECK(scored[0].layer == second);
  CHECK(scored[0].scored == rows);
  CHECK(scored[0].rank1_hits == rows);
  CHECK(scored[0].real == size_t{rows} * top_k);
}

TEST_CASE("a batch wider than the mailbox publishes its first sequences") {
  const Container container = Container::open(testing::tiny_container());
  const Predictor predictor(container);
  const uint32_t layer = container.moe_layers()[0].layer, clients = 2, mailbox_rows = 2, batch = 3;
  auto segment = shm::Segment::create_anonymous(
      ioworker::plan_cache_geometry(container,
                                    ioworker::min_cache_bytes(container, clients, mailbox_rows),
                                    clients, mailbox_rows),
      container.identity());
  Lookahead lookahead(predictor, *segment, 3, [](uint32_t, std::span<const uint32_t>) {}, 1);
  Publisher publisher(*segment, 0, false);
  const uint32_t hidden = predictor.hidden(), top_k = predictor.top_k();
  std::vector<float> input(size_t{batch} * hidden);
  for (size_t i = 0; i < input.size(); ++i) input[i] = static_cast<float>(i % 97) / 97.0f;
  std::vector<uint32_t> ids(size_t{batch} * top_k);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<uint32_t>(i);
  publisher.publish(layer, batch, true, input, top_k, ids);
  shm::MailboxMessage message;
  REQUIRE(shm::Mailbox(*segment, 0).read(0, message));
  CHECK(message.rows == mailbox_rows);
  CHECK(message.layer == layer);
  CHECK(message.values ==
        std::vector<float>(input.begin(), input.begin() + size_t{mailbox_rows} * hidden));
  CHECK(message.ids ==
        std::vector<uint32_t>(ids.begin(), ids.begin() + size_t{mailbox_rows} * top_k));
}

namespace {

enum class Mode { kOff, kOn, kStopped };

struct Outcome {
  std::vector<int32_t> tokens;
  std::vector<float> logits;  // every row the sampler saw
  shm::StatsSnapshot cache;
  uint64_t prefetch_requests_at_stop = 0;  // kStopped: what the router had asked for when it stopped
};

Outcome generate(const std::string& model, Mode mode,
                 ioworker::EvictionPolicy policy = ioworker::WorkerOptions{}.policy) {
  CachedExpertSource* cached = nullptr;
  EngineOptions options;
  options.threads = 1;
  options.prefill_chunk = 4;
  options.expert_source = [&](const Container& container) {
    ioworker::WorkerOptions worker;
    worker.readers = 2;
    worker.quiet = true;
    worker.policy = policy;
    // The smallest cache: most experts miss, so prefetches evict and compete.
    worker.cache_bytes = ioworker::min_cache_bytes(container, worker.max_clients);
    auto source = CachedExpertSource::embedded(container, worker);
    cached = source.get();
    return source;
  };
  Engine engine(model, options);
  RoutingOptions routing_options;
  routing_options.lookahead = mode == Mode::kOff ? 0 : kDefaultLookahead;
  RoutingSession routing(engine, routing_options);
  std::vector<int32_t> prompt;
  for (int32_t i = 0; i < 7; ++i) prompt.push_back((i * 53 + 11) % static_cast<int32_t>(engine.config().vocab));
  SamplingParams sampling;
  sampling.temperature = 0.8f;
  sampling.seed = 1234;
  Outcome out;
  bool waited = false;
  engine.generate(prompt, 16, sampling, {}, true, [&](int32_t token, std::span<const float> logits) {
    out.tokens.push_back(token);
    out.logits.insert(out.logits.end(), logits.begin(), logits.end());
    // Six tokens in, the router has been sent every layer's routing of five
    // steps; its thread may still be behind on a loaded machine, so wait until
    // it has prefetched something: the comparison means nothing otherwise.
    if (mode != Mode::kOff && !waited && out.tokens.size() == 6) {
      waited = true;
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
      while (cached->cache_stats().prefetch_requests == 0 && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::yield();
      }
      if (mode == Mode::kStopped) {
        routing.finish();
        out.prefetch_requests_at_stop = cached->cache_stats().prefetch_requests;
      }
    }
    return true;
  });
  routing.finish();
  out.cache = cached->cache_stats();
  return out;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

void check_lookahead_bit_identity(const std::string& model) {
  const Outcome off = generate(model, Mode::kOff);
  const Outcome on = generate(model, Mode::kOn);
  const Outcome stopped = generate(model, Mode::kStopped);
  REQUIRE(off.tokens.size() == 16);
  CHECK(on.tokens == off.tokens);
  CHECK(stopped.tokens == off.tokens);
  CHECK(same_bits(on.logits, off.logits));
  CHECK(same_bits(stopped.logits, off.logits));
  // The comparison means something only if lookahead actually prefetched.
  CHECK(off.cache.prefetch_requests == 0);
  CHECK(on.cache.prefetch_requests > 0);
  CHECK(stopped.prefetch_requests_at_stop > 0);
  CHECK(stopped.cache.prefetch_requests == stopped.prefetch_requests_at_stop);
  REQUIRE_FALSE(on.cache.lookahead.layers.empty());
  for (const shm::GuessStats& a : on.cache.lookahead.layers) {
    CHECK(a.precision_at_1() >= 0.0);
    CHECK(a.precision_at_1() <= 1.0);
    CHECK(a.recalled <= a.real);
  }
  MESSAGE("lookahead on: ", on.cache.prefetch_reads, " prefetch reads, ", on.cache.hits, " hits, ", on.cache.misses,
          " misses; off: ", off.cache.hits, " hits, ", off.cache.misses, " misses");
}

}  // namespace

TEST_CASE(
    "output is bit-identical with lookahead off, on, and with the router stopped mid-generation") {
  check_lookahead_bit_identity(testing::tiny_container());
}

TEST_CASE(
    "Kimi-Linear's output is bit-identical with lookahead off, on, and stopped mid-generation") {
  check_lookahead_bit_identity(testing::make_tiny_container("kimi", {}, "kimi_linear"));
}

TEST_CASE("output is bit-identical whichever eviction policy the cache runs, lookahead on") {
  const Outcome lru = generate(testing::tiny_container(), Mode::kOn, ioworker::EvictionPolicy::kLru);
  const Outcome density = generate(testing::tiny_container(), Mode::kOn, ioworker::EvictionPolicy::kDensity);
  REQUIRE(lru.tokens.size() == 16);
  CHECK(density.tokens == lru.tokens);
  CHECK(same_bits(density.logits, lru.logits));
  // On the smallest cache both evicted; what differs is which records.
  CHECK(density.cache.evictions > 0);
  CHECK(lru.cache.evictions > 0);
}

namespace {

struct BatchOutcome {
  std::vector<float> logits;  // every step's rows
  shm::StatsSnapshot cache;
  shm::MailboxMessage last_message;  // what the client's mailbox held at the end
};

// Two sequences prefilled in chunks (never published), then decoded together.
BatchOutcome decode_two_together(const std::string& model, uint32_t lookahead) {
  constexpr uint32_t kSequences = 2, kSteps = 8;
  CachedExpertSource* cached = nullptr;
  EngineOptions options;
  options.threads = 1;
  options.prefill_chunk = 4;
  options.expert_source = [&](const Container& container) {
    ioworker::WorkerOptions worker;
    worker.readers = 2;
    worker.quiet = true;
    worker.mailbox_rows = kSequences;
    worker.cache_bytes = ioworker::min_cache_bytes(container, worker.max_clients, kSequences);
    auto source = CachedExpertSource::embedded(container, worker);
    cached = source.get();
    return source;
  };
  Engine engine(model, options);
  RoutingOptions routing_options;
  routing_options.lookahead = lookahead;
  RoutingSession routing(engine, routing_options);
  const uint32_t vocab = engine.config().vocab;
  std::vector<SequenceState> states;
  std::vector<float> logits(size_t{kSequences} * vocab);
  for (uint32_t s = 0; s < kSequences; ++s) {
    std::vector<int32_t> prompt;
    for (int32_t i = 0; i < 7; ++i)
      prompt.push_back(static_cast<int32_t>((i * 53 + 11 + 29 * s) % vocab));
    states.push_back(engine.new_sequence());
    engine.prefill(states.back(), prompt,
                   std::span<float>(logits).subspan(size_t{s} * vocab, vocab));
  }
  std::vector<SequenceState*> sequences = {&states[0], &states[1]};
  BatchOutcome out;
  std::vector<int32_t> tokens(kSequences);
  for (uint32_t step = 0; step < kSteps; ++step) {
    for (uint32_t s = 0; s < kSequences; ++s) {
      const auto row = std::span<const float>(logits).subspan(size_t{s} * vocab, vocab);
      tokens[s] = static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
    }
    engine.step(sequences, tokens, logits);
    out.logits.insert(out.logits.end(), logits.begin(), logits.end());
  }
  // The router thread may be behind on a loaded machine; the last message stays in the mailbox.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (lookahead > 0 && cached->cache_stats().lookahead.messages == 0 &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::yield();
  }
  routing.finish();
  out.cache = cached->cache_stats();
  shm::Mailbox(cached->segment(), cached->client_id()).read(0, out.last_message);
  return out;
}

}  // namespace

TEST_CASE(
    "sequences decoded together get lookahead guesses, and their output is bit-identical with it "
    "off") {
  const std::string model = testing::tiny_container();
  const BatchOutcome off = decode_two_together(model, 0);
  const BatchOutcome on = decode_two_together(model, kDefaultLookahead);
  CHECK(same_bits(on.logits, off.logits));
  CHECK(off.cache.lookahead.messages == 0);
  CHECK(on.cache.lookahead.messages > 0);
  CHECK(on.cache.lookahead.prefetched > 0);
  CHECK(on.cache.prefetch_requests > 0);
  // The messages were the batch's, one row per sequence.
  CHECK(on.last_message.rows == 2);
}
