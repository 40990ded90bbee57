// compute/cli/bench_decode.cpp: `sluice bench decode`, decode (greedy, or a
// seeded draw) over the embedded expert cache at a given budget, with
// lookahead off and on (and on in prefill too), or the next layer's batch
// held and not, in one process, each arm on a fresh cache; optionally with synthetic or recorded
// routing in place of the model's router, and the disk's and memory's bandwidth measured in the
// same run. Measures, never asserts; the arms must produce the same tokens, which it checks.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "compute/cli/bench_disk.h"
#include "compute/cli/bench_routing.h"
#include "compute/cli/commands.h"
#include "compute/cli/io_bound.h"
#include "compute/cli/run_options.h"
#include "compute/model/cached_expert_source.h"
#include "compute/model/engine.h"
#include "compute/model/routing_tap.h"
#include "compute/model/sampler.h"
#include "ioworker/memory_plan.h"
#include "ioworker/worker.h"
#include "shm/populate.h"
#include "proto/container.h"
#include "proto/model_config.h"
#include "proto/error.h"
#include "router/lookahead.h"
#include "router/trace.h"

namespace sluice::cli {
namespace {

struct DecodeFlags {
  std::string model;
  std::string budget;
  bool compare = false;
  bool compare_hold = false;
  std::optional<uint32_t> hold;  // unset: the engine's default (hold_from_environment)
  uint32_t tokens = 32;
  uint32_t prompt_tokens = 64;
  uint32_t lookahead = router::kDefaultLookahead;
  float temperature = 0.0f;
  uint64_t seed = 0;
  uint32_t repeat = 1;
  size_t threads = 0;
  uint32_t readers = ioworker::WorkerOptions{}.readers;
  std::string routing;  // empty: the model's router; synthetic[:SEED] or a trace file
  double disk_seconds = 2.0;
  bool warm = false;  // prefill the prompt once, unmeasured, before the measured prefill
  bool json = false;
};

// Decode's expert requests rerouted: a decode step's request for a layer asks
// the cache for the routing's experts of that token and layer instead, and
// hands them out in the model's positions, so cache and disk see the
// routing's accesses while the model computes on what lands. Prefill (more
// experts than top-k per request) keeps the model's own routing.
class ReroutedSource final : public ExpertSource {
 public:
  ReroutedSource(std::unique_ptr<ExpertSource> inner, const Container& container,
                 std::vector<router::TraceToken> routing)
      : inner_(std::move(inner)), routing_(std::move(routing)) {
    for (const MoeLayerInfo& info : container.moe_layers()) ordinal_.push_back(info.layer);
  }
  void request(uint32_t layer, std::span<const uint32_t> experts) override {
    const auto at = std::find(ordinal_.begin(), ordinal_.end(), layer);
    const uint32_t o = static_cast<uint32_t>(at - ordinal_.begin());
    if (at == ordinal_.end() || experts.size() != routing_.front().layers[o].size()) {
      inner_->request(layer, experts);
      return;
    }
    if (started_ && o <= last_ordinal_) ++token_;
    started_ = true;
    last_ordinal_ = o;
    inner_->request(layer, routing_[token_ % routing_.size()].layers[o]);
  }
  LandedExpert next() override { return inner_->next(); }
  void release(const LandedExpert& expert) override { inner_->release(expert); }
  ExpertSourceStats stats() const override { return inner_->stats(); }

 private:
  std::unique_ptr<ExpertSource> inner_;
  std::vector<router::TraceToken> routing_;
  std::vector<uint32_t> ordinal_;  // MoE ordinal → model layer
  uint64_t token_ = 0;
  uint32_t last_ordinal_ = 0;
  bool started_ = false;
};

// The routing `flag` names, checked against the container's banks.
std::vector<router::TraceToken> load_routing(const std::string& flag, const Container& container, uint32_t tokens) {
  const auto& layers = container.moe_layers();
  std::vector<router::TraceToken> trace =
      load_bench_routing(flag, moe_geometry(container), std::max<uint32_t>(tokens, 1) + 1).trace;
  for (const router::TraceToken& token : trace) {
    if (token.layers.size() != layers.size()) {
      fail("{}: {} MoE layers per token, {} has {}", flag, token.layers.size(), container.dir(), layers.size());
    }
    for (size_t o = 0; o < layers.size(); ++o) {
      if (token.layers[o].size() != container.top_k()) {
        fail("{}: MoE layer {} routes {} experts, the model top-{}", flag, o, token.layers[o].size(),
             container.top_k());
      }
      for (uint32_t e : token.layers[o]) {
        if (e >= layers[o].experts)
          fail("{}: MoE layer {} expert {} is out of range ({} experts)", flag, o, e, layers[o].experts);
      }
    }
  }
  return trace;
}

// Memory bandwidth: the best of a few copies of a buffer far larger than the
// caches. The two buffers together take at most the plan's cache, which no
// arm holds while the machine is measured, so a run inside a memory limit of
// its own budget is not killed by its measurement. Half the budget was not
// safe: at a tiny model's floor the process itself holds about half
// (memory_budget_cgroup, 2 threads: peaks of 0.99 of the limit, one OOM kill).
size_t memory_buffer_bytes(uint64_t cache_bytes) { return std::min<uint64_t>(uint64_t{256} << 20, cache_bytes / 2); }

double memory_gbps(size_t bytes) {
  const size_t kBytes = bytes;
  std::vector<uint8_t> from(kBytes, 1), to(kBytes, 0);
  double best = 0;
  for (int round = 0; round < 3; ++round) {
    const auto t0 = std::chrono::steady_clock::now();
    std::memcpy(to.data(), from.data(), kBytes);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    // A copy reads and writes every byte.
    if (seconds > 0) best = std::max(best, 2.0 * kBytes / seconds / 1e9);
    from[round] = to[kBytes - 1 - round];  // keeps the copies observable
  }
  return best;
}

struct Arm {
  std::string name;
  uint32_t lookahead = 0;
  bool in_prefill = false;
  uint32_t hold = 0;
};

struct PhaseFigures {
  double seconds = 0;
  uint64_t requests = 0, hits = 0, demand_reads = 0, prefetch_reads = 0, bytes_read = 0, wasted_prefetches = 0;
  uint64_t held = 0, held_used = 0, held_reads = 0,
           read_depth = 0;  // read_depth: the worker's at the end
  double wait_seconds = 0;
  double read_seconds = 0, read_busy_seconds = 0;  // summed latency; time with a read in flight
  ForwardTimes times;  // where the phase's seconds went
};

struct ArmResult {
  Arm arm;
  PhaseFigures prefill, decode;
  std::vector<int32_t> tokens;
  double precision_at_1 = 0, recall = 0;
  // The disk right after the run, at the depth its decode's reads ran.
  uint32_t disk_threads = 0;
  double disk_gbps_at_depth = 0;
  ioworker::Startup startup;  // the embedded cache's
  uint64_t decode_page_faults = 0;  // the process's, during the measured decode
};

struct Counters {
  ExpertSourceStats source;
  shm::StatsSnapshot cache;
  ForwardTimes times;
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
  f.held = b.cache.held - a.cache.held;
  f.held_used = b.cache.held_used - a.cache.held_used;
  f.held_reads = b.cache.held_reads - a.cache.held_reads;
  f.read_depth = b.cache.read_depth;
  f.read_seconds = b.cache.read_seconds_total - a.cache.read_seconds_total;
  f.read_busy_seconds = b.cache.read_busy_seconds - a.cache.read_busy_seconds;
  f.times = b.times - a.times;
  return f;
}

// Every arm gets the same segment: with --compare-lookahead one arm publishes
// prefill chunks, and its mailboxes must hold whole chunks.
uint32_t mailbox_rows(const DecodeFlags& flags) {
  return flags.compare ? static_cast<uint32_t>(kPlanChunkTokens)
                       : ioworker::WorkerOptions{}.mailbox_rows;
}

ArmResult run_arm(const DecodeFlags& flags, const Arm& arm, uint64_t cache_bytes,
                  const std::vector<router::TraceToken>& rerouting) {
  CachedExpertSource* cached = nullptr;
  EngineOptions options;
  if (flags.threads > 0) options.threads = flags.threads;
  options.hold_next = arm.hold;
  options.expert_source = [&](const Container& container) {
    ioworker::WorkerOptions worker;
    worker.cache_bytes = cache_bytes;
    worker.quiet = true;
    worker.mailbox_rows = mailbox_rows(flags);
    worker.readers = flags.readers;
    auto source = CachedExpertSource::embedded(container, worker);
    cached = source.get();
    if (rerouting.empty()) return std::unique_ptr<ExpertSource>(std::move(source));
    return std::unique_ptr<ExpertSource>(std::make_unique<ReroutedSource>(std::move(source), container, rerouting));
  };
  Engine engine(flags.model, options);
  const uint32_t vocab = engine.config().vocab;
  RoutingOptions routing_options;
  routing_options.lookahead = arm.lookahead;
  routing_options.in_prefill = arm.in_prefill;
  RoutingSession routing(engine, routing_options);
  const auto counters = [&] { return Counters{cached->stats(), cached->cache_stats(), engine.transformer().times()}; };
  using Clock = std::chrono::steady_clock;
  const auto seconds_since = [](Clock::time_point t) {
    return std::chrono::duration<double>(Clock::now() - t).count();
  };

  std::vector<int32_t> prompt(flags.prompt_tokens);
  for (uint32_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>((i * 7919u + 17u) % vocab);
  std::vector<float> logits(vocab);
  ArmResult result;
  result.arm = arm;
  if (flags.warm) {
    // As llama-bench's warm-up run: the prompt's experts cached, scratch
    // grown and the kernels' first-call work done before anything is timed.
    engine.prefill(prompt, logits);
    engine.sequence().reset();
  }
  const Counters start = counters();
  auto t0 = Clock::now();
  engine.prefill(prompt, logits);
  const Counters after_prefill = counters();
  result.prefill = difference(start, after_prefill, seconds_since(t0));
  SamplingParams sampling;
  sampling.temperature = flags.temperature;
  sampling.seed = flags.seed;
  Sampler sampler(sampling);
  const uint64_t faults_before = shm::process_page_faults();
  t0 = Clock::now();
  for (uint32_t n = 0; n < flags.tokens; ++n) {
    const int32_t next = sampler.sample(logits, result.tokens);
    result.tokens.push_back(next);
    engine.transformer().forward(engine.sequence(), std::span<const int32_t>(&next, 1), logits,
                                 false);
  }
  result.decode = difference(after_prefill, counters(), seconds_since(t0));
  result.decode_page_faults = shm::process_page_faults() - faults_before;
  if (cached->worker() != nullptr) result.startup = cached->worker()->startup();
  routing.finish();
  const shm::GuessStats guesses = routing.guesses();
  result.precision_at_1 = guesses.precision_at_1();
  result.recall = guesses.recall();
  return result;
}

// Where a token's time goes. The MoE blocks' time includes the wait for
// records and the shared experts; "routed_experts" is that time less both
// (router and routed experts' compute). "attention" is the family's softmax
// mixer (the output's "attention_kind"). "other" is what no counter covers (sampling).
nlohmann::json per_token_json(const PhaseFigures& f, uint32_t tokens) {
  const double n = tokens ? tokens : 1;
  const ForwardTimes& t = f.times;
  const double covered = t.embedding + t.kda + t.attention + t.moe + t.dense + t.lm_head;
  return {{"embedding", t.embedding / n},
          {"kda", t.kda / n},
          {"attention", t.attention / n},
          {"routed_experts", std::max(0.0, t.moe - f.wait_seconds - t.shared_experts) / n},
          {"shared_experts", t.shared_experts / n},
          {"waiting_on_reads", f.wait_seconds / n},
          {"dense_ffn", t.dense / n},
          {"lm_head", t.lm_head / n},
          {"other", std::max(0.0, f.seconds - covered) / n}};
}

nlohmann::json phase_json(const PhaseFigures& f, uint32_t tokens) {
  return {{"seconds", f.seconds},
          {"tok_per_s", f.seconds > 0 ? tokens / f.seconds : 0.0},
          {"demand_hit_rate", f.requests ? double(f.hits) / double(f.requests) : 0.0},
          {"demand_reads", f.demand_reads},
          {"prefetch_reads", f.prefetch_reads},
          {"wasted_prefetches", f.wasted_prefetches},
          {"held", f.held},
          {"held_used", f.held_used},
          {"held_reads", f.held_reads},
          {"read_depth", f.read_depth},
          {"read_depth_mean", mean_read_depth(f.read_seconds, f.read_busy_seconds)},
          {"bytes_read", f.bytes_read},
          {"bytes_read_per_token", tokens ? double(f.bytes_read) / tokens : 0.0},
          {"wait_seconds", f.wait_seconds},
          {"seconds_per_token", per_token_json(f, tokens)}};
}

// One arm's runs, summarized by medians (the machine is shared and noisy).
struct ArmSummary {
  double tok_per_s = 0, min_tok_per_s = 0, max_tok_per_s = 0, hit_rate = 0, bytes_per_token = 0, wait_seconds = 0,
         wait_share = 0, compute_seconds_per_token = 0, prefill_seconds = 0, prefill_bytes = 0;
  double read_depth = 0;  // mean reads in flight while reading
  double disk_threads = 0, disk_gbps_at_depth = 0, read_seconds_per_token = 0, io_bound_ratio = 0;
  double startup_seconds = 0, page_faults_per_token = 0;
  nlohmann::json seconds_per_token;  // per part, the median over runs
};

ArmSummary summarize(const std::vector<ArmResult>& runs, uint32_t tokens) {
  std::vector<double> rate, hits, bytes, wait, share, compute, prefill, prefill_bytes, depth;
  std::vector<double> threads, gbps, read_time, bound, startup, faults;
  for (const ArmResult& r : runs) {
    startup.push_back(r.startup.seconds);
    faults.push_back(tokens ? double(r.decode_page_faults) / tokens : 0.0);
    const PhaseFigures& d = r.decode;
    rate.push_back(d.seconds > 0 ? tokens / d.seconds : 0.0);
    hits.push_back(d.requests ? double(d.hits) / double(d.requests) : 0.0);
    bytes.push_back(tokens ? double(d.bytes_read) / tokens : 0.0);
    wait.push_back(d.wait_seconds);
    share.push_back(d.seconds > 0 ? d.wait_seconds / d.seconds : 0.0);
    compute.push_back(tokens ? std::max(0.0, d.seconds - d.wait_seconds) / tokens : 0.0);
    prefill.push_back(r.prefill.seconds);
    prefill_bytes.push_back(double(r.prefill.bytes_read));
    depth.push_back(mean_read_depth(d.read_seconds, d.read_busy_seconds));
    threads.push_back(r.disk_threads);
    gbps.push_back(r.disk_gbps_at_depth);
    read_time.push_back(r.disk_gbps_at_depth > 0 ? bytes.back() / (r.disk_gbps_at_depth * 1e9) : 0.0);
    bound.push_back(io_bound_ratio(rate.back(), bytes.back(), r.disk_gbps_at_depth * 1e9, compute.back()));
  }
  nlohmann::json parts = nlohmann::json::object();
  const nlohmann::json names = per_token_json(runs.front().decode, tokens);
  for (const auto& [part, unused] : names.items()) {
    std::vector<double> values;
    for (const ArmResult& r : runs) values.push_back(per_token_json(r.decode, tokens)[part].get<double>());
    parts[part] = median(values);
  }
  return {median(rate),
          *std::min_element(rate.begin(), rate.end()),
          *std::max_element(rate.begin(), rate.end()),
          median(hits),
          median(bytes),
          median(wait),
          median(share),
          median(compute),
          median(prefill),
          median(prefill_bytes),
          median(depth),
          median(threads),
          median(gbps),
          median(read_time),
          median(bound),
          median(startup),
          median(faults),
          parts};
}

// The raw reads that a run's disk figure takes: as many threads as the
// worker kept reads in flight, on average, while its decode read (--readers
// when it read nothing).
uint32_t depth_threads(const PhaseFigures& decode, uint32_t readers) {
  const double depth = mean_read_depth(decode.read_seconds, decode.read_busy_seconds);
  if (depth <= 0) return std::max<uint32_t>(readers, 1);
  return static_cast<uint32_t>(std::clamp(std::lround(depth), 1L, 64L));
}

// The machine as this run found it: raw O_DIRECT reads at the record size
// with as many threads as the worker keeps reads in flight, and memory copies.
struct Machine {
  double disk_gbps = 0;
  bool disk_direct = true;
  double memory_gbps = 0;
};

Machine measure_machine(const Container& container, const DecodeFlags& flags, size_t memory_buffer) {
  Machine m;
  m.disk_gbps = raw_reads(container, std::max<uint32_t>(flags.readers, 1), flags.disk_seconds, m.disk_direct).gbps;
  m.memory_gbps = memory_gbps(memory_buffer);
  return m;
}

void run_decode(const DecodeFlags& flags) {
  if (flags.repeat == 0) fail("--repeat 0: run each arm at least once");
  const Container container = Container::open(flags.model);
  const ModelConfig model_config = ModelConfig::from_json(container.arch(), container.config());
  // The plan sizes the arms' segment, so the process stays inside --budget;
  // with --compare-lookahead the chunk-wide mailboxes come on top of the
  // slots the budget buys, so every arm caches what `sluice run` would.
  const MemoryPlan plan = plan_for(container, flags.budget, 0, plan_shape(flags.threads));
  const uint32_t clients = ioworker::WorkerOptions{}.max_clients;
  const uint32_t slots =
      ioworker::plan_cache_geometry(container, plan.cache_bytes, clients).slot_count;
  const uint64_t cache_bytes = flags.compare ? ioworker::cache_bytes_for_slots(
                                                   container, slots, clients, mailbox_rows(flags))
                                             : plan.cache_bytes;
  const size_t memory_buffer = memory_buffer_bytes(plan.cache_bytes);
  if (!flags.routing.empty() &&
      (flags.compare || flags.lookahead > 0 || flags.compare_hold || flags.hold.value_or(0) > 0)) {
    fail(
        "--routing replaces the model's router, which lookahead and --hold predict: use it with "
        "--lookahead 0 and no hold");
  }
  const std::vector<router::TraceToken> routing =
      flags.routing.empty() ? std::vector<router::TraceToken>{} : load_routing(flags.routing, container, flags.tokens);
  std::vector<Arm> arms;
  if (flags.compare && flags.compare_hold)
    fail("--compare-lookahead and --compare-hold: pick one comparison");
  // Replaced routing has no guesses to hold.
  const uint32_t hold = !flags.routing.empty() ? 0
                        : flags.hold           ? *flags.hold
                                               : hold_from_environment(container.top_k());
  if (flags.compare) {
    arms = {{"lookahead off", 0, false, hold},
            {"lookahead on", flags.lookahead, false, hold},
            {"lookahead on, also in prefill", flags.lookahead, true, hold}};
  } else if (flags.compare_hold) {
    arms = {{"next batch not held", flags.lookahead, false, 0},
            {"next batch held", flags.lookahead, false, hold > 0 ? hold : container.top_k()}};
  } else {
    arms = {{flags.lookahead ? "lookahead on" : "lookahead off", flags.lookahead, false, hold}};
  }
  // Rounds interleave the arms, so drift in the machine's load hits them alike;
  // the machine is measured before and after them.
  bool depth_direct = true;
  const Machine before = measure_machine(container, flags, memory_buffer);
  std::vector<std::vector<ArmResult>> runs(arms.size());
  for (uint32_t round = 0; round < flags.repeat; ++round) {
    for (size_t a = 0; a < arms.size(); ++a) {
      runs[a].push_back(run_arm(flags, arms[a], cache_bytes, routing));
      // Right after the run, so the disk's drift between rounds hits the ratio's two sides alike.
      ArmResult& run = runs[a].back();
      run.disk_threads = depth_threads(run.decode, flags.readers);
      run.disk_gbps_at_depth = raw_reads(container, run.disk_threads, flags.disk_seconds, depth_direct).gbps;
      if (runs[a].back().tokens != runs[0][0].tokens) {
        fail("bench decode: '{}' generated other tokens than '{}'", arms[a].name, arms[0].name);
      }
    }
  }
  const Machine after = measure_machine(container, flags, memory_buffer);
  const double disk_gbps = median({before.disk_gbps, after.disk_gbps});
  const double mem_gbps = median({before.memory_gbps, after.memory_gbps});
  std::vector<ArmSummary> summaries;
  for (const auto& arm_runs : runs) summaries.push_back(summarize(arm_runs, flags.tokens));
  const double off_rate = summaries[0].tok_per_s;

  if (flags.json) {
    nlohmann::json out = {{"model", flags.model},
                          {"budget", flags.budget},
                          {"cache_bytes", cache_bytes},
                          {"prompt_tokens", flags.prompt_tokens},
                          {"tokens", flags.tokens},
                          {"temperature", flags.temperature},
                          {"seed", flags.seed},
                          {"repeat", flags.repeat},
                          {"warm", flags.warm},
                          {"routing", flags.routing.empty() ? "model" : flags.routing},
                          {"attention_kind", model_config.mixer == MixerKind::kGqa ? "gqa" : "mla"},
                          {"queue_depth", flags.readers},
                          {"disk",
                           {{"record_bytes", container.largest_record_stride()},
                            {"o_direct_gbps", disk_gbps},
                            {"o_direct_gbps_before", before.disk_gbps},
                            {"o_direct_gbps_after", after.disk_gbps},
                            {"direct", before.disk_direct && after.disk_direct && depth_direct},
                            {"threads", std::max<uint32_t>(flags.readers, 1)}}},
                          {"memory_gbps", mem_gbps},
                          {"memory_buffer_bytes", memory_buffer},
                          {"arms", nlohmann::json::array()}};
    for (size_t a = 0; a < arms.size(); ++a) {
      const ArmSummary& m = summaries[a];
      nlohmann::json each = nlohmann::json::array();
      for (const ArmResult& r : runs[a]) {
        each.push_back(
            {{"prefill", phase_json(r.prefill, flags.prompt_tokens)},
             {"decode", phase_json(r.decode, flags.tokens)},
             {"decode_page_faults", r.decode_page_faults},
             {"startup",
              {{"seconds", r.startup.seconds},
               {"resident_seconds", r.startup.residency.seconds},
               {"populate", r.startup.residency.populate},
               {"huge_pages", r.startup.residency.huge_pages()},
               {"huge_bytes", r.startup.residency.huge_bytes},
               {"register_seconds", r.startup.register_seconds}}},
             {"disk_after_run", {{"threads", r.disk_threads}, {"o_direct_gbps", r.disk_gbps_at_depth}}}});
      }
      out["arms"].push_back(
          {{"name", arms[a].name},
           {"lookahead", arms[a].lookahead},
           {"lookahead_in_prefill", arms[a].in_prefill},
           {"hold", arms[a].hold},
           {"precision_at_1", runs[a].back().precision_at_1},
           {"recall", runs[a].back().recall},
           {"decode_tok_per_s",
            {{"median", m.tok_per_s}, {"min", m.min_tok_per_s}, {"max", m.max_tok_per_s}}},
           {"hit_rate", m.hit_rate},
           {"bytes_read_per_token", m.bytes_per_token},
           {"read_wait_share", m.wait_share},
           {"io_bound_ratio", m.io_bound_ratio},
           {"io_bound",
            {{"read_depth_mean", m.read_depth},
             {"disk_threads", m.disk_threads},
             {"o_direct_gbps_at_depth", m.disk_gbps_at_depth},
             {"read_seconds_per_token", m.read_seconds_per_token},
             {"compute_seconds_per_token", m.compute_seconds_per_token}}},
           {"median",
            {{"decode_tok_per_s", m.tok_per_s},
             {"decode_speedup_vs_first_arm", off_rate > 0 ? m.tok_per_s / off_rate : 0.0},
             {"demand_hit_rate", m.hit_rate},
             {"bytes_read_per_token", m.bytes_per_token},
             {"wait_seconds", m.wait_seconds},
             {"prefill_seconds", m.prefill_seconds},
             {"prefill_tok_per_s",
              m.prefill_seconds > 0 ? flags.prompt_tokens / m.prefill_seconds : 0.0},
             {"prefill_bytes_read", m.prefill_bytes},
             {"startup_seconds", m.startup_seconds},
             {"decode_page_faults_per_token", m.page_faults_per_token},
             {"decode_seconds_per_token", m.seconds_per_token}}},
           {"runs", each}});
    }
    fmt::print("{}\n", out.dump(2));
    return;
  }
  fmt::print("decode of {} tokens after a {}-token prompt, budget {}: cache {}; medians of {} run{}\n", flags.tokens,
             flags.prompt_tokens, flags.budget, format_bytes(cache_bytes), flags.repeat, flags.repeat == 1 ? "" : "s");
  fmt::print("  routing {}; disk {:.2f} GB/s O_DIRECT at {} records, {} in flight; memory {:.1f} GB/s\n",
             flags.routing.empty() ? "the model's" : flags.routing, disk_gbps,
             format_bytes(container.largest_record_stride()), flags.readers, mem_gbps);
  for (size_t a = 0; a < arms.size(); ++a) {
    const ArmSummary& m = summaries[a];
    fmt::print(
        "  {:<30} decode {:.2f} tok/s ({:.2f}x), {:.1f}% demand hits, {:.2f} MB/token, {:.2f} s "
        "waiting",
        arms[a].name, m.tok_per_s, off_rate > 0 ? m.tok_per_s / off_rate : 0.0, 100 * m.hit_rate,
        m.bytes_per_token / 1e6, m.wait_seconds);
    if (arms[a].lookahead) {
      fmt::print("; guesses P@1 {:.1f}%, recall {:.1f}%", 100 * runs[a].back().precision_at_1,
                 100 * runs[a].back().recall);
    }
    fmt::print(
        "; {:.0f}% of the step waiting, io_bound_ratio {:.2f} (disk {:.2f} GB/s at {} in flight); "
        "prefill {:.2f} s, {:.1f} MB; cache start-up {:.2f} s ({}), {:.1f} page faults per decode token\n",
        100 * m.wait_share, m.io_bound_ratio, m.disk_gbps_at_depth, m.disk_threads, m.prefill_seconds,
        m.prefill_bytes / 1e6, m.startup_seconds, runs[a].back().startup.residency.huge_pages(),
        m.page_faults_per_token);
    fmt::print("    ms per token:");
    for (const auto& [part, seconds] : m.seconds_per_token.items()) fmt::print(" {} {:.1f}", part, 1e3 * seconds.get<double>());
    fmt::print("\n");
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
  cmd->add_flag(
      "--compare-hold", flags->compare_hold,
      "run with the next layer's batch not held and held (--hold, default top-k), in one process");
  cmd->add_option(
      "--hold", flags->hold,
      "experts of the next layer held per decode step (default SLUICE_HOLD or top-k; 0: "
      "off)");
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
  cmd->add_option("--readers", flags->readers, "the worker's reads in flight (its queue depth)")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  cmd->add_option("--routing", flags->routing,
                  "synthetic[:SEED] (real routing's statistics) or a trace file, in place of the "
                  "model's router in "
                  "decode; needs --lookahead 0");
  cmd->add_option("--disk-seconds", flags->disk_seconds, "seconds of raw O_DIRECT reads before and after the arms")
      ->capture_default_str();
  cmd->add_flag("--warm", flags->warm,
                "prefill the prompt once before the measured prefill, as llama-bench's warm-up run (with a "
                "budget that holds the model, prefill then reads nothing)");
  cmd->add_flag("--json", flags->json, "print JSON instead of text");
  cmd->callback([flags] {
    SamplingParams sampling;
    sampling.temperature = flags->temperature;
    validate(sampling);
    run_decode(*flags);
  });
}

}  // namespace sluice::cli
