// compute/cli/bench_mixer.cpp: `sluice bench mixer`, one decode step of each
// mixer kind a container has (GQA or MLA, and KDA), with its projections, on
// the container's own trunk weights, at chosen context lengths. The cache
// rows below the position come from single steps of the mixer on one random
// input: a step's cost depends on how many rows there are, not on what they
// say, and no layer but the one measured runs. Measures, never asserts;
// loads only the trunk, never an expert.
#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "compute/cli/commands.h"
#include "compute/kernels/dispatch.h"
#include "compute/kernels/thread_pool.h"
#include "compute/model/mixer.h"
#include "compute/model/weights.h"
#include "proto/container.h"
#include "proto/error.h"
#include "proto/model_config.h"

namespace sluice::cli {

namespace {

struct MixerFlags {
  std::string model;
  std::vector<uint32_t> contexts{64, 1024, 4096};
  uint32_t tokens = 1;
  double seconds = 1.0;
  std::optional<size_t> threads;
  bool json = false;
};

struct MixerCase {
  std::string kind;
  uint32_t layer = 0, context = 0, runs = 0;
  double median_seconds = 0, min_seconds = 0;
};

void fill_random(std::span<float> values, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float& v : values) v = normal(rng);
}

// Times forward() of `tokens` tokens at position `context` until `seconds`
// have passed (at least 3 runs); every run rewrites the same rows.
MixerCase time_mixer(Mixer& mixer, const std::string& kind, uint32_t layer, uint32_t context, const MixerFlags& flags,
                     uint32_t hidden) {
  std::mt19937 rng(context + layer);
  MixerState state = mixer.make_state();
  // Positions below `context`, filled by chunks through the mixer itself
  // (so a cache in halves gets halves); their time is not measured.
  constexpr uint32_t kFillChunk = 64;
  std::vector<float> filler(size_t{kFillChunk} * hidden), sink(filler.size());
  fill_random(filler, rng);
  for (uint32_t p = 0; p < context && state.slots() > 0; p += kFillChunk)
    mixer.forward(layer, filler.data(), std::min(kFillChunk, context - p), p, state, sink.data());
  // A recurrent state of the size a real one has: small, so no step overflows.
  for (float& v : state.fixed()) v = 0.01f * std::normal_distribution<float>(0.0f, 1.0f)(rng);
  std::vector<float> normed(size_t{flags.tokens} * hidden), out(normed.size());
  fill_random(normed, rng);
  std::vector<double> seconds;
  const auto begin = std::chrono::steady_clock::now();
  while (seconds.size() < 3 ||
         std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count() < flags.seconds) {
    const auto start = std::chrono::steady_clock::now();
    mixer.forward(layer, normed.data(), flags.tokens, context, state, out.data());
    seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  MixerCase c{kind, layer, context, static_cast<uint32_t>(seconds.size())};
  c.min_seconds = *std::min_element(seconds.begin(), seconds.end());
  c.median_seconds = median(seconds);
  return c;
}

void run_mixer_bench(const MixerFlags& flags) {
  const Container container = Container::open(flags.model);
  const ModelConfig config = ModelConfig::from_json(container.arch(), container.config());
  uint32_t longest = 0;
  for (uint32_t c : flags.contexts) longest = std::max(longest, c);
  if (longest + flags.tokens > config.max_positions)
    fail("--context {}: the model's max_position_embeddings is {}", longest, config.max_positions);
  const bool terminal = !flags.json && isatty(STDERR_FILENO);
  if (terminal) fmt::print(stderr, "loading the trunk of {}...", flags.model);
  const ModelWeights weights = ModelWeights::load(container, config);
  kernels::ThreadPool pool(kernels::resolve_thread_count(flags.threads));
  const kernels::Exec exec{kernels::isa_from_environment(), &pool, kernels::trunk_activations_from_environment()};
  const uint32_t capacity = longest + flags.tokens;

  std::vector<MixerCase> cases;
  auto bench_kind = [&](std::unique_ptr<Mixer> mixer, const std::string& kind, bool kda) {
    uint32_t layer = 0;
    while (layer < config.layers && config.is_kda(layer) != kda) ++layer;
    if (layer == config.layers) return;
    // KDA's state does not grow with the context: one case says its cost.
    const std::vector<uint32_t> contexts = kda ? std::vector<uint32_t>{flags.contexts.front()} : flags.contexts;
    for (uint32_t context : contexts) {
      if (terminal) fmt::print(stderr, "\r\033[K{} layer {} at context {}...", kind, layer, context);
      cases.push_back(time_mixer(*mixer, kind, layer, context, flags, config.hidden));
    }
  };
  bench_kind(make_mixer(config, weights, capacity, exec), config.mixer == MixerKind::kGqa ? "gqa" : "mla", false);
  if (config.kda_layers() > 0) bench_kind(make_kda_mixer(config, weights, capacity, exec), "kda", true);
  if (terminal) fmt::print(stderr, "\r\033[K");

  if (flags.json) {
    nlohmann::json out = {{"model", flags.model},
                          {"isa", kernels::isa_name(exec.isa)},
                          {"trunk_activations", kernels::trunk_activations_name(exec.trunk)},
                          {"threads", pool.size()},
                          {"tokens", flags.tokens},
                          {"cases", nlohmann::json::array()}};
    for (const MixerCase& c : cases)
      out["cases"].push_back({{"kind", c.kind},
                              {"layer", c.layer},
                              {"context", c.context},
                              {"runs", c.runs},
                              {"median_seconds", c.median_seconds},
                              {"min_seconds", c.min_seconds}});
    fmt::print("{}\n", out.dump(2));
    return;
  }
  fmt::print("{}: {} token(s) a step, {} thread(s), {} kernels, {} activations\n", flags.model, flags.tokens,
             pool.size(), kernels::isa_name(exec.isa), kernels::trunk_activations_name(exec.trunk));
  fmt::print("{:<5} {:>6} {:>8} {:>10} {:>10} {:>5}\n", "kind", "layer", "context", "median ms", "min ms", "runs");
  for (const MixerCase& c : cases)
    fmt::print("{:<5} {:>6} {:>8} {:>10.3f} {:>10.3f} {:>5}\n", c.kind, c.layer, c.context, c.median_seconds * 1e3,
               c.min_seconds * 1e3, c.runs);
}

}  // namespace

void add_bench_mixer(CLI::App& bench) {
  auto flags = std::make_shared<MixerFlags>();
  CLI::App* cmd = bench.add_subcommand(
      "mixer", "time one decode step of each mixer kind (GQA or MLA, KDA) with its projections, at context lengths");
  cmd->add_option("MODEL", flags->model, "the .sluice container (only its trunk is loaded)")->required();
  cmd->add_option("--context", flags->contexts, "cached positions before the step, e.g. 64,1024,4096")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("-n,--tokens", flags->tokens, "tokens in the step (1: decode; more: a prefill chunk)")
      ->capture_default_str()
      ->check(at_least_one());
  cmd->add_option("--seconds", flags->seconds, "time budget per case; each case runs at least 3 times")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 600.0));
  cmd->add_option("--threads", flags->threads, "compute threads (default: SLUICE_THREADS or every core)")
      ->check(at_least_one());
  cmd->add_flag("--json", flags->json, "print JSON instead of a table");
  cmd->callback([flags] { run_mixer_bench(*flags); });
}

}  // namespace sluice::cli
