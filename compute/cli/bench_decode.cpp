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
#include "compute/model/routing_tap.h"
#include "compute/model/sampler.h"
#include "ioworker/memory_plan.h"
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
  uint32_t repeat = 1;
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
    worker.mailbox_rows = kPlanChunkTokens;  // every arm: the one publishing prefill chunks needs whole chunks
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

// One arm's runs, summarized by medians (the machine is shared and noisy).
struct ArmSummary {
  double tok_per_s = 0, hit_rate = 0, bytes_per_token = 0, wait_seconds = 0, prefill_seconds = 0, prefill_bytes = 0;
};

ArmSummary summarize(const std::vector<ArmResult>& runs, uint32_t tokens) {
  std::vector<double> rate, hits, bytes, wait, prefill, prefill_bytes;
  for (const ArmResult& r : runs) {
    const PhaseFigures& d = r.decode;
    rate.push_back(d.seconds > 0 ? tokens / d.seconds : 0.0);
    hits.push_back(d.requests ? double(d.hits) / double(d.requests) : 0.0);
    bytes.push_back(tokens ? double(d.bytes_read) / tokens : 0.0);
    wait.push_back(d.wait_seconds);
    prefill.push_back(r.prefill.seconds);
    prefill_bytes.push_back(double(r.prefill.bytes_read));
  }
  return {median(rate), median(hits), median(bytes), median(wait), median(prefill), median(prefill_bytes)};
}

void run_decode(const DecodeFlags& flags) {
  if (flags.repeat == 0) fail("--repeat 0: run each arm at least once");
  const Container container = Container::open(flags.model);
  // Every arm gets the same segment, with a mailbox wide enough for a prefill
  // chunk; --budget means what it means to `sluice run`, so at the floor the
  // wider mailbox may take the segment a little over it.
  const uint64_t cache_bytes =
      std::max(plan_for(container, flags.budget).cache_bytes,
               ioworker::min_cache_bytes(container, ioworker::WorkerOptions{}.max_clients, kPlanChunkTokens));
  std::vector<Arm> arms;
  if (flags.compare) {
    arms = {{"lookahead off", 0, false}, {"lookahead on", flags.lookahead, false},
            {"lookahead on, also in prefill", flags.lookahead, true}};
  } else {
    arms = {{flags.lookahead ? "lookahead on" : "lookahead off", flags.lookahead, false}};
  }
  // Rounds interleave the arms, so drift in the machine's load hits them alike.
  std::vector<std::vector<ArmResult>> runs(arms.size());
  for (uint32_t round = 0; round < flags.repeat; ++round) {
    for (size_t a = 0; a < arms.size(); ++a) {
      runs[a].push_back(run_arm(flags, arms[a], cache_bytes));
      if (runs[a].back().tokens != runs[0][0].tokens) {
        fail("bench decode: '{}' generated other tokens than '{}'", arms[a].name, arms[0].name);
      }
    }
  }
  std::vector<ArmSummary> summaries;
  for (const auto& arm_runs : runs) summaries.push_back(summarize(arm_runs, flags.tokens));
  const double off_rate = summaries[0].tok_per_s;

  if (flags.json) {
    nlohmann::json out = {{"model", flags.model}, {"budget", flags.budget}, {"cache_bytes", cache_bytes},
                          {"prompt_tokens", flags.prompt_tokens}, {"tokens", flags.tokens},
                          {"temperature", flags.temperature}, {"seed", flags.seed}, {"repeat", flags.repeat},
                          {"arms", nlohmann::json::array()}};
    for (size_t a = 0; a < arms.size(); ++a) {
      const ArmSummary& m = summaries[a];
      nlohmann::json each = nlohmann::json::array();
      for (const ArmResult& r : runs[a]) {
        each.push_back({{"prefill", phase_json(r.prefill, flags.prompt_tokens)},
                        {"decode", phase_json(r.decode, flags.tokens)}});
      }
      out["arms"].push_back({{"name", arms[a].name},
                             {"lookahead", arms[a].lookahead},
                             {"lookahead_in_prefill", arms[a].in_prefill},
                             {"precision_at_1", runs[a].back().precision_at_1},
                             {"recall", runs[a].back().recall},
                             {"median", {{"decode_tok_per_s", m.tok_per_s},
                                         {"decode_speedup_vs_first_arm", off_rate > 0 ? m.tok_per_s / off_rate : 0.0},
                                         {"demand_hit_rate", m.hit_rate},
                                         {"bytes_read_per_token", m.bytes_per_token},
                                         {"wait_seconds", m.wait_seconds},
                                         {"prefill_seconds", m.prefill_seconds},
                                         {"prefill_bytes_read", m.prefill_bytes}}},
                             {"runs", each}});
    }
    fmt::print("{}\n", out.dump(2));
    return;
  }
  fmt::print("decode of {} tokens after a {}-token prompt, budget {}: cache {}; medians of {} run{}\n", flags.tokens,
             flags.prompt_tokens, flags.budget, format_bytes(cache_bytes), flags.repeat, flags.repeat == 1 ? "" : "s");
  for (size_t a = 0; a < arms.size(); ++a) {
    const ArmSummary& m = summaries[a];
    fmt::print("  {:<30} decode {:.2f} tok/s ({:.2f}x), {:.1f}% demand hits, {:.2f} MB/token, {:.2f} s waiting",
               arms[a].name, m.tok_per_s, off_rate > 0 ? m.tok_per_s / off_rate : 0.0, 100 * m.hit_rate,
               m.bytes_per_token / 1e6, m.wait_seconds);
    if (arms[a].lookahead) {
      fmt::print("; guesses P@1 {:.1f}%, recall {:.1f}%", 100 * runs[a].back().precision_at_1,
                 100 * runs[a].back().recall);
    }
    fmt::print("; prefill {:.2f} s, {:.1f} MB\n", m.prefill_seconds, m.prefill_bytes / 1e6);
  }
}

}  // namespace

void add_bench_decode(CLI::App& bench) {
  auto flags = std::make_shared<DecodeFlags>();
  CLI::App* cmd = bench.add_subcommand("decode", "decode over the expert cache, lookahead off and on");
  cmd->add_option("MODEL", flags->model, "the .sluice container")->required();
  cmd->add_option("--budget", flags->budget,
                  "memory budget as for `sluice run`, e.g. one working set above the floor")
      ->required()
      ->check(memory_size());
  cmd->add_flag("--compare-lookahead", flags->compare, "run lookahead off, on, and on in prefill too, in one process");
  cmd->add_option("--lookahead", flags->lookahead, "experts guessed per token and layer")->capture_default_str();
  cmd->add_option("-n,--tokens", flags->tokens, "tokens to decode")->capture_default_str();
  cmd->add_option("--prompt-tokens", flags->prompt_tokens, "synthetic prompt length")
      ->capture_default_str()
      ->check(at_least_one());
  cmd->add_option("--temp", flags->temperature,
                  "sampling temperature (0: greedy); a seeded draw gives every arm the same tokens")
      ->capture_default_str();
  cmd->add_option("--seed", flags->seed, "sampling seed")->capture_default_str();
  cmd->add_option("--repeat", flags->repeat, "rounds of every arm, interleaved; figures are medians")
      ->capture_default_str();
  cmd->add_option("--threads", flags->threads,
                  "compute threads (default: SLUICE_THREADS or every core)")
      ->check(at_least_one());
  cmd->add_flag("--json", flags->json, "print JSON instead of text");
  cmd->callback([flags] {
    SamplingParams sampling;
    sampling.temperature = flags->temperature;
    validate(sampling);
    run_decode(*flags);
  });
}

}  // namespace sluice::cli
