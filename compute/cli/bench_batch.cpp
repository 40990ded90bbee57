// compute/cli/bench_batch.cpp: `sluice bench batch`, decode (greedy, or
// sampled at --temp) of 1, 2, 4 ... sequences stepped together (Engine::step)
// over the embedded expert cache at a budget, each arm on a fresh cache,
// rounds interleaved, lookahead on (its guesses for every sequence of a step
// ranked together), or off and on with --compare-lookahead. Measures
// aggregate and per-stream tok/s, never asserts; the first sequence must
// produce the same tokens in every arm, which it checks.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "compute/cli/commands.h"
#include "compute/cli/run_options.h"
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

struct BatchFlags {
  std::string model;
  std::string budget;
  std::string sequences = "1,2,4";
  uint32_t tokens = 16;
  uint32_t prompt_tokens = 16;
  uint32_t repeat = 1;
  size_t threads = 0;
  float temperature = 0.0f;  // 0: greedy
  uint64_t seed = 1;         // sequence i samples with seed + i
  std::optional<uint32_t> lookahead;
  bool compare_lookahead = false;
  bool json = false;
};

// One arm: this many sequences, with lookahead guessing this many experts per row (0: off).
struct Arm {
  uint32_t sequences = 1;
  uint32_t lookahead = 0;
};

struct ArmRun {
  double seconds = 0;
  ExpertSourceStats experts;  // decode only
  ForwardTimes times;         // decode only: where the steps' time went
  uint64_t prefetch_reads = 0, wasted_prefetches = 0;  // decode only
  shm::GuessStats guesses;
  std::vector<int32_t> first_tokens;
};

ExpertSourceStats minus(const ExpertSourceStats& b, const ExpertSourceStats& a) {
  ExpertSourceStats d;
  d.requests = b.requests - a.requests;
  d.hits = b.hits - a.hits;
  d.reads = b.reads - a.reads;
  d.bytes_read = b.bytes_read - a.bytes_read;
  d.wait_seconds = b.wait_seconds - a.wait_seconds;
  return d;
}

// The machine's 1-minute load average (0 where /proc says nothing): the
// figures of a shared machine mean little without it.
double load_average() {
  std::ifstream in("/proc/loadavg");
  double one = 0;
  return in >> one ? one : 0.0;
}

ArmRun run_arm(const BatchFlags& flags, const Arm& arm, uint64_t cache_bytes,
               uint32_t mailbox_rows) {
  const uint32_t count = arm.sequences;
  CachedExpertSource* cached = nullptr;
  EngineOptions options;
  if (flags.threads > 0) options.threads = flags.threads;
  options.expert_source = [&](const Container& container) -> std::unique_ptr<ExpertSource> {
    ioworker::WorkerOptions worker;
    worker.cache_bytes = cache_bytes;
    worker.quiet = true;
    worker.mailbox_rows = mailbox_rows;
    auto source = CachedExpertSource::embedded(container, worker);
    cached = source.get();
    return source;
  };
  Engine engine(flags.model, options);
  RoutingOptions routing_options;
  routing_options.lookahead = arm.lookahead;
  RoutingSession routing(engine, routing_options);
  const uint32_t vocab = engine.config().vocab;
  if (flags.prompt_tokens + flags.tokens > engine.transformer().context()) {
    fail("--prompt-tokens {} and -n {} do not fit the context of {}", flags.prompt_tokens,
         flags.tokens, engine.transformer().context());
  }
  // Sequence i's prompt depends only on i, so sequence 0 is the same in every arm.
  std::vector<SequenceState> states;
  std::vector<float> logits(size_t{count} * vocab);
  for (uint32_t i = 0; i < count; ++i) {
    std::vector<int32_t> prompt(flags.prompt_tokens);
    for (uint32_t t = 0; t < prompt.size(); ++t)
      prompt[t] = static_cast<int32_t>((t * 7919u + i * 104729u + 17u) % vocab);
    states.push_back(engine.new_sequence());
    engine.prefill(states.back(), prompt,
                   std::span<float>(logits).subspan(size_t{i} * vocab, vocab));
  }
  std::vector<SequenceState*> sequences;
  for (SequenceState& s : states) sequences.push_back(&s);
  ArmRun run;
  std::vector<int32_t> tokens(count);
  // Sequence i's sampler depends only on i, like its prompt.
  std::vector<Sampler> samplers;
  for (uint32_t i = 0; i < count; ++i) {
    SamplingParams params;
    params.temperature = flags.temperature;
    params.seed = flags.seed + i;
    samplers.emplace_back(params);
  }
  const ExpertSourceStats before = engine.experts().stats();
  const shm::StatsSnapshot cache_before = cached->cache_stats();
  const ForwardTimes times_before = engine.transformer().times();
  const auto start = std::chrono::steady_clock::now();
  for (uint32_t step = 0; step < flags.tokens; ++step) {
    for (uint32_t i = 0; i < count; ++i) {
      tokens[i] =
          samplers[i].sample(std::span<const float>(logits).subspan(size_t{i} * vocab, vocab), {});
    }
    run.first_tokens.push_back(tokens[0]);
    engine.step(sequences, tokens, logits);
  }
  run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  run.experts = minus(engine.experts().stats(), before);
  const shm::StatsSnapshot cache_after = cached->cache_stats();
  run.prefetch_reads = cache_after.prefetch_reads - cache_before.prefetch_reads;
  run.wasted_prefetches = cache_after.wasted_prefetches - cache_before.wasted_prefetches;
  routing.finish();
  run.guesses = routing.guesses();
  const ForwardTimes& after = engine.transformer().times();
  run.times = after - times_before;
  return run;
}

void run_batch(const BatchFlags& flags) {
  if (flags.repeat == 0) fail("--repeat 0: run each arm at least once");
  std::vector<uint32_t> counts;
  for (const int32_t n : parse_token_ids(flags.sequences, "--sequences")) {
    if (n < 1 || n > 64) usage_error("--sequences: {} is not a count of 1 to 64", n);
    counts.push_back(static_cast<uint32_t>(n));
  }
  if (counts.empty()) fail("--sequences: no counts");
  const uint32_t lookahead =
      flags.lookahead ? *flags.lookahead : router::lookahead_from_environment();
  if (flags.compare_lookahead && lookahead == 0)
    fail("--compare-lookahead needs a --lookahead above 0");
  std::vector<Arm> arms_run;
  for (const uint32_t count : counts) {
    if (flags.compare_lookahead) arms_run.push_back({count, 0});
    arms_run.push_back({count, lookahead});
  }
  const Container container = Container::open(flags.model);
  PlanRequest shape = plan_shape(flags.threads);
  // The largest batch's sequences, and the engine's own, which a batch leaves unused;
  // each sequence of a step publishes a lookahead row.
  const uint32_t widest = *std::max_element(counts.begin(), counts.end());
  shape.scratch.sequences = widest + 1;
  shape.mailbox_rows = widest;
  // One budget for every arm, as a server's memory is: the floor holds the
  // largest batch's sequences, and working sets above it are one token's.
  const MemoryPlan plan = plan_for(container, flags.budget, 0, shape);
  const uint64_t cache_bytes = plan.cache_bytes;
  std::vector<std::vector<ArmRun>> runs(arms_run.size());
  const double load_before = load_average();
  for (uint32_t round = 0; round < flags.repeat; ++round) {
    for (size_t a = 0; a < arms_run.size(); ++a) {
      runs[a].push_back(run_arm(flags, arms_run[a], cache_bytes, widest));
      if (runs[a].back().first_tokens != runs[0][0].first_tokens) {
        fail(
            "bench batch: the first sequence decoded other tokens among {} sequences "
            "(lookahead {}) than among {} (lookahead {})",
            arms_run[a].sequences, arms_run[a].lookahead, arms_run[0].sequences,
            arms_run[0].lookahead);
      }
    }
  }
  nlohmann::json arms = nlohmann::json::array();
  for (size_t a = 0; a < arms_run.size(); ++a) {
    const uint32_t count = arms_run[a].sequences;
    std::vector<double> aggregate, hit_rate, requests_per_step, bytes_per_step, wait_share;
    // Prefetch reads and wasted prefetches per step, and the guesses' scores.
    std::vector<double> prefetch_reads, wasted, precision, recall;
    std::vector<double> mixer_ms, moe_ms, dense_ms, lm_head_ms;  // per step
    for (const ArmRun& r : runs[a]) {
      aggregate.push_back(r.seconds > 0 ? double(count) * flags.tokens / r.seconds : 0.0);
      hit_rate.push_back(r.experts.requests ? double(r.experts.hits) / double(r.experts.requests)
                                            : 0.0);
      requests_per_step.push_back(double(r.experts.requests) / flags.tokens);
      bytes_per_step.push_back(double(r.experts.bytes_read) / flags.tokens);
      wait_share.push_back(r.seconds > 0 ? r.experts.wait_seconds / r.seconds : 0.0);
      mixer_ms.push_back(1e3 * (r.times.attention + r.times.kda) / flags.tokens);
      moe_ms.push_back(1e3 * r.times.moe / flags.tokens);
      dense_ms.push_back(1e3 * r.times.dense / flags.tokens);
      lm_head_ms.push_back(1e3 * r.times.lm_head / flags.tokens);
      prefetch_reads.push_back(double(r.prefetch_reads) / flags.tokens);
      wasted.push_back(double(r.wasted_prefetches) / flags.tokens);
      precision.push_back(r.guesses.precision_at_1());
      recall.push_back(r.guesses.recall());
    }
    arms.push_back(
        {{"sequences", count},
         {"lookahead", arms_run[a].lookahead},
         {"aggregate_tok_per_s", median(aggregate)},
         {"per_stream_tok_per_s", median(aggregate) / count},
         {"min_aggregate_tok_per_s", *std::min_element(aggregate.begin(), aggregate.end())},
         {"max_aggregate_tok_per_s", *std::max_element(aggregate.begin(), aggregate.end())},
         {"expert_requests_per_step", median(requests_per_step)},
         {"bytes_read_per_step", median(bytes_per_step)},
         {"demand_hit_rate", median(hit_rate)},
         {"wait_share", median(wait_share)},
         {"prefetch_reads_per_step", median(prefetch_reads)},
         {"wasted_prefetches_per_step", median(wasted)},
         {"lookahead_precision_at_1", median(precision)},
         {"lookahead_recall", median(recall)},
         {"step_ms",
          {{"mixer", median(mixer_ms)},
           {"moe", median(moe_ms)},
           {"dense", median(dense_ms)},
           {"lm_head", median(lm_head_ms)}}}});
  }
  // Each arm against the first count's arm with the same lookahead.
  for (auto& arm : arms) {
    const auto first = std::find_if(arms.begin(), arms.end(), [&](const nlohmann::json& other) {
      return other["lookahead"] == arm["lookahead"];
    });
    const double one = (*first)["aggregate_tok_per_s"].get<double>();
    arm["speedup_over_first"] = one > 0 ? arm["aggregate_tok_per_s"].get<double>() / one : 0.0;
  }
  if (flags.json) {
    fmt::print("{}\n", nlohmann::json{{"model", flags.model},
                                      {"budget", flags.budget},
                                      {"cache_bytes", cache_bytes},
                                      {"cache_slots", plan.cache_slots},
                                      {"floor_bytes", plan.floor_bytes},
                                      {"working_set_bytes", plan.working_set_bytes},
                                      {"tokens", flags.tokens},
                                      {"prompt_tokens", flags.prompt_tokens},
                                      {"temperature", flags.temperature},
                                      {"seed", flags.seed},
                                      {"repeat", flags.repeat},
                                      {"load_average_before", load_before},
                                      {"load_average_after", load_average()},
                                      {"arms", arms}}
                           .dump());
    return;
  }
  fmt::print(
      "bench batch: {} decode steps, cache {} MiB, medians of {} round(s), load {:.1f} -> {:.1f}\n",
      flags.tokens, cache_bytes >> 20, flags.repeat, load_before, load_average());
  fmt::print("{:>9} {:>9} {:>12} {:>12} {:>8} {:>14} {:>9} {:>6} {:>24}\n", "sequences",
             "lookahead", "tok/s total", "per stream", "speedup", "experts/step", "hit rate",
             "wait", "ms/step mixer moe head");
  for (const auto& arm : arms) {
    const auto& ms = arm["step_ms"];
    fmt::print(
        "{:>9} {:>9} {:>12.2f} {:>12.2f} {:>7.2f}x {:>14.1f} {:>8.1f}% {:>5.0f}% {:>10.1f} "
        "{:>6.1f} {:>6.1f}\n",
        arm["sequences"].get<uint32_t>(), arm["lookahead"].get<uint32_t>(),
        arm["aggregate_tok_per_s"].get<double>(), arm["per_stream_tok_per_s"].get<double>(),
        arm["speedup_over_first"].get<double>(), arm["expert_requests_per_step"].get<double>(),
        100 * arm["demand_hit_rate"].get<double>(), 100 * arm["wait_share"].get<double>(),
        ms["mixer"].get<double>(), ms["moe"].get<double>(), ms["lm_head"].get<double>());
  }
}

}  // namespace

void add_bench_batch(CLI::App& bench) {
  auto flags = std::make_shared<BatchFlags>();
  CLI::App* cmd =
      bench.add_subcommand("batch", "decode several sequences stepped together: aggregate tok/s");
  cmd->add_option("MODEL", flags->model, "the .sluice container")->required();
  cmd->add_option("--budget", flags->budget, "memory budget as for `sluice run`")
      ->required()
      ->check(memory_size());
  cmd->add_option("--sequences", flags->sequences, "the batch sizes to run, e.g. 1,2,4")
      ->capture_default_str();
  cmd->add_option("-n,--tokens", flags->tokens, "decode steps per arm")
      ->capture_default_str()
      ->check(at_least_one());
  cmd->add_option("--prompt-tokens", flags->prompt_tokens, "synthetic prompt length per sequence")
      ->capture_default_str()
      ->check(at_least_one());
  cmd->add_option("--repeat", flags->repeat,
                  "rounds of every arm, interleaved; figures are medians")
      ->capture_default_str();
  cmd->add_option("--temp", flags->temperature,
                  "sampling temperature (0: greedy); realistic-routing weights want 1")
      ->capture_default_str()
      ->check(CLI::Range(0.0f, 100.0f));
  cmd->add_option("--seed", flags->seed, "sequence i samples with seed + i")->capture_default_str();
  cmd->add_option(
      "--lookahead", flags->lookahead,
      "experts of the next layer guessed per sequence (default SLUICE_LOOKAHEAD or 6; 0: off)");
  cmd->add_flag("--compare-lookahead", flags->compare_lookahead,
                "run every count with lookahead off and on, in one process");
  cmd->add_option("--threads", flags->threads,
                  "compute threads (default: SLUICE_THREADS or every core)")
      ->check(at_least_one());
  cmd->add_flag("--json", flags->json, "print JSON instead of a table");
  cmd->callback([flags] { run_batch(*flags); });
}

}  // namespace sluice::cli
