// tests/compute/tokenizer/tiny_checkpoint_test.cpp: the tokenizer files that
// scripts/make_tiny_checkpoint.py writes (OLMoE and Qwen3-MoE) load, round-trip
// text, and agree with the Python oracle in scripts/sluicepy/bpe.py on ASCII.
#include <doctest/doctest.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "compute/tokenizer/tokenizer.h"

namespace fs = std::filesystem;
using sluice::tokenizer::TokenId;
using sluice::tokenizer::Tokenizer;

namespace {

std::string env(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v ? v : fallback;
}

const std::vector<std::string> kAscii = {
    "Hello world, this is a tiny model.", "The experts are read from disk when the router picks them.",
    "don't stop: it's 12345 o'clock!\n\n  indented\tline\r\n", "a  b   c    d", "<|im_start|>user\nhi<|im_end|>\n",
    "x = [1, 2, 3]; y = {'k': 'v'}", "   ", "", "THE QUICK BROWN FOX'S TAIL"};
const std::vector<std::string> kUnicode = {"Größe und Straße", "日本語のテキスト", "e\u0301 composed", "😀 emoji 👍🏽",
                                           "Съешь ещё"};

void check_family(const std::string& family) {
  char dir_template[] = "/tmp/sluice-tok-tiny-XXXXXX";
  const std::string dir = mkdtemp(dir_template);
  const std::string root = env("SLUICE_SOURCE_ROOT", ".");
  const std::string python = env("PYTHON", "/usr/bin/python3");
  const std::string make = python + " '" + root + "/scripts/make_tiny_checkpoint.py' " + family + " '" + dir + "'";
  REQUIRE_MESSAGE(std::system(make.c_str()) == 0, make);

  const Tokenizer tok = Tokenizer::load(dir + "/tokenizer.json", dir + "/tokenizer_config.json");
  CHECK(tok.eos_id().has_value());
  for (const auto& s : kAscii) {
    CAPTURE(s);
    CHECK(tok.decode(tok.encode(s)) == s);
    CHECK(tok.decode(tok.encode_with_specials(s)) == s);
  }
  for (const auto& s : kUnicode) {
    CAPTURE(s);
    const std::string expected = s == "e\u0301 composed" ? "\u00e9 composed" : s;  // both families normalize NFC
    CHECK(tok.decode(tok.encode(s)) == expected);
  }

  // The oracle splits with Python's re, exact on ASCII only; it recognises
  // added tokens, so compare it with encode_with_specials.
  const std::string oracle = python + " -c \"import json, sys; sys.path.insert(0, sys.argv[1]); "
                             "from sluicepy import bpe; t = bpe.Tokenizer.from_file(sys.argv[2]); "
                             "[print(json.dumps(t.encode(json.loads(l)))) for l in sys.stdin]\" '" + root +
                             "/scripts' '" + dir + "/tokenizer.json' < '" + dir + "/in.jsonl' > '" + dir + "/out.jsonl'";
  {
    std::ofstream in(dir + "/in.jsonl");
    for (const auto& s : kAscii) in << nlohmann::json(s).dump() << "\n";
  }
  REQUIRE_MESSAGE(std::system(oracle.c_str()) == 0, oracle);
  std::ifstream out(dir + "/out.jsonl");
  std::string line;
  size_t i = 0;
  for (; std::getline(out, line) && i < kAscii.size(); ++i) {
    CAPTURE(kAscii[i]);
    CHECK(tok.encode_with_specials(kAscii[i]) == nlohmann::json::parse(line).get<std::vector<TokenId>>());
  }
  CHECK(i == kAscii.size());
  fs::remove_all(dir);
}

}  // namespace

TEST_CASE("OLMoE tiny tokenizer") { check_family("olmoe"); }
TEST_CASE("Qwen3-MoE tiny tokenizer") { check_family("qwen3_moe"); }
