// compute/cli/bench_replay.cpp: `sluice bench replay`, routing (a recorded
// trace, or synthetic routing with the statistics of real models) driven
// through the real expert cache (worker and client, no compute) when a model
// is given, next to every simulated policy and Belady over the same accesses
// and slot count. Without a model, the simulations alone at 1, 2 and 4
// working sets of a geometry. Measures, never asserts.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "compute/cli/bench_routing.h"
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
  std::string trace;    // positional: a recorded trace
  std::string routing;  // "synthetic[:SEED]" or a trace path
  std::string model;
  std::string geometry;
  std::string budget;
  std::string policy = "density";
  std::vector<double> working_sets = {1, 2, 4};
  uint32_t tokens = 300;
  uint32_t guess_layers = 1;
  uint32_t readers = 4;
  bool json = false;
};

// "olmoe", "kimi-linear", "k3" or LAYERS,EXPERTS,TOP_K.
router::RoutingGeometry parse_geometry(const std::string& text) {
  if (text == "olmoe") return {16, 64, 8};
  if (text == "kimi-linear") return {26, 256, 8};
  if (text == "k3") return {92, 896, 16};
  router::RoutingGeometry g;
  char tail = 0;
  if (std::sscanf(text.c_str(), "%u,%u,%u%c", &g.layers, &g.experts, &g.top_k, &tail) != 3 || g.layers == 0 ||
      g.experts == 0 || g.top_k == 0 || g.top_k > g.experts) {
    usage_error("--geometry: '{}' is not olmoe, kimi-linear, k3 or LAYERS,EXPERTS,TOP_K", text);
  }
  return g;
}

// Trace MoE ordinals → model layers, every expert id checked against its bank.
std::vector<uint32_t> check_against_model(const std::vector<router::ReplayRequest>& requests,
                                          const Container& container, const std::string& label) {
  std::vector<uint32_t> layers;
  for (const MoeLayerInfo& info : container.moe_layers()) layers.push_back(info.layer);
  for (const router::ReplayRequest& r : requests) {
    if (r.layer >= layers.size()) {
      fail("{}: routing has MoE layer {}, {} has {} MoE layers", label, r.layer, container.dir(), layers.size());
    }
    const uint32_t experts = container.moe_layers()[r.layer].experts;
    for (uint32_t e : r.experts) {
      if (e >= experts) fail("{}: MoE layer {} expert {} is out of range ({} experts)", label, r.layer, e, experts);
    }
  }
  return layers;
}

ioworker::EvictionPolicy cache_policy(const std::string& name) {
  switch (router::parse_policy(name, "--policy")) {
    case router::SimPolicy::kLru:
      return ioworker::EvictionPolicy::kLru;
    case router::SimPolicy::kLfru:
      return ioworker::EvictionPolicy::kLfru;
    case router::SimPolicy::kNextUse:
      return ioworker::EvictionPolicy::kNextUse;
    case router::SimPolicy::kDensity:
      return ioworker::EvictionPolicy::kDensity;
    case router::SimPolicy::kSlru:
    case router::SimPolicy::kLookahead:
    case router::SimPolicy::kS3Fifo:
    case router::SimPolicy::kTinyLfu:
    case router::SimPolicy::kCycle:
      break;
  }
  fail("--policy: '{}' is simulated only; the cache runs density, next-use, lfru or lru", name);
}

struct CacheRun {
  uint32_t slots = 0;
  uint64_t cache_bytes = 0, hits = 0, misses = 0, bytes_read = 0;
  double seconds = 0;
  bool direct_io = false;
};

CacheRun run_cache(const ReplayFlags& flags, const Container& container,
                   const std::vector<router::ReplayRequest>& requests, const std::vector<uint32_t>& layers) {
  ioworker::WorkerOptions options;
  options.readers = flags.readers;
  options.quiet = true;
  options.policy = cache_policy(flags.policy);
  options.cache_bytes = plan_for(container, flags.budget).cache_bytes;
  ioworker::Worker worker(container, options);
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
  const shm::StatsSnapshot stats = worker.stats();
  CacheRun run;
  run.slots = worker.geometry().slot_count;
  run.cache_bytes = options.cache_bytes;
  run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  run.misses = stats.misses;
  run.hits = accesses - stats.misses;
  run.bytes_read = stats.bytes_read;
  run.direct_io = stats.direct_io;
  return run;
}

nlohmann::json result_json(const router::PolicyResult& r, const router::PolicyResult& belady) {
  return {{"hits", r.hits},
          {"misses", r.misses},
          {"hit_rate", r.hit_rate()},
          {"share_of_belady", belady.hit_rate() > 0 ? r.hit_rate() / belady.hit_rate() : 0.0}};
}

// Every simulated policy and Belady at `slots`, as JSON and as a text line.
nlohmann::json simulate_all(const std::vector<router::ReplayRequest>& requests, uint32_t slots, uint32_t layers,
                            uint32_t guess_layers, std::string& line) {
  const router::PolicyResult belady = router::simulate_belady(requests, slots);
  nlohmann::json out = {
      {"slots", slots}, {"belady", result_json(belady, belady)}, {"policies", nlohmann::json::object()}};
  line = fmt::format("Belady {:.1f}%", 100 * belady.hit_rate());
  for (router::SimPolicy p : router::kAllPolicies) {
    const router::PolicyResult r = router::simulate(requests, slots, layers, p, 0x5eed, guess_layers);
    out["policies"][router::policy_name(p)] = result_json(r, belady);
    line += fmt::format(", {} {:.1f}% ({:.2f})", router::policy_name(p), 100 * r.hit_rate(),
                        belady.hit_rate() > 0 ? r.hit_rate() / belady.hit_rate() : 0.0);
  }
  return out;
}

void run_replay(const ReplayFlags& flags) {
  if (flags.model.empty() == flags.geometry.empty()) fail("bench replay: give exactly one of --model and --geometry");
  std::optional<Container> container;
  if (!flags.model.empty()) container.emplace(Container::open(flags.model));
  const router::RoutingGeometry geometry = container ? moe_geometry(*container) : parse_geometry(flags.geometry);
  const std::string source = flags.routing.empty() ? flags.trace : flags.routing;
  if (source.empty()) fail("bench replay: give a TRACE or --routing synthetic[:SEED]");
  const auto [trace, label] = load_bench_routing(source, geometry, flags.tokens);
  const std::vector<router::ReplayRequest> requests = router::replay_requests(trace);
  uint64_t accesses = 0;
  for (const router::ReplayRequest& r : requests) accesses += r.experts.size();
  const uint32_t layers = static_cast<uint32_t>(trace.front().layers.size());
  const uint64_t working_set = uint64_t{geometry.top_k} * layers;

  nlohmann::json out = {
      {"routing", label},
      {"geometry", {{"moe_layers", layers}, {"experts", geometry.experts}, {"top_k", geometry.top_k}}},
      {"tokens", trace.size()},
      {"guess_layers", flags.guess_layers},
      {"accesses", accesses},
      {"working_set_slots", working_set},
      {"sizes", nlohmann::json::array()}};
  std::vector<std::string> lines;
  if (container) {
    const std::vector<uint32_t> model_layers = check_against_model(requests, *container, label);
    const CacheRun run = run_cache(flags, *container, requests, model_layers);
    std::string line;
    nlohmann::json size = simulate_all(requests, run.slots, layers, flags.guess_layers, line);
    const double belady = size["belady"]["hit_rate"];
    const double hit_rate = accesses ? double(run.hits) / double(accesses) : 0.0;
    size["working_sets"] = double(run.slots) / double(working_set);
    size["cache"] = {{"policy", flags.policy},
                     {"cache_bytes", run.cache_bytes},
                     {"hits", run.hits},
                     {"misses", run.misses},
                     {"hit_rate", hit_rate},
                     {"share_of_belady", belady > 0 ? hit_rate / belady : 0.0},
                     {"bytes_read", run.bytes_read},
                     {"seconds", run.seconds},
                     {"direct_io", run.direct_io}};
    out["model"] = flags.model;
    out["sizes"].push_back(size);
    lines.push_back(fmt::format("{} slots ({}): cache ({}) {:.1f}% hits, {:.1f} MB read in {:.2f} s{}; {}", run.slots,
                                format_bytes(run.cache_bytes), flags.policy, 100 * hit_rate, run.bytes_read / 1e6,
                                run.seconds, run.direct_io ? "" : " (page cache)", line));
  } else {
    for (double multiple : flags.working_sets) {
      if (!(multiple > 0)) fail("--working-sets: {} is not a positive multiple", multiple);
      const auto slots = static_cast<uint32_t>(std::max<double>(geometry.top_k, multiple * double(working_set)));
      std::string line;
      nlohmann::json size = simulate_all(requests, slots, layers, flags.guess_layers, line);
      size["working_sets"] = multiple;
      out["sizes"].push_back(size);
      lines.push_back(fmt::format("{}x working set ({} slots): {}", multiple, slots, line));
    }
  }
  if (flags.json) {
    fmt::print("{}\n", out.dump(2));
    return;
  }
  fmt::print(
      "replay of {} ({} tokens, {} expert accesses; {} x {} top-{}); hit rate (share of "
      "Belady's)\n",
      label, trace.size(), accesses, layers, geometry.experts, geometry.top_k);
  for (const std::string& line : lines) fmt::print("  {}\n", line);
}

}  // namespace

void add_bench_replay(CLI::App& bench) {
  auto flags = std::make_shared<ReplayFlags>();
  CLI::App* cmd = bench.add_subcommand(
      "replay", "drive the expert cache with routing (no compute), next to simulated policies and Belady");
  cmd->add_option("TRACE", flags->trace, "routing trace (JSON lines from `sluice run --trace-out`)");
  cmd->add_option("--routing", flags->routing,
                  "synthetic[:SEED] (the statistics of real routing for the geometry) or a trace file");
  cmd->add_option("--model", flags->model, "the .sluice container: also drive its real cache at --budget");
  cmd->add_option("--geometry", flags->geometry,
                  "without a model, simulate only: olmoe, kimi-linear, k3 or LAYERS,EXPERTS,TOP_K");
  cmd->add_option("--working-sets", flags->working_sets, "without a model: cache sizes in working sets")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--tokens", flags->tokens, "tokens of synthetic routing")->capture_default_str();
  cmd->add_option("--guess-layers", flags->guess_layers,
                  "MoE layers ahead the simulated lookahead guesses (sluice-router: 1), a what-if")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024));
  cmd->add_option("--budget", flags->budget, "memory budget as for `sluice run` (default: the plan's)")
      ->check(memory_size());
  cmd->add_option("--policy", flags->policy, "the real cache's eviction policy: density, next-use, lfru or lru")
      ->capture_default_str();
  cmd->add_option("--readers", flags->readers, "reader threads")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  cmd->add_flag("--json", flags->json, "print JSON instead of text");
  cmd->callback([flags] { run_replay(*flags); });
}

}  // namespace sluice::cli
