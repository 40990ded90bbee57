// compute/cli/bench_decode.cpp: `sluice bench decode`, decode (greedy, or a
// seeded draw) over the embedded expert cache at a given budget, with
// lookahead off and on (and on in prefill too) in one process, each arm on a
// fresh cache. Measures, never asserts; the arms must produce the same tokens,
// which it checks.
#include <algorithm>
#include <chrono>
#include <memory>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "compute/cli/commands.h"
#include "compute/model/cached_expert_source.h"
#include "compute/model/engine.h"
#include "compute/model/memory_plan.h"
#include "compute/model/model_config.h"
#include "compute/model/routing_tap.h"
#include "compute/model/sampler.h"
#include "proto/container.h"
#include "proto/error.h"
#include "router/lookahead.h"

namespace sluice::cli {
namespace {

struct DecodeFlags {
  std::string model;
  std::string budget;
  bool compare = false;
  uint32_t tokens = 32;
  uint32_t prompt_tokens = 64;
  uint32_t lookahead = router::kDefaultLookahead;
  float temperature = 0.0f;
  uint64_t seed = 0;
  size_t threads = 0;
  bool json = false;
};

struct Arm {
  std::string name;
  uint32_t lookahead = 0;
  bool in_prefill = false;
};

struct PhaseFigures {
  double seconds = 0;
  uint64_t requests = 0, hits = 0, demand_reads = 0, prefetch_reads = 0, bytes_read = 0, wasted_prefetches = 0;
  double wait_seconds = 0;
};

struct ArmResult {
  Arm arm;
  PhaseFigures prefill, decode;
  std::vector<int32_t> tokens;
  double precision_at_1 = 0, recall = 0;
};

struct Counters {
  ExpertSourceStats source;
  shm::StatsSnapshot cache;
};

PhaseFigures difference(const Counters& a, const Counters& b, double seconds) {
  PhaseFigures f;
  f.seconds = seconds;
  f.requests = b.source.requests - a.source.requests;
  f.hits = b.source.hits - a.source.hits;
  f.wait_seconds = b.source.wait_seconds - a.source.wait_seconds;
  f.demand_reads = b.cache.demand_reads - a.cache.demand_reads;
  f.prefetch_reads = b.cache.prefetch_reads - a.cache.prefetch_reads;
  f.bytes_read = b.cache.bytes_read - a.cache.bytes_read;
  f.wasted_prefetches = b.cache.wasted_prefetches - a.cache.wasted_prefetches;
  return f;
}

ArmResult run_arm(const DecodeFlags& flags, const Arm& arm, uint64_t cache_bytes) {
  CachedExpertSource* cached = nullptr;
  EngineOptions options;
  if (flags.threads > 0) options.threads = flags.threads;
  options.expert_source = [&](const Container& container) {
    ioworker::WorkerOptions worker;
    worker.cache_bytes = cache_bytes;
    worker.quiet = true;
    worker.mailbox_rows = options.prefill_chunk;  // the arm publishing prefill chunks needs whole chunks
    auto source = CachedExpertSource::embedded(container, worker);
    cached = source.get();
    return source;
  };
  Engine engine(flags.model, options);
  const uint32_t vocab = engine.config().vocab;
  RoutingOptions routing_options;
  routing_options.lookahead = arm.lookahead;
  routing_options.in_prefill = arm.in_prefill;
  RoutingSession routing(engine, routing_options);
  const auto counters = [&] { return Counters{cached->stats(), cached->cache_stats()}; };
  using Clock = std::chrono::steady_clock;
  const auto seconds_since = [](Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); };

  std::vector<int32_t> prompt(flags.prompt_tokens);
  for (uint32_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>((i * 7919u + 17u) % vocab);
  std::vector<float> logits(vocab);
  ArmResult result;
  result.arm = arm;
  const Counters start = counters();
  auto t0 = Clock::now();
  engine.prefill(prompt, logits);
  const Counters after_prefill = counters();
  result.prefill = difference(start, after_prefill, seconds_since(t0));
  SamplingParams sampling;
  sampling.temperature = flags.temperature;
  sampling.seed = flags.seed;
  Sampler sampler(sampling);
  t0 = Clock::now();
  for (uint32_t n = 0; n < flags.tokens; ++n) {
    const int32_t next = sampler.sample(logits, result.tokens);
    result.tokens.push_back(next);
    engine.transformer().forward(std::span<const int32_t>(&next, 1), logits, false);
  }
  result.decode = difference(after_prefill, counters(), seconds_since(t0));
  routing.finish();
  const shm::GuessStats guesses = routing.guesses();
  result.precision_at_1 = guesses.precision_at_1();
  result.recall = guesses.recall();
  return result;
}

nlohmann::json phase_json(const PhaseFigures& f, uint32_t tokens) {
  return {{"seconds", f.seconds},
          {"tok_per_s", f.seconds > 0 ? tokens / f.seconds : 0.0},
          {"demand_hit_rate", f.requests ? double(f.hits) / double(f.requests) : 0.0},
          {"demand_reads", f.demand_reads},
          {"prefetch_reads", f.prefetch_reads},
          {"wasted_prefetches", f.wasted_prefetches},
          {"bytes_read", f.bytes_read},
          {"bytes_read_per_token", tokens ? double(f.bytes_read) / tokens : 0.0},
          {"wait_seconds", f.wait_seconds}};
}

void run_decode(const DecodeFlags& flags) {
  const uint64_t cache_bytes = cache_bytes_for_budget(Container::open(flags.model), flags.budget);
  std::vector<Arm> arms;
  if (flags.compare) {
    arms = {{"lookahead off", 0, false}, {"lookahead on", flags.lookahead, false},
            {"lookahead on, also in prefill", flags.lookahead, true}};
  } else {
    arms = {{flags.lookahead ? "lookahead on" : "lookahead off", flags.lookahead, false}};
  }
  std::vector<ArmResult> results;
  for (const Arm& arm : arms) results.push_back(run_arm(flags, arm, cache_bytes));
  for (const ArmResult& r : results) {
    if (r.tokens != results.front().tokens) fail("bench decode: '{}' generated other tokens than '{}'", r.arm.name, results.front().arm.name);
  }

  if (flags.json) {
    nlohmann::json out = {{"model", flags.model}, {"budget", flags.budget}, {"cache_bytes", cache_bytes}, {"prompt_tokens", flags.prompt_tokens},
                          {"tokens", flags.tokens}, {"temperature", flags.temperature}, {"seed", flags.seed},
                          {"arms", nlohmann::json::array()}};
    for (const ArmResult& r : results) {
      out["arms"].push_back({{"name", r.arm.name},
                             {"lookahead", r.arm.lookahead},
                             {"lookahead_in_prefill", r.arm.in_prefill},
                             {"precision_at_1", r.precision_at_1},
                             {"recall", r.recall},
                             {"prefill", phase_json(r.prefill, flags.prompt_tokens)},
                             {"decode", phase_json(r.decode, flags.tokens)}});
    }
    fmt::print("{}\n", out.dump(2));
    return;
  }
  fmt::print("decode of {} tokens after a {}-token prompt, budget {}: cache {}\n", flags.tokens, flags.prompt_tokens,
             flags.budget, format_bytes(cache_bytes));
  for (const ArmResult& r : results) {
    const PhaseFigures& d = r.decode;
    fmt::print("  {:<30} decode {:.2f} tok/s, {:.1f}% demand hits, {:.2f} MB/token, {:.2f} s waiting",
               r.arm.name, d.seconds > 0 ? flags.tokens / d.seconds : 0.0,
               d.requests ? 100.0 * d.hits / d.requests : 0.0, d.bytes_read / 1e6 / flags.tokens, d.wait_seconds);
    if (r.arm.lookahead) fmt::print("; guesses P@1 {:.1f}%, recall {:.1f}%", 100 * r.precision_at_1, 100 * r.recall);
    fmt::print("; prefill {:.2f} s, {:.1f} MB\n", r.prefill.seconds, r.prefill.bytes_read / 1e6);
  }
}

}  // namespace

void add_bench_decode(CLI::App& bench) {
  auto flags = std::make_shared<DecodeFlags>();
  CLI::App* cmd = bench.add_subcommand("decode", "decode over the expert cache, lookahead off and on");
  cmd->add_option("MODEL", flags->model, "the .sluice container")->required();
  cmd->add_option("--budget", flags->budget, "memory budget as for `sluice run`, e.g. one working set above the floor")
      ->required();
  cmd->add_flag("--compare-lookahead", flags->compare, "run lookahead off, on, and on in prefill too, in one process");
  cmd->add_option("--lookahead", flags->lookahead, "experts guessed per token and layer")->capture_default_str();
  cmd->add_option("-n,--tokens", flags->tokens, "tokens to decode")->capture_default_str();
  cmd->add_option("--prompt-tokens", flags->prompt_tokens, "synthetic prompt length")->capture_default_str();
  cmd->add_option("--temp", flags->temperature,
                  "sampling temperature (0: greedy); a seeded draw gives every arm the same tokens")
      ->capture_default_str();
  cmd->add_option("--seed", flags->seed, "sampling seed")->capture_default_str();
  cmd->add_option("--threads", flags->threads, "compute threads (default: SLUICE_THREADS or every core)");
  cmd->add_flag("--json", flags->json, "print JSON instead of text");
  cmd->callback([flags] {
    SamplingParams sampling;
    sampling.temperature = flags->temperature;
    validate(sampling);
    run_decode(*flags);
  });
}

}  // namespace sluice::cli
