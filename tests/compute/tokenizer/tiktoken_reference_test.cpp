// tests/compute/tokenizer/tiktoken_reference_test.cpp: the tiktoken path
// against js-tiktoken (an implementation no one here wrote) with its bundled
// cl100k_base and o200k_base ranks, written out as tiktoken.model files at
// test time, and Kimi's split pattern against V8's regex engine, on >1,000
// generated strings. Skips (exit 77) only when
// tests/npm/node_modules/js-tiktoken or node is missing.
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

#include "compute/tokenizer/pre_tokenizer.h"
#include "compute/tokenizer/tokenizer.h"
#include "compute/tokenizer/unicode.h"
#include "tests/compute/tokenizer/reference_inputs.h"

namespace fs = std::filesystem;
using sluice::tokenizer::SplitPattern;
using sluice::tokenizer::TiktokenPattern;
using sluice::tokenizer::TokenId;
using sluice::tokenizer::Tokenizer;
using namespace sluice::test_inputs;

namespace {

fs::path npm_dir() {
  const char* root = std::getenv("SLUICE_SOURCE_ROOT");
  return fs::path(root ? root : ".") / "tests" / "npm";
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

struct TempDir {
  std::string path;
  TempDir() {
    char dir_template[] = "/tmp/sluice-tiktoken-ref-XXXXXX";
    const char* dir = mkdtemp(dir_template);
    REQUIRE(dir != nullptr);
    path = dir;
  }
  ~TempDir() { fs::remove_all(path); }
};

void node(const std::string& args) {
  const std::string command =
      "node '" + (npm_dir() / "tiktoken_reference.js").string() + "' " + args;
  REQUIRE_MESSAGE(std::system(command.c_str()) == 0, "js-tiktoken failed: " << command);
}

// Strings aimed at the rules that tell cl100k and o200k apart: case changes
// inside words, titlecase and modifier letters, marks, Han next to Latin,
// o200k's '/' after punctuation, contractions in every case.
std::vector<std::string> tiktoken_inputs() {
  std::vector<std::string> inputs = make_inputs(20261129);
  for (const char* s :
       {"HTTPServer getHTTPResponse XMLHttpRequest iPhone McDonald'S", "\u01C5emal \u01C8 \u01CBx",
        "A\u02B0 \u02B0a \u02B0", "e\u0301\u0301 \u0301A \u0301", "!\n/path x//\n//y ?/\n\n/",
        "\u4E2D\u6587ABC\u6D4B\u8BD5abc \u4E2D\u0301", "I'M WE'LL don'T they'Re it'\u017F",
        "\u3007\u4E00\u4E8C \u4EBA\u3005", " \u4E2D\t\u4E2D\n\u4E2D",
        "12345 \u0663\u0664\u0665\u0666"}) {
    inputs.emplace_back(s);
  }
  return inputs;
}

void compare_with_js_tiktoken(const std::string& encoding, TiktokenPattern pattern,
                              SplitPattern split) {
  const TempDir dir;
  node(encoding + " export '" + dir.path + "'");
  // The matcher implements the very pattern the package ships.
  CHECK(read_text(fs::path(dir.path) / "pattern.txt") ==
        sluice::tokenizer::tiktoken_pattern_text(split));
  const Tokenizer tok = Tokenizer::load_tiktoken(dir.path + "/tiktoken.model",
                                                 dir.path + "/tokenizer_config.json", pattern);
  REQUIRE(tok.eos_id().has_value());
  CHECK(tok.is_special(*tok.eos_id()));

  const auto inputs = tiktoken_inputs();
  {
    std::ofstream in(fs::path(dir.path) / "in.jsonl", std::ios::binary);
    for (const auto& s : inputs) in << "{\"b64\":\"" << base64_encode(s) << "\"}\n";
  }
  node(encoding + " encode < '" + dir.path + "/in.jsonl' > '" + dir.path + "/out.jsonl'");
  std::ifstream out(fs::path(dir.path) / "out.jsonl", std::ios::binary);
  size_t compared = 0, mismatches = 0, invalid = 0, with_specials = 0;
  std::string line;
  while (std::getline(out, line) && mismatches < 10) {
    REQUIRE(compared < inputs.size());
    const std::string& s = inputs[compared];
    const auto j = nlohmann::json::parse(line);
    const auto expected_markup = j["markup"].get<std::vector<TokenId>>();
    const auto expected_content = j["content"].get<std::vector<TokenId>>();
    const std::string text = base64_decode(j["text_b64"].get<std::string>());
    CAPTURE(compared);
    CAPTURE(s);
    const auto markup = tok.encode_with_specials(s);
    const auto content = tok.encode(s);
    CHECK(sluice::tokenizer::repair_utf8(s) == text);
    CHECK(content == expected_content);
    CHECK(markup == expected_markup);
    if (content != expected_content || markup != expected_markup) ++mismatches;
    if (markup != content) ++with_specials;
    CHECK(tok.decode(content) == base64_decode(j["decoded_b64"].get<std::string>()));
    CHECK(tok.decode(content) == text);
    CHECK(tok.decode(markup) == text);
    if (sluice::tokenizer::is_valid_utf8(s)) {
      CHECK(tok.decode(content) == s);
    } else {
      ++invalid;
    }
    ++compared;
  }
  CHECK(mismatches == 0);
  CHECK(compared == inputs.size());
  CHECK(with_specials > 0);  // the markup path really met special-token text
  MESSAGE(encoding << ": " << compared << " strings (" << invalid << " with broken UTF-8, "
                   << with_specials << " with special tokens) compared");
}

std::vector<std::string> kimi_pieces(const std::string& text) {
  std::u32string chars;
  sluice::tokenizer::decode_utf8(sluice::tokenizer::repair_utf8(text), chars);
  std::vector<sluice::tokenizer::Piece> pieces;
  sluice::tokenizer::PreTokenizer(
      {{sluice::tokenizer::PreTokenizerStep::Kind::kSplit, SplitPattern::kKimi, false, false}})
      .split(chars, pieces);
  std::vector<std::string> out;
  for (const auto& p : pieces) {
    std::string s;
    for (uint32_t i = p.begin; i < p.end; ++i) sluice::tokenizer::append_utf8(s, chars[i]);
    out.push_back(s);
  }
  return out;
}

}  // namespace

TEST_CASE("Kimi's split pattern: the same pieces as V8's regex engine running it") {
  const TempDir dir;
  const auto inputs = tiktoken_inputs();
  {
    std::ofstream in(fs::path(dir.path) / "in.jsonl", std::ios::binary);
    for (const auto& s : inputs) in << "{\"b64\":\"" << base64_encode(s) << "\"}\n";
  }
  node("kimi split < '" + dir.path + "/in.jsonl' > '" + dir.path + "/out.jsonl'");
  std::ifstream out(fs::path(dir.path) / "out.jsonl", std::ios::binary);
  size_t compared = 0, mismatches = 0, pieces = 0;
  std::string line;
  while (std::getline(out, line) && mismatches < 10) {
    REQUIRE(compared < inputs.size());
    const auto j = nlohmann::json::parse(line);
    std::vector<std::string> expected;
    for (const auto& p : j["pieces_b64"]) expected.push_back(base64_decode(p.get<std::string>()));
    CAPTURE(compared);
    CAPTURE(inputs[compared]);
    const auto got = kimi_pieces(inputs[compared]);
    CHECK_MESSAGE(
        got == expected,
        "got " << nlohmann::json(got).dump(-1, ' ', true, nlohmann::json::error_handler_t::replace)
               << "\nV8  "
               << nlohmann::json(expected).dump(-1, ' ', true,
                                                nlohmann::json::error_handler_t::replace));
    if (got != expected) ++mismatches;
    pieces += got.size();
    ++compared;
  }
  CHECK(mismatches == 0);
  CHECK(compared == inputs.size());
  MESSAGE("Kimi split: " << compared << " strings, " << pieces << " pieces compared");
}

TEST_CASE("cl100k_base: same ids as js-tiktoken, decode inverts encode") {
  compare_with_js_tiktoken("cl100k_base", TiktokenPattern::kCl100k, SplitPattern::kCl100k);
}

TEST_CASE("o200k_base: same ids as js-tiktoken, decode inverts encode") {
  compare_with_js_tiktoken("o200k_base", TiktokenPattern::kO200k, SplitPattern::kO200k);
}

int main(int argc, char** argv) {
  if (!fs::exists(npm_dir() / "node_modules" / "js-tiktoken")) {
    std::fprintf(
        stderr,
        "SKIP: %s/node_modules/js-tiktoken is missing; run scripts/setup (npm ci in tests/npm)\n",
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
