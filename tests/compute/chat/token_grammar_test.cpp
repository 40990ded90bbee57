// tests/compute/chat/token_grammar_test.cpp: required tool calls as token
// grammars in Qwen3's, DeepSeek-V3's and Kimi's syntax on tiny tokenizers
// carrying each family's markers: the right call is taken, another tool's
// name, invalid arguments and text before the call are refused; the mask
// agrees with allows(); sampled replies on random logits always parse (by
// the reply parser) into calls of offered tools whose arguments validate.
#include "compute/chat/token_grammar.h"

#include <doctest/doctest.h>

#include <cmath>
#include <random>
#include <string>
#include <variant>
#include <vector>

#include "compute/model/sampler.h"
#include "tests/compute/tokenizer/tiny_tokenizer.h"
#include "tests/proto/container_fixture.h"

using json = nlohmann::ordered_json;
using sluice::chat::ConstraintOptions;
using sluice::chat::GrammarConstraint;
using sluice::chat::TokenGrammar;
using sluice::chat::TokenTrie;
using sluice::chat::ToolSpec;
using sluice::chat::ToolSyntax;

namespace {

// Ids 0..255 are the bytes; these follow from 256; the markers after them.
const std::vector<std::string> kExtra = {
    "{\"name\": \"", "\", \"arguments\": ", "}\n", "city", "\": \"", "Paris", "\"}", "get_", " 12",
    "\n```"};
const int kFirstMarker = 256 + static_cast<int>(kExtra.size());

struct Family {
  sluice::tokenizer::Tokenizer tok;
  sluice::chat::ReplyFormat format;
  std::shared_ptr<const TokenTrie> trie;
  int end;  // the end-of-turn token: the last marker

  int id(const std::string& marker) const { return *tok.token_to_id(marker); }
};

Family family(const std::vector<std::string>& markers) {
  tiny::Spec spec;
  spec.extra_tokens = kExtra;
  for (size_t i = 0; i < markers.size(); ++i) {
    const bool end = i + 1 == markers.size();  // end-of-turn tokens are special
    spec.added.push_back(tiny::added_token(kFirstMarker + static_cast<int>(i), markers[i], end));
  }
  auto tok = sluice::tokenizer::Tokenizer::from_json(tiny::json_of(spec).dump(), "tiny.json");
  auto format = sluice::chat::reply_format_for(tok);
  auto trie = std::make_shared<const TokenTrie>(tok);
  const int end = kFirstMarker + static_cast<int>(markers.size()) - 1;
  return {std::move(tok), format, std::move(trie), end};
}

Family qwen3() {
  return family({"<tool_call>", "</tool_call>", "<think>", "</think>", "<|im_end|>"});
}
Family deepseek() {
  return family({"<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>", "<｜tool▁call▁begin｜>",
                 "<｜tool▁call▁end｜>", "<｜tool▁sep｜>", "<｜end▁of▁sentence｜>"});
}
Family kimi() {
  return family({"<|tool_calls_section_begin|>", "<|tool_calls_section_end|>",
                 "<|tool_call_begin|>", "<|tool_call_end|>", "<|tool_call_argument_begin|>",
                 "<|im_end|>"});
}

const json kTools = json::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
    "properties": {"city": {"enum": ["Paris", "Rome"]}, "days": {"type": "integer", "minimum": 1, "maximum": 7}},
    "required": ["city"]}}},
  {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object",
    "properties": {"zone": {"type": "string", "maxLength": 10}}, "required": ["zone"]}}}])");

ConstraintOptions frame(const Family& f) {
  ConstraintOptions o;
  o.end_ids = {f.end};
  if (f.format.thinks()) {
    o.start_after = f.format.think_close;
    o.reasoning_open = f.format.think_open;
  }
  return o;
}

std::shared_ptr<const TokenGrammar> grammar(const Family& f, bool parallel = true,
                                            const std::string& only = "") {
  auto tools = sluice::chat::tool_specs(kTools);
  if (!only.empty()) std::erase_if(tools, [&](const ToolSpec& t) { return t.name != only; });
  return sluice::chat::tool_call_grammar(f.format, tools, parallel, frame(f));
}

// A reply as marker names and text; text goes in one byte-token at a time.
using Piece = std::variant<int, std::string>;
std::vector<int> ids(const std::vector<Piece>& pieces) {
  std::vector<int> out;
  for (const Piece& p : pieces) {
    if (const int* marker = std::get_if<int>(&p)) {
      out.push_back(*marker);
    } else {
      for (char c : std::get<std::string>(p)) out.push_back(static_cast<unsigned char>(c));
    }
  }
  return out;
}

// The index of the first token the grammar refuses, or -1 when it takes them all.
int first_refused(const Family& f, std::shared_ptr<const TokenGrammar> g,
                  const std::vector<int>& tokens) {
  GrammarConstraint c(std::move(g), f.trie);
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (!c.allows(tokens[i])) return static_cast<int>(i);
    c.accept(tokens[i]);
  }
  return -1;
}

std::string qwen_call(const std::string& name, const std::string& args) {
  return "\n{\"name\": \"" + name + "\", \"arguments\": " + args + "}\n";
}

}  // namespace

TEST_CASE("Qwen3: a required call of an offered tool with valid arguments, and nothing else") {
  const Family f = qwen3();
  REQUIRE(f.format.tools == ToolSyntax::kQwen3);
  const int open = f.id("<tool_call>"), close = f.id("</tool_call>");
  const auto g = grammar(f);
  auto call = [&](const std::string& name, const std::string& args) {
    return ids({open, qwen_call(name, args), close, f.end});
  };
  CHECK(first_refused(f, g, call("get_weather", R"({"city": "Paris"})")) == -1);
  CHECK(first_refused(f, g, call("get_weather", R"({"days": 3, "city": "Rome"})")) == -1);
  CHECK(first_refused(f, g, call("get_time", R"({"zone": "UTC"})")) == -1);
  // Refused where it goes wrong: the name, the argument value, a missing
  // required argument, a bound, an extra key.
  const size_t name_at = 1 + std::string("\n{\"name\": \"get_").size();
  CHECK(first_refused(f, g, call("get_wether", R"({"city": "Paris"})")) == int(name_at) + 2);
  CHECK(first_refused(f, g, call("search", "{}")) == int(name_at) - 4);
  CHECK(first_refused(f, g, call("get_weather", R"({"city": "London"})")) > 0);
  CHECK(first_refused(f, g, call("get_weather", R"({"days": 3})")) > 0);
  CHECK(first_refused(f, g, call("get_weather", R"({"city": "Paris", "days": 9})")) > 0);
  CHECK(first_refused(f, g, call("get_time", R"({"zone": "UTC", "x": 1})")) > 0);
  CHECK(first_refused(f, g, call("get_time", R"({"zone": "Europe/Paris"})")) > 0);  // maxLength
  // Text first, or an end before the call is whole, is refused.
  CHECK(first_refused(f, g, ids({"Sure", open})) == 0);
  CHECK(first_refused(f, g, ids({f.end})) == 0);
  CHECK(first_refused(f, g, ids({open, qwen_call("get_time", R"({"zone": "UTC"})"), f.end})) ==
        int(ids({open, qwen_call("get_time", R"({"zone": "UTC"})")}).size()));
}

TEST_CASE("Qwen3: a named tool_choice takes only that tool; parallel calls only when allowed") {
  const Family f = qwen3();
  const int open = f.id("<tool_call>"), close = f.id("</tool_call>");
  const auto weather = qwen_call("get_weather", R"({"city": "Rome"})");
  const auto time = qwen_call("get_time", R"({"zone": "CET"})");
  CHECK(first_refused(f, grammar(f, true, "get_time"), ids({open, time, close, f.end})) == -1);
  CHECK(first_refused(f, grammar(f, true, "get_time"), ids({open, weather, close, f.end})) > 0);
  const auto two = ids({open, weather, close, "\n", open, time, close, f.end});
  CHECK(first_refused(f, grammar(f, true), two) == -1);
  CHECK(first_refused(f, grammar(f, false), two) == int(ids({open, weather, close}).size()));
}

TEST_CASE("Qwen3: reasoning first stays free, then the call is required") {
  const Family f = qwen3();
  const int open = f.id("<tool_call>"), close = f.id("</tool_call>");
  const int think = f.id("<think>"), unthink = f.id("</think>");
  const auto g = grammar(f);
  const auto call = qwen_call("get_time", R"({"zone": "UTC"})");
  CHECK(first_refused(f, g, ids({think, "anything at all", unthink, open, call, close, f.end})) ==
        -1);
  CHECK(first_refused(f, g, ids({think, "hmm", unthink, "Sure"})) == 5);
}

TEST_CASE("DeepSeek-V3: calls in their section, fenced arguments") {
  const Family f = deepseek();
  REQUIRE(f.format.tools == ToolSyntax::kDeepSeekV3);
  const int section = *f.format.section_open, section_end = *f.format.section_close;
  const int call = *f.format.call_open, call_end = *f.format.call_close, sep = *f.format.separator;
  const auto g = grammar(f);
  auto one = [&](const std::string& name, const std::string& args) {
    return std::vector<Piece>{call, "function", sep, name + "\n```json\n" + args + "\n```",
                              call_end};
  };
  auto reply = [&](std::vector<std::vector<Piece>> calls) {
    std::vector<Piece> all = {section};
    for (auto& c : calls) all.insert(all.end(), c.begin(), c.end());
    all.insert(all.end(), {section_end, f.end});
    return ids(all);
  };
  CHECK(first_refused(f, g, reply({one("get_weather", R"({"city": "Rome"})")})) == -1);
  CHECK(first_refused(f, g,
                      reply({one("get_weather", R"({"city": "Rome"})"),
                             one("get_time", R"({"zone": "UTC"})")})) == -1);
  CHECK(first_refused(f, g, reply({one("lookup", "{}")})) == 1 + 1 + 8 + 1);
  // A token may span the end of the arguments and the fence after them.
  const int brace_newline = 256 + 2;  // "}\n"
  auto spanning = ids({section, call, "function", sep, "get_time\n```json\n{\"zone\": \"UTC\""});
  spanning.push_back(brace_newline);
  const auto rest = ids({"```", call_end, section_end, f.end});
  spanning.insert(spanning.end(), rest.begin(), rest.end());
  CHECK(first_refused(f, g, spanning) == -1);
  CHECK(first_refused(f, g, reply({one("get_weather", R"({"city": 3})")})) > 0);
  CHECK(first_refused(f, g, ids({"Sure"})) == 0);
  CHECK(first_refused(f, grammar(f, false),
                      reply({one("get_weather", R"({"city": "Rome"})"),
                             one("get_time", R"({"zone": "UTC"})")})) ==
        int(ids({section}).size() + ids(one("get_weather", R"({"city": "Rome"})")).size()));
}

TEST_CASE("Kimi: functions.NAME:IDX ids, JSON arguments") {
  const Family f = kimi();
  REQUIRE(f.format.tools == ToolSyntax::kKimi);
  const int section = *f.format.section_open, section_end = *f.format.section_close;
  const int call = *f.format.call_open, call_end = *f.format.call_close;
  const int args = *f.format.separator;
  const auto g = grammar(f);
  auto reply = [&](const std::string& id, const std::string& arguments) {
    return ids({section, call, id, args, arguments, call_end, section_end, f.end});
  };
  CHECK(first_refused(f, g, reply("functions.get_weather:0", R"({"city":"Paris"})")) == -1);
  CHECK(first_refused(f, g, reply("functions.get_time:12", R"({"zone":"UTC"})")) == -1);
  CHECK(first_refused(f, g, reply("functions.get_wind:0", "{}")) == 2 + 15);
  CHECK(first_refused(f, g, reply("functions.get_time:x", R"({"zone":"UTC"})")) == 2 + 19);
  CHECK(first_refused(f, g, reply("functions.get_time:0", R"({"zone":7})")) > 0);
  CHECK(first_refused(f, g, reply("functions.get_time:0", "{}")) > 0);  // zone is required
}

TEST_CASE("the mask leaves exactly the tokens allows() takes, all along a call") {
  for (const Family& f : {qwen3(), deepseek(), kimi()}) {
    const auto g = grammar(f);
    GrammarConstraint c(g, f.trie);
    std::vector<int> path;
    if (f.format.tools == ToolSyntax::kQwen3) {
      path = ids({f.id("<tool_call>"), qwen_call("get_weather", R"({"city": "Paris", "days": 2})"),
                  f.id("</tool_call>")});
    } else if (f.format.tools == ToolSyntax::kDeepSeekV3) {
      path = ids({*f.format.section_open, *f.format.call_open, "function", *f.format.separator,
                  "get_weather\n```json\n{\"city\": \"Paris\"}\n```", *f.format.call_close});
    } else {
      path = ids({*f.format.section_open, *f.format.call_open, "functions.get_weather:3",
                  *f.format.separator, R"({"city": "Paris", "days": 2})", *f.format.call_close});
    }
    const size_t vocab = f.tok.vocab_size();
    for (size_t step = 0; step < path.size(); ++step) {
      std::vector<float> logits(vocab, 0.0f);
      c.mask(logits);
      size_t open = 0;
      for (size_t id = 0; id < vocab; ++id) {
        INFO("syntax ", int(f.format.tools), " step ", step, " id ", id);
        const bool allowed = c.allows(static_cast<int>(id));
        CHECK(std::isfinite(logits[id]) == allowed);
        open += allowed ? 1 : 0;
      }
      CHECK(open > 0);
      c.accept(path[step]);
    }
  }
}

TEST_CASE("sampled replies always parse into calls of offered tools with valid arguments") {
  const auto tools = sluice::chat::tool_specs(kTools);
  for (const Family& f : {qwen3(), deepseek(), kimi()}) {
    const auto g = grammar(f);
    int whole = 0;
    for (uint64_t seed = 1; seed <= 40; ++seed) {
      for (float temp : {0.0f, 0.8f, 1.5f}) {
        GrammarConstraint constraint(g, f.trie);
        sluice::SamplingParams params;
        params.temperature = temp;
        params.seed = seed;
        params.constraint = &constraint;
        sluice::Sampler sampler(params);
        std::mt19937_64 rng(seed * 131 + static_cast<uint64_t>(temp * 10));
        std::normal_distribution<float> normal(0.0f, 3.0f);
        std::vector<float> logits(f.tok.vocab_size());
        std::vector<int32_t> reply;
        bool ended = false;
        for (int step = 0; step < 300 && !ended; ++step) {
          for (float& l : logits) l = normal(rng);
          logits[static_cast<size_t>(f.end)] += 4.0f;  // the model wants to stop early
          // Reasoning is free text (it may end the reply): these replies call at once.
          if (f.format.thinks()) logits[static_cast<size_t>(*f.format.think_open)] = -INFINITY;
          const int32_t token = sampler.sample(logits, {});
          ended = token == f.end;
          if (!ended) reply.push_back(token);
        }
        if (!ended) continue;  // "length": the call may be unfinished
        ++whole;
        const auto parsed = sluice::chat::parse_reply(f.tok, f.format, reply, {false, 7});
        INFO("syntax ", int(f.format.tools), " seed ", seed, " temp ", temp);
        // Qwen3 writes a newline between calls, which the parser keeps as content.
        CHECK(parsed.content.find_first_not_of('\n') == std::string::npos);
        REQUIRE(!parsed.tool_calls.empty());
        for (const auto& call : parsed.tool_calls) {
          INFO(call.name, " ", call.arguments);
          const auto tool = std::find_if(tools.begin(), tools.end(),
                                         [&](const ToolSpec& t) { return t.name == call.name; });
          REQUIRE(tool != tools.end());
          CHECK(sluice::chat::matches(tool->arguments, call.arguments));
        }
      }
    }
    CHECK(whole > 60);  // most runs finish; the rest ran out of steps
  }
}

TEST_CASE("tools whose calls cannot be enforced are refused by name") {
  using sluice::testing::error_message;
  CHECK(error_message([] {
          sluice::chat::tool_specs(json::parse(
              R"([{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}},
                  {"type": "function", "function": {"name": "g", "parameters": {"pattern": "x"}}}])"));
        }).find("tools[1].function.parameters: json schema at /") == 0);
  CHECK(error_message([] {
          sluice::chat::tool_specs(
              json::parse(R"([{"type": "function", "function": {"name": "two words"}}])"));
        }).find("tools[0].function.name") == 0);
  const Family plain = family({"<|im_end|>"});
  CHECK(plain.format.tools == ToolSyntax::kNone);
  CHECK(error_message([&] { grammar(plain); }).find("no tool-call markers") != std::string::npos);
  // No parameters: the arguments are {}.
  const auto none = sluice::chat::tool_specs(
      json::parse(R"([{"type": "function", "function": {"name": "ping"}}])"));
  CHECK(sluice::chat::matches(none[0].arguments, "{}"));
  CHECK_FALSE(sluice::chat::matches(none[0].arguments, R"({"x": 1})"));
}
