// compute/cli/bench_replay.cpp: `sluice bench replay`, a recorded routing trace
// driven through the real expert cache (worker and client, no compute), next
// to LRU and Belady simulated over the same accesses and slot count. Measures,
// never asserts; the trace decides the accesses, nothing else.
#include <algorithm>
#include <chrono>
#include <memory>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "compute/cli/commands.h"
#include "ioworker/memory_plan.h"
#include "ioworker/worker.h"
#include "proto/container.h"
#include "proto/error.h"
#include "router/replay.h"
#include "shm/client.h"
#include "shm/stats.h"

namespace sluice::cli {
namespace {

struct ReplayFlags {
  std::string trace;
  std::string model;
  std::string budget;
  std::string policy = "lfru";
  uint32_t readers = 4;
  bool json = false;
};

// Trace MoE ordinals → model layers, every expert id checked against its bank.
std::vector<uint32_t> check_against_model(const std::vector<router::ReplayRequest>& requests, const Container& container,
                                          const std::string& trace_path) {
  std::vector<uint32_t> layers;
  for (const MoeLayerInfo& info : container.moe_layers()) layers.push_back(info.layer);
  for (const router::ReplayRequest& r : requests) {
    if (r.layer >= layers.size()) {
      fail("{}: trace has MoE layer {}, {} has {} MoE layers", trace_path, r.layer, container.dir(), layers.size());
    }
    const uint32_t experts = container.moe_layers()[r.layer].experts;
    for (uint32_t e : r.experts) {
      if (e >= experts) fail("{}: MoE layer {} expert {} is out of range ({} experts)", trace_path, r.layer, e, experts);
    }
  }
  return layers;
}

void run_replay(const ReplayFlags& flags) {
  const std::vector<router::TraceToken> trace = router::read_trace(flags.trace);
  if (trace.empty()) fail("{}: the trace holds no tokens", flags.trace);
  const std::vector<router::ReplayRequest> requests = router::replay_requests(trace);
  const Container container = Container::open(flags.model);
  const std::vector<uint32_t> layers = check_against_model(requests, container, flags.trace);

  ioworker::WorkerOptions options;
  options.readers = flags.readers;
  options.quiet = true;
  if (flags.policy == "lru") {
    options.policy = ioworker::EvictionPolicy::kLru;
  } else if (flags.policy != "lfru") {
    fail("--policy: '{}' is not lfru or lru", flags.policy);
  }
  options.cache_bytes = plan_for(container, flags.budget).cache_bytes;
  ioworker::Worker worker(container, options);
  const uint32_t slots = worker.geometry().slot_count;

  uint64_t accesses = 0;
  const auto start = std::chrono::steady_clock::now();
  {
    shm::Client client(worker.segment());
    for (const router::ReplayRequest& r : requests) {
      client.request(layers[r.layer], r.experts);
      for (size_t i = 0; i < r.experts.size(); ++i) client.release(client.next());
      accesses += r.experts.size();
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const shm::StatsSnapshot stats = worker.stats();
  const router::PolicyResult lru = router::simulate_lru(requests, slots);
  const router::PolicyResult belady = router::simulate_belady(requests, slots);
  const double hit_rate = accesses ? double(accesses - stats.misses) / double(accesses) : 0.0;

  if (flags.json) {
    const nlohmann::json out = {
        {"trace", flags.trace},
        {"tokens", trace.size()},
        {"accesses", accesses},
        {"slots", slots},
        {"cache_bytes", options.cache_bytes},
        {"policy", flags.policy},
        {"cache", {{"hits", accesses - stats.misses}, {"misses", stats.misses}, {"hit_rate", hit_rate},
                   {"bytes_read", stats.bytes_read}, {"seconds", seconds}, {"direct_io", stats.direct_io}}},
        {"lru", {{"hits", lru.hits}, {"misses", lru.misses}, {"hit_rate", lru.hit_rate()}}},
        {"belady", {{"hits", belady.hits}, {"misses", belady.misses}, {"hit_rate", belady.hit_rate()}}}};
    fmt::print("{}\n", out.dump(2));
    return;
  }
  fmt::print("replay of {} ({} tokens, {} expert accesses) on {} slots ({})\n", flags.trace, trace.size(), accesses,
             slots, format_bytes(options.cache_bytes));
  fmt::print("  cache ({}): {:.1f}% hits, {} reads, {:.1f} MB read in {:.2f} s{}\n", flags.policy, 100 * hit_rate,
             stats.misses, stats.bytes_read / 1e6, seconds, stats.direct_io ? "" : " (page cache: O_DIRECT refused)");
  fmt::print("  LRU (simulated):    {:.1f}% hits, {} misses\n", 100 * lru.hit_rate(), lru.misses);
  fmt::print("  Belady (optimal):   {:.1f}% hits, {} misses\n", 100 * belady.hit_rate(), belady.misses);
}

}  // namespace

void add_bench_replay(CLI::App& bench) {
  auto flags = std::make_shared<ReplayFlags>();
  CLI::App* cmd = bench.add_subcommand(
      "replay", "drive the expert cache with a recorded routing trace (no compute), next to LRU and Belady");
  cmd->add_option("TRACE", flags->trace, "routing trace (JSON lines from `sluice run --trace-out`)")->required();
  cmd->add_option("--model", flags->model, "the .sluice container the trace was recorded on")->required();
  cmd->add_option("--budget", flags->budget,
                  "memory budget as for `sluice run` (default: the plan's)")
      ->check(memory_size());
  cmd->add_option("--policy", flags->policy, "the cache's eviction policy: lfru or lru")->capture_default_str();
  cmd->add_option("--readers", flags->readers, "reader threads")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  cmd->add_flag("--json", flags->json, "print JSON instead of text");
  cmd->callback([flags] { run_replay(*flags); });
}

}  // namespace sluice::cli
