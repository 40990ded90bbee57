// tests/ioworker/cached_expert_source_test.cpp: the real model over the cache
// (compute/model/cached_expert_source.cpp; it lives here with the worker it
// drives). Tiny OLMoE and Kimi-Linear checkpoints are made and converted,
// then the engine's logits through the direct source and through the cache
// (embedded, cold or warm, one or four readers, io_uring or threads,
// attached to a named worker, the next layer's batch held or not) must agree
// bit for bit. An attached source
// whose daemon dies moves to the one that replaces it and hands out the same
// records.
#include "compute/model/cached_expert_source.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "compute/model/engine.h"
#include "proto/error.h"
#include "tests/proto/container_fixture.h"
#include "tests/shm/shm_test_util.h"

using namespace sluice;

namespace {

std::string env(const char* name) {
  const char* value = std::getenv(name);
  REQUIRE_MESSAGE(value != nullptr, name << " is not set (run through meson test)");
  return value;
}

void run_command(const std::string& command) {
  INFO(command);
  REQUIRE(std::system(command.c_str()) == 0);
}

// One tiny converted container of each family for the whole file.
const std::string& tiny_model(const std::string& family = "olmoe") {
  static sluice::testing::TempDir dir;
  static std::map<std::string, std::string> models;
  std::string& model = models[family];
  if (model.empty()) {
    const std::string checkpoint = dir.path() + "/" + family;
    run_command(env("PYTHON") + " " + env("SLUICE_SOURCE_ROOT") +
                "/scripts/make_tiny_checkpoint.py " + family + " " + checkpoint +
                " --seed 11 > /dev/null");
    model = dir.path() + "/" + family + ".sluice";
    run_command(env("SLUICE_BIN") + " convert " + checkpoint + " " + model + " -q");
  }
  return model;
}

struct Run {
  std::vector<float> logits;  // prefill, then each greedy step
  ExpertSourceStats experts;
  shm::StatsSnapshot cache;  // the whole cache's counters, when the source is cached
  uint32_t moe_layers = 0, top_k = 0;
};

constexpr int kDecodeSteps = 4;

Run run_model(const std::string& model, EngineOptions options) {
  options.threads = 2;
  Engine engine(model, options);
  const std::vector<int32_t> prompt = {3, 17, 42, 5, 99, 23, 8};
  std::vector<float> logits(engine.config().vocab);
  Run run;
  engine.prefill(prompt, logits);
  run.logits = logits;
  for (int step = 0; step < kDecodeSteps; ++step) {
    const auto token = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    engine.transformer().forward(engine.sequence(), std::span<const int32_t>(&token, 1), logits,
                                 false);
    run.logits.insert(run.logits.end(), logits.begin(), logits.end());
  }
  run.experts = engine.experts().stats();
  if (const auto* cached = dynamic_cast<const CachedExpertSource*>(&engine.experts()))
    run.cache = cached->cache_stats();
  run.moe_layers = static_cast<uint32_t>(engine.container().moe_layers().size());
  run.top_k = engine.config().top_k;
  return run;
}

bool bit_identical(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

EngineOptions embedded(ioworker::IoBackend backend, uint32_t readers, uint64_t cache_bytes = 0) {
  EngineOptions options;
  options.expert_source = [=](const Container& container) -> std::unique_ptr<ExpertSource> {
    ioworker::WorkerOptions worker;
    worker.backend = backend;
    worker.readers = readers;
    worker.quiet = true;
    worker.cache_bytes = cache_bytes == 0 ? 0 : std::max(cache_bytes, ioworker::min_cache_bytes(container, 16));
    return CachedExpertSource::embedded(container, worker);
  };
  return options;
}

void check_cache_bit_identity(const std::string& model) {
  const Run direct = run_model(model, EngineOptions{});
  REQUIRE(direct.experts.reads > 0);

  SUBCASE("embedded, one reader thread, cold") {
    const Run cached = run_model(model, embedded(ioworker::IoBackend::kThreads, 1));
    CHECK(bit_identical(cached.logits, direct.logits));
    CHECK(cached.experts.requests == direct.experts.requests);
    CHECK(cached.experts.reads > 0);
  }
  SUBCASE("embedded, io_uring with four reads in flight, the smallest cache (constant eviction)") {
    const Run cached = run_model(model, embedded(ioworker::IoBackend::kUring, 4, 1));
    CHECK(bit_identical(cached.logits, direct.logits));
  }
  SUBCASE("attached to a named worker: a second run starts warm") {
    const Container container = Container::open(model);
    sluice::testing::ShmGuard guard(sluice::testing::unique_instance("engine"));
    ioworker::WorkerOptions worker_options;
    worker_options.instance = guard.instance();
    worker_options.cache_bytes = 64ull << 20;  // holds every expert of the tiny model
    worker_options.readers = 4;
    worker_options.quiet = true;
    ioworker::Worker worker(container, worker_options);
    EngineOptions options;
    options.expert_source = [&](const Container& c) -> std::unique_ptr<ExpertSource> {
      return CachedExpertSource::attached(c, [&](auto) { return worker.segment_name(); });
    };
    const Run cold = run_model(model, options);
    const Run warm = run_model(model, options);
    CHECK(bit_identical(cold.logits, direct.logits));
    CHECK(bit_identical(warm.logits, direct.logits));
    CHECK(cold.experts.reads > 0);
    CHECK(warm.experts.reads == 0);
    CHECK(warm.experts.hits == warm.experts.requests);
    CHECK(worker.stats().clients.empty());  // both engines detached

    // Warm, every held record is cached and pinned at once: each decode
    // step's MoE layers after the first find their whole batch held.
    options.hold_next = 64;  // every expert of the next layer
    const shm::StatsSnapshot before = worker.stats();
    const Run held = run_model(model, options);
    CHECK(bit_identical(held.logits, direct.logits));
    CHECK(held.experts.reads == 0);
    const shm::StatsSnapshot after = worker.stats();
    CHECK(after.held_used - before.held_used ==
          uint64_t{kDecodeSteps} * (held.moe_layers - 1) * held.top_k);
    CHECK(after.held - before.held >= after.held_used - before.held_used);
    CHECK(after.slots_pinned == 0);
  }
  SUBCASE(
      "embedded with the next layer's batch held, at the smallest cache and at two working sets") {
    for (const uint64_t cache_bytes : {uint64_t{1}, uint64_t{0}}) {
      CAPTURE(cache_bytes);
      EngineOptions options = embedded(ioworker::IoBackend::kUring, 4, cache_bytes);
      options.hold_next = 64;
      const Run held = run_model(model, options);
      CHECK(bit_identical(held.logits, direct.logits));
      CHECK(held.experts.requests == direct.experts.requests);
      CHECK(held.cache.held_used <= held.cache.held);
    }
  }
}

}  // namespace

TEST_CASE("the model's logits are bit-identical through the cache, cold or warm, any readers") {
  check_cache_bit_identity(tiny_model("olmoe"));
}

TEST_CASE(
    "Kimi-Linear's logits are bit-identical through the cache, cold or warm, embedded or "
    "attached") {
  check_cache_bit_identity(tiny_model("kimi_linear"));
}

TEST_CASE("the cached source refuses experts the container does not have") {
  const Container container = Container::open(tiny_model());
  ioworker::WorkerOptions options;
  options.quiet = true;
  auto source = CachedExpertSource::embedded(container, options);
  const uint32_t layer = container.moe_layers()[0].layer;
  const uint32_t experts = container.moe_layers()[0].experts;
  CHECK_THROWS_AS(source->request(layer, std::vector<uint32_t>{experts}), Error);
  source->request(layer, std::vector<uint32_t>{0, 1});
  const LandedExpert first = source->next();
  source->release(first);
  CHECK_THROWS_AS(source->release(first), Error);
  source->release(source->next());
  CHECK(source->stats().requests == 2);
  CHECK(source->stats().reads == 2);
}

namespace {

std::vector<uint8_t> direct_record(const Container& container, uint32_t layer, uint32_t expert) {
  DirectExpertSource direct(container, false);
  direct.request(layer, std::vector<uint32_t>{expert});
  const LandedExpert landed = direct.next();
  std::vector<uint8_t> bytes(landed.record,
                             landed.record + container.moe_layer(layer).record_stride);
  direct.release(landed);
  return bytes;
}

}  // namespace

TEST_CASE(
    "an attached source moves to the daemon that replaces a dead one and hands out the same "
    "records") {
  const Container container = Container::open(tiny_model());
  sluice::testing::ShmGuard guard(sluice::testing::unique_instance("reattach"));
  ioworker::WorkerOptions worker_options;
  worker_options.instance = guard.instance();
  worker_options.cache_bytes = 64ull << 20;
  worker_options.quiet = true;
  auto worker = std::make_unique<ioworker::Worker>(container, worker_options);
  int attaches = 0;
  // The attacher plays the supervisor: the first call finds the daemon, a
  // later one starts its successor (a new segment under the same name).
  auto source = CachedExpertSource::attached(
      container,
      [&](auto) {
        ++attaches;
        if (!worker) worker = std::make_unique<ioworker::Worker>(container, worker_options);
        return worker->segment_name();
      },
      std::chrono::seconds(30));
  const MoeLayerInfo& info = container.moe_layers()[0];
  const uint32_t stride = info.record_stride;
  const std::vector<uint32_t> first_batch = {0, 1, 2, 3}, second_batch = {4, 5, 6, 7};

  source->request(info.layer, first_batch);
  const LandedExpert in_use = source->next();
  const std::vector<uint8_t> before(in_use.record, in_use.record + stride);
  worker.reset();  // the daemon dies with a record of its segment in use
  std::vector<LandedExpert> landed = {in_use};
  for (size_t i = 1; i < first_batch.size(); ++i) landed.push_back(source->next());
  // The record handed out before the death is still mapped and unchanged.
  CHECK(std::equal(before.begin(), before.end(), in_use.record));
  std::vector<uint32_t> positions;
  for (const LandedExpert& expert : landed) {
    positions.push_back(expert.index);
    CHECK(std::vector<uint8_t>(expert.record, expert.record + stride) ==
          direct_record(container, info.layer, first_batch.at(expert.index)));
    source->release(expert);
  }
  std::sort(positions.begin(), positions.end());
  CHECK(positions == std::vector<uint32_t>{0, 1, 2, 3});  // each handed out exactly once

  // Never read before: these miss, so a source still on the dead segment notices now.
  source->request(info.layer, second_batch);
  for (size_t i = 0; i < second_batch.size(); ++i) {
    const LandedExpert expert = source->next();
    CHECK(std::vector<uint8_t>(expert.record, expert.record + stride) ==
          direct_record(container, info.layer, second_batch.at(expert.index)));
    source->release(expert);
  }
  CHECK(source->reattachments() == 1);
  CHECK(attaches == 2);
  REQUIRE(worker != nullptr);
  CHECK(worker->stats().clients.size() == 1);  // the source is a client of the successor
  CHECK_THROWS_AS(source->next(), Error);      // nothing left to hand out
}
