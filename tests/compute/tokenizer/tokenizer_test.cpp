// tests/compute/tokenizer/tokenizer_test.cpp: the public Tokenizer — markup
// versus content, decoding and streaming, tokenizer_config.json, and refusal
// of malformed tokenizer.json files with messages that name the problem.
#include <doctest/doctest.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>

#include "compute/tokenizer/tokenizer.h"
#include "proto/error.h"
#include "tests/compute/tokenizer/tiny_tokenizer.h"

using namespace sluice::tokenizer;
using nlohmann::json;

namespace {

constexpr TokenId kSpecial = 300;   // "<|x|>", special
constexpr TokenId kControl = 301;   // "<tool>", added but not special

tiny::Spec spec_with_added() {
  tiny::Spec spec;
  spec.merges = {{"a", "b"}};  // "ab" is 256
  spec.added = json::array({tiny::added_token(kSpecial, "<|x|>", true), tiny::added_token(kControl, "<tool>", false)});
  return spec;
}

Tokenizer tokenizer_of(const tiny::Spec& spec, const std::string& config = "") {
  return Tokenizer::from_json(tiny::json_of(spec).dump(), "tiny.json", config, "tiny_config.json");
}

std::vector<TokenId> bytes_of(std::string_view s) {
  std::vector<TokenId> ids;
  for (char c : s) ids.push_back(static_cast<uint8_t>(c));
  return ids;
}

void check_refused(const json& doc, const std::string& expected) {
  CAPTURE(doc.dump().substr(0, 300));
  CHECK_THROWS_WITH_AS(Tokenizer::from_json(doc.dump(), "bad.json"), doctest::Contains(expected.c_str()), sluice::Error);
}

}  // namespace

TEST_CASE("special-token text is a control token only in markup") {
  const Tokenizer tok = tokenizer_of(spec_with_added());
  CHECK(tok.encode_with_specials("ab<|x|>c") == std::vector<TokenId>{256, kSpecial, 'c'});
  CHECK(tok.encode_with_specials("<tool>") == std::vector<TokenId>{kControl});
  const auto content = tok.encode("ab<|x|>c<tool>");
  CHECK(std::find(content.begin(), content.end(), kSpecial) == content.end());
  CHECK(std::find(content.begin(), content.end(), kControl) == content.end());
  CHECK(tok.decode(content) == "ab<|x|>c<tool>");
  CHECK(tok.decode(tok.encode_with_specials("ab<|x|>c")) == "ab<|x|>c");
  CHECK(tok.decode(tok.encode_with_specials("ab<|x|>c"), true) == "abc");
  CHECK(tok.is_special(kSpecial));
  CHECK(!tok.is_special(kControl));
}

TEST_CASE("vocabulary lookups use tokenizer.json spellings") {
  const Tokenizer tok = tokenizer_of(spec_with_added());
  CHECK(tok.vocab_size() == 302);
  CHECK(tok.token_to_id("\u0120") == ' ');  // byte-level 'Ġ'
  CHECK(tok.token_to_id("ab") == 256);
  CHECK(tok.token_to_id("<|x|>") == kSpecial);
  CHECK(!tok.token_to_id("zz").has_value());
  CHECK(tok.id_to_token(' ') == "\u0120");
  CHECK(!tok.id_to_token(280).has_value());  // a hole between the merges and the added tokens
  CHECK(!tok.id_to_token(-1).has_value());
  CHECK_THROWS_WITH_AS(tok.decode(std::vector<TokenId>{5000}), doctest::Contains("5000"), sluice::Error);
}

TEST_CASE("broken UTF-8 encodes as U+FFFD would") {
  const Tokenizer tok = tokenizer_of(spec_with_added());
  CHECK(tok.encode("a\xFF" "b") == tok.encode("a\uFFFD" "b"));
  CHECK(tok.encode("\xF0\x9F\x98") == tok.encode("\uFFFD"));
}

TEST_CASE("the NFC normalizer applies to content but decoding does not undo it") {
  tiny::Spec spec = spec_with_added();
  spec.normalizer = {{"type", "Sequence"}, {"normalizers", json::array({{{"type", "NFC"}}})}};
  const Tokenizer tok = tokenizer_of(spec);
  CHECK(tok.encode("e\u0301") == bytes_of("\u00E9"));
  CHECK(tok.decode(tok.encode("e\u0301")) == "\u00E9");
  const Tokenizer plain = tokenizer_of(spec_with_added());
  CHECK(plain.encode("e\u0301") == bytes_of("e\u0301"));
}

TEST_CASE("the streaming decoder emits only complete characters") {
  const Tokenizer tok = tokenizer_of(spec_with_added());
  StreamingDecoder stream(tok);
  CHECK(stream.push(0xC3) == "");
  CHECK(stream.push(0xA9) == "\u00E9");
  CHECK(stream.push(0xF0) == "");
  CHECK(stream.push(0x9F) == "");
  CHECK(stream.push(0x98) == "");
  CHECK(stream.push(0x80) == "\U0001F600");
  CHECK(stream.push('a') == "a");
  CHECK(stream.push(0xFF) == "\uFFFD");      // never valid: emitted at once
  CHECK(stream.push(0xE2) == "");
  CHECK(stream.push(kSpecial) == "\uFFFD<|x|>");  // the pending lead byte is now known broken
  CHECK(stream.push(0xC3) == "");
  CHECK(stream.finish() == "\uFFFD");
  CHECK(stream.finish() == "");
}

TEST_CASE("streamed text always equals decoding the whole sequence") {
  const Tokenizer tok = tokenizer_of(spec_with_added());
  std::mt19937 rng(7);
  for (int round = 0; round < 200; ++round) {
    std::vector<TokenId> ids;
    const int n = 1 + static_cast<int>(rng() % 12);
    for (int i = 0; i < n; ++i) {
      const uint32_t r = rng() % 10;
      ids.push_back(r == 0 ? kSpecial : r < 4 ? static_cast<TokenId>(rng() % 128) : static_cast<TokenId>(0x80 + rng() % 0x78));
    }
    StreamingDecoder stream(tok);
    std::string streamed;
    for (TokenId id : ids) streamed += stream.push(id);
    streamed += stream.finish();
    CHECK(streamed == tok.decode(ids));
  }
}

TEST_CASE("tokenizer_config.json supplies bos, eos and add_bos_token") {
  const json config = {{"add_bos_token", true}, {"bos_token", {{"__type", "AddedToken"}, {"content", "<|x|>"}}},
                       {"eos_token", "<tool>"}};
  const Tokenizer tok = tokenizer_of(spec_with_added(), config.dump());
  CHECK(tok.bos_id() == kSpecial);
  CHECK(tok.eos_id() == kControl);
  CHECK(tok.add_bos());
  const Tokenizer bare = tokenizer_of(spec_with_added());
  CHECK(!bare.bos_id().has_value());
  CHECK(!bare.add_bos());
  CHECK_THROWS_WITH_AS(tokenizer_of(spec_with_added(), R"({"eos_token": "<missing>"})"),
                       doctest::Contains("tiny_config.json: eos_token \"<missing>\""), sluice::Error);
}

TEST_CASE("malformed tokenizer.json files are refused with the reason") {
  CHECK_THROWS_WITH_AS(Tokenizer::from_json("{\"model\": ", "bad.json"), doctest::Contains("bad.json: not valid JSON"),
                       sluice::Error);
  const json good = tiny::json_of(spec_with_added());
  CHECK_NOTHROW(Tokenizer::from_json(good.dump(), "good.json"));
  json doc = good;
  doc.erase("model");
  check_refused(doc, "has no \"model\"");
  doc = good;
  doc["model"]["vocab"]["zz"] = "seven";
  check_refused(doc, "model.vocab[\"zz\"] is not an integer id");
  doc = good;
  doc["model"]["vocab"]["zz"] = -3;
  check_refused(doc, "outside 0..");
  doc = good;
  doc["model"]["vocab"]["zz"] = 1LL << 40;
  check_refused(doc, "outside 0..");
  doc = good;
  doc["model"]["vocab"]["zz"] = 5;
  check_refused(doc, "reuses id 5");
  doc = good;
  doc["model"]["merges"].push_back("q zz");
  check_refused(doc, "model.merges[1] uses \"zz\", which is not in model.vocab");
  doc = good;
  doc["model"]["merges"].push_back("abc");
  check_refused(doc, "model.merges[1] is \"abc\", not two tokens");
  doc = good;
  doc["model"]["merges"] = json::array({json::array({"a", "b"}), 3});
  check_refused(doc, "model.merges[1] is neither");
  doc = good;
  doc["model"]["type"] = "WordPiece";
  check_refused(doc, "only BPE");
  doc = good;
  doc["model"]["dropout"] = 0.1;
  check_refused(doc, "dropout");
  doc = good;
  doc["normalizer"] = {{"type", "Lowercase"}};
  check_refused(doc, "normalizer is a \"Lowercase\" normalizer");
  doc = good;
  doc["pre_tokenizer"] = {{"type", "Sequence"},
                          {"pretokenizers",
                           json::array({{{"type", "Split"}, {"pattern", {{"Regex", "\\w+"}}}, {"behavior", "Isolated"}},
                                        tiny::gpt2_byte_level()})}};
  check_refused(doc, "pre_tokenizer.pretokenizers[0].pattern.Regex \"\\\\w+\" is not one of the recognised");
  doc["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "\\p{N}{1,3}";
  doc["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Removed";
  check_refused(doc, "behavior is \"Removed\"");
  doc = good;
  doc["pre_tokenizer"] = {{"type", "Whitespace"}};
  check_refused(doc, "\"Whitespace\" pre-tokenizer");
  doc = good;
  doc["pre_tokenizer"] = nullptr;
  check_refused(doc, "no ByteLevel step");
  doc = good;
  doc["decoder"] = {{"type", "Metaspace"}};
  check_refused(doc, "decoder is \"Metaspace\"");
  doc = good;
  doc["added_tokens"][0]["content"] = "";
  check_refused(doc, "added_tokens[0].content is empty");
  doc = good;
  doc["added_tokens"][1].erase("id");
  check_refused(doc, "added_tokens[1] has no \"id\"");
  doc = good;
  doc["added_tokens"][0]["special"] = "yes";
  check_refused(doc, "added_tokens[0].special is not a boolean");
  check_refused(json::array(), "the top level is not an object");
}

TEST_CASE("files are read through the file interface and a container needs its manifest") {
  char dir_template[] = "/tmp/sluice-tok-test-XXXXXX";
  const std::string dir = mkdtemp(dir_template);
  CHECK_THROWS_WITH_AS(Tokenizer::load(dir + "/missing.json"), doctest::Contains("missing.json"), sluice::Error);
  std::ofstream(dir + "/tokenizer.json") << tiny::json_of(spec_with_added()).dump();
  std::ofstream(dir + "/tokenizer_config.json") << R"({"bos_token": "<|x|>"})";
  CHECK_THROWS_WITH_AS(Tokenizer::load_from_container(dir), doctest::Contains("incomplete container: conversion did not finish"),
                       sluice::Error);
  std::ofstream(dir + "/manifest.json") << "{}";
  const Tokenizer tok = Tokenizer::load_from_container(dir);
  CHECK(tok.bos_id() == kSpecial);
  CHECK(tok.encode("ab") == std::vector<TokenId>{256});
  std::filesystem::remove_all(dir);
}
