// tests/ioworker/cached_expert_source_test.cpp: the real model over the cache
// (compute/model/cached_expert_source.cpp; it lives here with the worker it
// drives). Tiny OLMoE and Kimi-Linear checkpoints are made and converted,
// then the engine's logits through the direct source and through the cache
// (embedded, cold or warm, one or four readers, io_uring or threads,
// attached to a named worker) must agree bit for bit.
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
};

Run run_model(const std::string& model, EngineOptions options) {
  options.threads = 2;
  Engine engine(model, options);
  const std::vector<int32_t> prompt = {3, 17, 42, 5, 99, 23, 8};
  std::vector<float> logits(engine.config().vocab);
  Run run;
  engine.prefill(prompt, logits);
  run.logits = logits;
  for (int step = 0; step < 4; ++step) {
    const auto token = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    engine.transformer().forward(engine.sequence(), std::span<const int32_t>(&token, 1), logits,
                                 false);
    run.logits.insert(run.logits.end(), logits.begin(), logits.end());
  }
  run.experts = engine.experts().stats();
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
      return CachedExpertSource::attached(c, worker.segment_name());
    };
    const Run cold = run_model(model, options);
    const Run warm = run_model(model, options);
    CHECK(bit_identical(cold.logits, direct.logits));
    CHECK(bit_identical(warm.logits, direct.logits));
    CHECK(cold.experts.reads > 0);
    CHECK(warm.experts.reads == 0);
    CHECK(warm.experts.hits == warm.experts.requests);
    CHECK(worker.stats().clients.empty());  // both engines detached
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
