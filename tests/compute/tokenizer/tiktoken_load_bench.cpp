// tests/compute/tokenizer/tiktoken_load_bench.cpp: how long loading a
// tiktoken rank file takes — a synthetic file of Kimi's size (163,584 ranks,
// 256 specials named from a config) and, when js-tiktoken is installed, the
// real o200k_base ranks (199,998) — and encode throughput on the reference
// tests' varied strings. Prints one JSON object per file; run with
// `meson test --benchmark`.
#include <fmt/format.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "compute/tokenizer/tokenizer.h"
#include "tests/compute/tokenizer/bench_clock.h"
#include "tests/compute/tokenizer/tiny_tokenizer.h"

namespace fs = std::filesystem;
using sluice::tokenizer::TiktokenPattern;
using sluice::tokenizer::Tokenizer;

using sluice::testing::cpu_seconds;
using sluice::testing::median;

namespace {

constexpr int kRuns = 9;

// About 1 MB of the reference tests' strings (valid UTF-8 only).
std::string varied_text() {
  std::string text;
  for (uint64_t seed = 1; text.size() < (1u << 20); ++seed) {
    for (const auto& s : sluice::test_inputs::make_inputs(seed)) {
      if (sluice::tokenizer::is_valid_utf8(s)) text += s;
    }
  }
  return text;
}

void measure(const std::string& name, const std::string& ranks, const std::string& config,
             TiktokenPattern pattern, const std::string& text) {
  std::vector<double> wall, cpu, encode_cpu;
  size_t vocab = 0, tokens = 0;
  for (int run = 0; run < kRuns; ++run) {
    const double cpu_start = cpu_seconds();
    const auto start = std::chrono::steady_clock::now();
    const Tokenizer tok = Tokenizer::load_tiktoken(ranks, config, pattern);
    wall.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    cpu.push_back(cpu_seconds() - cpu_start);
    vocab = tok.vocab_size();
    const double encode_start = cpu_seconds();
    tokens = tok.encode(text).size();
    encode_cpu.push_back(cpu_seconds() - encode_start);
  }
  fmt::print(
      "{{\"file\": \"{}\", \"bytes\": {}, \"vocab\": {}, \"runs\": {}, "
      "\"load_wall_ms_median\": {:.1f}, \"load_wall_ms_min\": {:.1f}, \"load_cpu_ms_median\": "
      "{:.1f}, "
      "\"encode_bytes\": {}, \"encode_tokens\": {}, \"encode_mb_per_cpu_s_median\": {:.2f}}}\n",
      name, fs::file_size(ranks), vocab, kRuns, median(wall) * 1e3,
      *std::min_element(wall.begin(), wall.end()) * 1e3, median(cpu) * 1e3, text.size(), tokens,
      text.size() / median(encode_cpu) / 1e6);
}

}  // namespace

int main() {
  const std::string text = varied_text();
  char dir_template[] = "/tmp/sluice-tiktoken-bench-XXXXXX";
  const std::string dir = mkdtemp(dir_template);
  nlohmann::json decoder = nlohmann::json::object();
  for (int id : {163584, 163585, 163586, 163587, 163588, 163601}) {
    decoder[std::to_string(id)] = {{"content", fmt::format("<|named_{}|>", id)}, {"special", true}};
  }
  std::ofstream(dir + "/tiktoken.model", std::ios::binary) << tiny::kimi_sized_ranks();
  std::ofstream(dir + "/tokenizer_config.json")
      << nlohmann::json({{"added_tokens_decoder", decoder}, {"eos_token", "<|named_163585|>"}})
             .dump();
  measure("synthetic kimi-sized tiktoken.model", dir + "/tiktoken.model",
          dir + "/tokenizer_config.json", TiktokenPattern::kKimi, text);

  const char* root = std::getenv("SLUICE_SOURCE_ROOT");
  const fs::path npm = fs::path(root ? root : ".") / "tests" / "npm";
  const std::string o200k = dir + "/o200k";
  fs::create_directory(o200k);
  const std::string command = "node '" + (npm / "tiktoken_reference.js").string() +
                              "' o200k_base export '" + o200k + "' 2> /dev/null";
  if (fs::exists(npm / "node_modules" / "js-tiktoken") && std::system(command.c_str()) == 0) {
    measure("o200k_base from js-tiktoken", o200k + "/tiktoken.model",
            o200k + "/tokenizer_config.json", TiktokenPattern::kO200k, text);
  }
  fs::remove_all(dir);
  return 0;
}
