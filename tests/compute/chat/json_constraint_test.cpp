// tests/compute/chat/json_constraint_test.cpp: the JSON recogniser on
// hand-written valid and invalid texts and prefixes, the schema subset's
// refusals, the vocabulary trie, and the sampler hook: over many seeds and
// temperatures on random logits, every output parses and matches its schema.
#include <doctest/doctest.h>

#include <random>
#include <string>
#include <vector>

#include "compute/chat/token_grammar.h"
#include "compute/model/sampler.h"
#include "tests/compute/tokenizer/tiny_tokenizer.h"
#include "tests/proto/container_fixture.h"

using json = nlohmann::json;
using sluice::chat::JsonConstraint;
using sluice::chat::JsonGrammar;
using sluice::chat::JsonRecognizer;
using sluice::chat::TokenTrie;

namespace {

std::shared_ptr<const JsonGrammar> schema(const char* text) {
  return JsonGrammar::from_schema(json::parse(text));
}

bool whole(const std::shared_ptr<const JsonGrammar>& g, const std::string& text) {
  return sluice::chat::matches(g, text);
}

// Whether `text` can still become a value (every byte accepted).
bool prefix(const std::shared_ptr<const JsonGrammar>& g, const std::string& text) {
  JsonRecognizer r(g);
  return r.feed(text);
}

}  // namespace

TEST_CASE("json_object takes any object and nothing else") {
  const auto g = JsonGrammar::any_object();
  for (const char* ok :
       {"{}", "{\"a\":1}", "{\"a\": [1, 2.5e-3, -0, true, null, \"x\\n\\u00e9\"]}",
        "{\n  \"k\": {\"n\": {}}\n}", "{\"\xc3\xa9\": \"\xe2\x82\xac\xf0\x9f\x98\x80\"}"}) {
    INFO(ok);
    CHECK(whole(g, ok));
  }
  for (const char* bad : {"[]",
                          "1",
                          "\"x\"",
                          "{",
                          "{\"a\"}",
                          "{\"a\":}",
                          "{\"a\":1,}",
                          "{,}",
                          "{\"a\":01}",
                          "{\"a\":1.}",
                          "{\"a\":.5}",
                          "{\"a\":tru}",
                          "{} ",
                          " {}",
                          "{\"a\":\"\x01\"}",
                          "{\"a\":\"\\x\"}",
                          "{\"a\":\"\\u12g4\"}",
                          "{\"a\":\"\xc0\xaf\"}",
                          "{\"a\":\"\xed\xa0\x80\"}",
                          "{\"a\":\"\xe2\x82\"}",
                          "{\"a\":1}}",
                          "{\"a\":  1}"}) {
    INFO(bad);
    CHECK_FALSE(whole(g, bad));
  }
  // Prefixes: open values are fine, a wrong byte is refused at once.
  CHECK(prefix(g, "{\"a\": [1, {\"b\": \"unfinished"));
  CHECK(prefix(g, "{\"a\": -"));
  CHECK_FALSE(prefix(g, "{\"a\": -x"));
  CHECK_FALSE(prefix(g, "{]"));
  CHECK_FALSE(prefix(g, "{\"a\" 1"));
}

TEST_CASE("whitespace between tokens: none, one space, or a newline and at most 20 indents") {
  const auto g = JsonGrammar::any_object();
  CHECK(whole(g, "{\"a\": 1}"));
  CHECK(whole(g, "{\n" + std::string(20, ' ') + "\"a\":1\n}"));
  CHECK_FALSE(whole(g, "{\n" + std::string(21, ' ') + "\"a\":1}"));
  CHECK_FALSE(whole(g, "{\n\n\"a\":1}"));
  CHECK_FALSE(whole(g, "{ \n\"a\":1}"));
}

TEST_CASE("properties, required and additionalProperties") {
  const auto g = schema(R"({"type": "object", "properties": {"name": {"type": "string"},
      "age": {"type": "integer"}}, "required": ["name"]})");
  CHECK(whole(g, R"({"name": "Ann"})"));
  CHECK(whole(g, R"({"age": 3, "name": "Ann"})"));  // any order
  CHECK_FALSE(whole(g, R"({"age": 3})"));           // name is required
  CHECK_FALSE(whole(g, R"({})"));
  CHECK_FALSE(whole(g, R"({"name": "Ann", "name": "Bob"})"));
  CHECK_FALSE(prefix(g, R"({"nick)"));  // no such key: refused inside the key
  CHECK_FALSE(whole(g, R"({"name": 1})"));
  CHECK_FALSE(whole(g, R"({"name": "Ann", "age": 1.5})"));
  CHECK_FALSE(prefix(g, R"({"name": "Ann", "age": 3,)"));  // no key is left to write
  const auto open = schema(R"({"type": "object", "properties": {"a": {"type": "null"}},
      "additionalProperties": {"type": "boolean"}})");
  CHECK(whole(open, R"({"zz": true, "a": null})"));
  CHECK_FALSE(whole(open, R"({"zz": 1})"));
  CHECK_FALSE(whole(open, R"({"a": null, "a": null})"));
  CHECK_FALSE(whole(open, R"({"a": true})"));
}

TEST_CASE("enum, const, boolean and null are exact texts") {
  const auto g = schema(R"({"enum": ["red", "green", 1, 12, null]})");
  for (const char* ok : {"\"red\"", "\"green\"", "1", "12", "null"}) CHECK(whole(g, ok));
  for (const char* bad : {"\"blue\"", "2", "121", "nul", " \"red\""}) CHECK_FALSE(whole(g, bad));
  JsonRecognizer r(g);
  CHECK(r.feed("1"));
  CHECK(r.complete());  // 1 is whole, 12 still possible
  CHECK(r.feed("2"));
  CHECK(r.complete());
  CHECK(whole(schema(R"({"const": {"a": [1]}})"), R"({"a":[1]})"));
  CHECK_FALSE(whole(schema(R"({"const": {"a": [1]}})"), R"({"a": [1]})"));
}

TEST_CASE("integer ranges refuse a prefix that cannot end in range") {
  const auto g = schema(R"({"type": "integer", "minimum": 5, "maximum": 120})");
  for (const char* ok : {"5", "9", "10", "99", "120"}) CHECK(whole(g, ok));
  for (const char* bad : {"4", "121", "-1", "0", "1000", "5.0"}) CHECK_FALSE(whole(g, bad));
  CHECK(prefix(g, "1"));  // 10..19 and 100..120 remain
  CHECK(prefix(g, "13"));
  CHECK_FALSE(prefix(g, "130"));
  CHECK_FALSE(prefix(g, "-"));
  JsonRecognizer r(g);
  CHECK(r.feed("1"));
  CHECK_FALSE(r.complete());
  const auto negative = schema(R"({"type": "integer", "exclusiveMaximum": -2})");
  CHECK(whole(negative, "-3"));
  CHECK_FALSE(whole(negative, "-2"));
  CHECK_FALSE(whole(negative, "7"));
}

TEST_CASE("strings count code points; arrays count items") {
  const auto s = schema(R"({"type": "string", "minLength": 2, "maxLength": 3})");
  CHECK(whole(s, "\"ab\""));
  CHECK(whole(s, "\"\xc3\xa9\xc3\xa9\xc3\xa9\""));  // three characters, six bytes
  CHECK(whole(s, "\"a\\n\""));
  CHECK_FALSE(whole(s, "\"a\""));
  CHECK_FALSE(prefix(s, "\"abcd"));
  const auto a =
      schema(R"({"type": "array", "items": {"type": "number"}, "minItems": 1, "maxItems": 2})");
  CHECK(whole(a, "[1]"));
  CHECK(whole(a, "[1, 2e5]"));
  CHECK_FALSE(whole(a, "[]"));
  CHECK_FALSE(prefix(a, "[1, 2, "));
  CHECK_FALSE(whole(a, "[\"x\"]"));
  const auto tuple =
      schema(R"({"type": "array", "prefixItems": [{"type": "string"}, {"type": "boolean"}],
      "items": false})");
  CHECK(whole(tuple, "[\"a\", true]"));
  CHECK(whole(tuple, "[\"a\"]"));
  CHECK_FALSE(whole(tuple, "[\"a\", true, 1]"));
  CHECK_FALSE(whole(tuple, "[true]"));
}

TEST_CASE("anyOf of different first bytes, type lists and local $ref, recursive too") {
  const auto nullable = schema(R"({"anyOf": [{"type": "string"}, {"type": "null"}]})");
  CHECK(whole(nullable, "\"x\""));
  CHECK(whole(nullable, "null"));
  CHECK_FALSE(whole(nullable, "1"));
  const auto listed = schema(R"({"type": ["integer", "number", "boolean"]})");
  CHECK(whole(listed, "1.5"));
  CHECK(whole(listed, "false"));
  const auto tree = schema(R"({"$ref": "#/$defs/node", "$defs": {"node": {"type": "object",
      "properties": {"v": {"type": "integer"}, "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
      "required": ["v"]}}})");
  CHECK(whole(tree, R"({"v": 1, "kids": [{"v": 2}, {"v": 3, "kids": []}]})"));
  CHECK_FALSE(whole(tree, R"({"v": 1, "kids": [{}]})"));
}

TEST_CASE("what the subset cannot enforce is refused, naming the place") {
  auto message = [](const char* text) {
    return sluice::testing::error_message([&] { JsonGrammar::from_schema(json::parse(text)); });
  };
  CHECK(message(R"({"type": "string", "pattern": "a+"})") ==
        "json schema at /: the keyword \"pattern\" is not supported");
  CHECK(
      message(R"({"type": "object", "properties": {"d": {"type": "string", "format": "date"}}})") ==
      "json schema at /properties/d: the keyword \"format\" is not supported");
  CHECK(message(R"({"anyOf": [{"type": "object"}, {"type": "object", "properties": {}}]})")
            .find("json schema at /anyOf: alternatives 0 and 1 can both begin with '{'") == 0);
  CHECK(message(R"({"$ref": "#/$defs/missing"})") ==
        "json schema at /$ref: $ref #/$defs/missing: no such definition");
  CHECK(message(R"({"type": "number", "minimum": 1})") ==
        "json schema at /: \"minimum\" does not apply to type number");
  CHECK(message(R"({"type": "thing"})") == "json schema at /type: unknown type \"thing\"");
  CHECK(sluice::testing::error_message([] {
          JsonGrammar::from_response_format(
              {{"type", "json_schema"}, {"json_schema", {{"schema", {{"type", "x"}}}}}});
        }) == "response_format.json_schema.schema: json schema at /type: unknown type \"x\"");
  CHECK(JsonGrammar::from_response_format({{"type", "text"}}) == nullptr);
  CHECK(sluice::testing::error_message([] {
          JsonGrammar::from_response_format({{"type", "yaml"}});
        }).find("response_format.type") == 0);
}

namespace {

// Bytes are ids 0..255, then some multi-byte tokens, then two added tokens.
struct TinyVocab {
  sluice::tokenizer::Tokenizer tok;
  int end_id;
  TinyVocab()
      : tok([] {
          tiny::Spec spec;
          spec.extra_tokens = {"{\"", "\":", "\": \"", "\"}",      "name",     " true", "12",
                               "[1",  "ab",  "\\u00",  "\xc3\xa9", "\xe2\x82", "}}",    "\n  "};
          spec.added = nlohmann::json::array({tiny::added_token(270, "<|im_end|>", true),
                                              tiny::added_token(271, "<think>", false)});
          return sluice::tokenizer::Tokenizer::from_json(tiny::json_of(spec).dump(), "tiny.json");
        }()),
        end_id(270) {}
};

}  // namespace

TEST_CASE("the trie holds every ordinary token once and no added token") {
  const TinyVocab v;
  const TokenTrie trie(v.tok);
  CHECK(trie.tokens() == 256 + 14);
  CHECK(trie.bytes(270).empty());
  CHECK(trie.bytes(271).empty());
  size_t ends = 0;
  for (size_t i = 0; i < trie.nodes(); ++i) {
    ends += trie.ends(i).size();
    CHECK(trie.subtree_end(i) > i);
  }
  CHECK(ends == trie.tokens());
  // 256 one-byte nodes, plus the new nodes of each longer token.
  CHECK(trie.nodes() == 256 + 1 + 1 + 2 + 1 + 3 + 4 + 1 + 1 + 1 + 3 + 1 + 1 + 1 + 2);
}

TEST_CASE("sampling under the constraint always gives a matching value or runs out of tokens") {
  const TinyVocab v;
  auto trie = std::make_shared<const TokenTrie>(v.tok);
  const auto g =
      schema(R"({"type": "object", "properties": {"name": {"type": "string", "maxLength": 6},
      "n": {"type": "integer", "minimum": -3, "maximum": 40}, "ok": {"type": "boolean"},
      "tags": {"type": "array", "items": {"enum": ["ab", "c"]}, "maxItems": 3}}, "required": ["name", "n"]})");
  int completed = 0;
  for (uint64_t seed = 1; seed <= 60; ++seed) {
    for (float temp : {0.0f, 0.7f, 1.5f}) {
      JsonConstraint constraint(g, trie, {{v.end_id}, std::nullopt, std::nullopt, false, {}, {}});
      sluice::SamplingParams params;
      params.temperature = temp;
      params.seed = seed;
      params.constraint = &constraint;
      sluice::Sampler sampler(params);
      std::mt19937_64 logits_rng(seed * 7919 + static_cast<uint64_t>(temp * 10));
      std::normal_distribution<float> normal(0.0f, 3.0f);
      std::vector<float> logits(272);
      std::string text;
      bool ended = false;
      for (int step = 0; step < 200 && !ended; ++step) {
        for (float& l : logits) l = normal(logits_rng);
        logits[static_cast<size_t>(v.end_id)] += 4.0f;  // the model wants to stop early
        const int32_t token = sampler.sample(logits, {});
        REQUIRE(token != 271);
        if (token == v.end_id) {
          ended = true;
        } else {
          text += trie->bytes(token);
        }
      }
      INFO("seed ", seed, " temp ", temp, " text ", text);
      if (!ended) continue;  // "length": the value may be unfinished
      ++completed;
      CHECK(sluice::chat::matches(g, text));
      const json parsed = json::parse(text);
      CHECK(parsed["name"].is_string());
      CHECK(parsed["n"].get<int>() >= -3);
      CHECK(parsed["n"].get<int>() <= 40);
    }
  }
  CHECK(completed > 120);  // most runs finish; the rest ran out of steps
}

TEST_CASE("reasoning stays free: opened by the prompt, or as the first token") {
  const TinyVocab v;
  auto trie = std::make_shared<const TokenTrie>(v.tok);
  const int32_t open = 271, close = 269;  // <think>, and the last extra token as </think>
  JsonConstraint direct(JsonGrammar::any_object(), trie, {{v.end_id}, close, open, false, {}, {}});
  CHECK(direct.active());
  CHECK(direct.allows(open));
  CHECK_FALSE(direct.allows('x'));
  direct.accept('{');
  CHECK_FALSE(direct.allows(open));  // only as the first token
  JsonConstraint thinking(JsonGrammar::any_object(), trie,
                          {{v.end_id}, close, open, false, {}, {}});
  thinking.accept(open);
  CHECK_FALSE(thinking.active());
  CHECK(thinking.allows('x'));
  thinking.accept(close);
  CHECK(thinking.active());
  CHECK_FALSE(thinking.allows('x'));
}

TEST_CASE("start_after leaves the tokens free until the marker, then constrains") {
  const TinyVocab v;
  auto trie = std::make_shared<const TokenTrie>(v.tok);
  JsonConstraint c(JsonGrammar::any_object(), trie, {{v.end_id}, 271, std::nullopt, true, {}, {}});
  CHECK(c.allows('x'));
  c.accept('x');
  CHECK_FALSE(c.active());
  c.accept(271);
  CHECK(c.active());
  CHECK_FALSE(c.allows('x'));
  CHECK_FALSE(c.allows(v.end_id));
  CHECK(c.allows('{'));
  std::vector<float> logits(272, 0.0f);
  c.mask(logits);
  size_t open = 0;
  for (size_t id = 0; id < logits.size(); ++id) open += std::isfinite(logits[id]) ? 1 : 0;
  CHECK(open == 2);  // '{' and '{"'
  CHECK(std::isfinite(logits['{']));
}
