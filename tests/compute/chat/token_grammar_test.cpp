// tests/compute/chat/token_grammar_test.cpp: required tool calls as token
// grammars in Qwen3's, DeepSeek-V3's, Kimi's and XTML's syntax on tiny
// tokenizers carrying each family's markers: the right call is taken, another
// tool's name, invalid arguments and text before the call are refused; with
// tool_choice auto the reply is free until the opener, then held the same
// way; XTML's JSON output waits for its response opener; the mask agrees
// with allows(); sampled replies on random logits always parse (by the reply
// parser) into calls of offered tools whose arguments validate.
#include "compute/chat/token_grammar.h"

#include <doctest/doctest.h>

#include <array>
#include <cmath>
#include <random>
#include <string>
#include <variant>
#include <vector>

#include "compute/chat/xtml.h"
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
Family xtml() {
  Family f = family({"<|open|>", "<|close|>", "<|sep|>", "<|end_of_msg|>"});
  f.format = sluice::chat::xtml_reply_format(f.tok);
  return f;
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
  // XTML: the prompt opened the response (thinking off).
  if (f.format.tools == ToolSyntax::kXtml)
    return sluice::chat::xtml_constraint_frame(f.format, false, {f.end});
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

// tool_choice "auto": free until the family's opener.
std::shared_ptr<const TokenGrammar> lazy(const Family& f, bool parallel = true) {
  return sluice::chat::lazy_tool_call_grammar(f.format, sluice::chat::tool_specs(kTools), parallel,
                                              frame(f));
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

// XTML elements by marker id: <|open|>TAG<|sep|> and <|close|>TAG<|sep|>.
std::vector<Piece> xopen(const Family& f, const std::string& tag) {
  return {*f.format.section_open, tag, *f.format.separator};
}
std::vector<Piece> xclose(const Family& f, const std::string& tag) {
  return {*f.format.section_close, tag, *f.format.separator};
}
std::vector<Piece> cat(std::initializer_list<std::vector<Piece>> parts) {
  std::vector<Piece> out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

// key, type attribute, value as written
using XtmlArgument = std::array<std::string, 3>;
std::vector<Piece> xtml_call(const Family& f, const std::string& name, int index,
                             const std::vector<XtmlArgument>& args) {
  auto out = xopen(f, "call tool=\"" + name + "\" index=\"" + std::to_string(index) + "\"");
  for (const auto& [key, type, value] : args)
    out = cat({out,
               xopen(f, "argument key=\"" + key + "\" type=\"" + type + "\""),
               {value},
               xclose(f, "argument")});
  return cat({out, xclose(f, "call")});
}

// A reply (thinking off) that closes the empty response and makes `calls`.
std::vector<int> xtml_reply(const Family& f, const std::vector<std::vector<Piece>>& calls) {
  auto all = cat({xclose(f, "response"), xopen(f, "tools")});
  for (const auto& c : calls) all = cat({all, c});
  return ids(cat({all, xclose(f, "tools"), xclose(f, "message"), {f.end}}));
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
  // The index is plain decimal of at most 6 digits: no sign, leading zero,
  // fraction or exponent (JSON's "-0" was taken).
  CHECK(first_refused(f, g, reply("functions.get_time:-0", R"({"zone":"UTC"})")) == 2 + 19);
  CHECK(first_refused(f, g, reply("functions.get_time:01", R"({"zone":"UTC"})")) == 2 + 20);
  CHECK(first_refused(f, g, reply("functions.get_time:1e0", R"({"zone":"UTC"})")) == 2 + 20);
  CHECK(first_refused(f, g, reply("functions.get_time:1.0", R"({"zone":"UTC"})")) == 2 + 20);
  CHECK(first_refused(f, g, reply("functions.get_time:999999", R"({"zone":"UTC"})")) == -1);
  CHECK(first_refused(f, g, reply("functions.get_time:1000000", R"({"zone":"UTC"})")) == 2 + 25);
  CHECK(first_refused(f, g, reply("functions.get_time:0", R"({"zone":7})")) > 0);
  CHECK(first_refused(f, g, reply("functions.get_time:0", "{}")) > 0);  // zone is required
}

TEST_CASE("XTML (Kimi K3): a required call as argument elements, strings raw") {
  const Family f = xtml();
  REQUIRE(f.format.tools == ToolSyntax::kXtml);
  const auto g = grammar(f);
  const auto tools = sluice::chat::tool_specs(kTools);
  auto parsed = [&](const std::vector<int>& reply) {
    return sluice::chat::parse_reply(f.tok, f.format, reply, {false, 7});
  };
  const auto paris = xtml_reply(f, {xtml_call(f, "get_weather", 1, {{"city", "string", "Paris"}})});
  CHECK(first_refused(f, g, paris) == -1);
  const auto call = parsed(paris);
  REQUIRE(call.tool_calls.size() == 1);
  CHECK(call.tool_calls[0].name == "get_weather");
  CHECK(call.tool_calls[0].arguments == R"({"city":"Paris"})");
  CHECK(call.content.empty());
  const auto days = xtml_reply(
      f, {xtml_call(f, "get_weather", 1, {{"city", "string", "Rome"}, {"days", "number", "3"}})});
  CHECK(first_refused(f, g, days) == -1);
  CHECK(parsed(days).tool_calls[0].arguments == R"({"city":"Rome","days":3})");
  // A string argument is raw text: quotes and newlines need no escape.
  const auto zone = xtml_reply(f, {xtml_call(f, "get_time", 1, {{"zone", "string", "U\"T\n"}})});
  CHECK(first_refused(f, g, zone) == -1);
  const auto zone_args = parsed(zone).tool_calls[0].arguments;
  CHECK(json::parse(zone_args)["zone"] == "U\"T\n");
  CHECK(sluice::chat::matches(tools[1].arguments, zone_args));
  // Refused: another value, type or name, a missing or extra argument, a
  // bound, text instead of the call.
  auto refused = [&](const std::vector<XtmlArgument>& args,
                     const std::string& name = "get_weather") {
    return first_refused(f, g, xtml_reply(f, {xtml_call(f, name, 1, args)})) > 0;
  };
  CHECK(refused({{"city", "string", "London"}}));
  CHECK(refused({{"city", "number", "3"}}));
  CHECK(refused({}));
  CHECK(refused({{"city", "string", "Paris"}, {"days", "number", "9"}}));
  CHECK(refused({{"city", "string", "Paris"}, {"wind", "number", "1"}}));
  CHECK(refused({{"zone", "string", "Europe/Paris!"}}, "get_time"));
  CHECK(refused({{"city", "string", "Paris"}}, "get_wind"));
  // Indices count from 1.
  CHECK(first_refused(f, g, xtml_reply(f, {xtml_call(f, "get_weather", 0, {{"city", "string", "Paris"}})})) > 0);
  CHECK(first_refused(f, g, ids({"Sure"})) == 0);
  // Several calls only when parallel calls are allowed.
  const auto two = xtml_reply(f, {xtml_call(f, "get_weather", 1, {{"city", "string", "Paris"}}),
                                  xtml_call(f, "get_time", 2, {{"zone", "string", "UTC"}})});
  CHECK(first_refused(f, g, two) == -1);
  CHECK(parsed(two).tool_calls.size() == 2);
  const size_t second = ids(cat({xclose(f, "response"), xopen(f, "tools"),
                                 xtml_call(f, "get_weather", 1, {{"city", "string", "Paris"}})}))
                            .size();
  CHECK(first_refused(f, grammar(f, false), two) == int(second));
}

TEST_CASE(
    "XTML with thinking on: the reasoning is free, the value starts after the response opener") {
  const Family f = xtml();
  const auto schema = sluice::chat::JsonGrammar::from_schema(json::parse(
      R"({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]})"));
  const auto thinking = sluice::chat::json_reply_grammar(
      schema, sluice::chat::xtml_constraint_frame(f.format, true, {f.end}));
  const auto tail = cat({xclose(f, "response"), xclose(f, "message"), {f.end}});
  const auto reply =
      ids(cat({{"no json {"}, xclose(f, "think"), xopen(f, "response"), {R"({"a": 1})"}, tail}));
  CHECK(first_refused(f, thinking, reply) == -1);
  const auto parsed = sluice::chat::parse_reply(f.tok, f.format, reply, {true, 7});
  CHECK(parsed.reasoning == "no json {");
  CHECK(parsed.content == R"({"a": 1})");
  // The value may not begin before the three-token opener, nor end unclosed.
  const size_t opener_at = ids(xclose(f, "think")).size();
  CHECK(first_refused(f, thinking, ids(cat({xclose(f, "think"), {R"({"a": 1})"}}))) ==
        int(opener_at));
  CHECK(first_refused(f, thinking, ids(cat({xclose(f, "think"), {"<"}, xopen(f, "response")}))) ==
        int(opener_at));
  const auto unclosed =
      ids(cat({xclose(f, "think"), xopen(f, "response"), {R"({"a": 1})", f.end}}));
  CHECK(first_refused(f, thinking, unclosed) == int(unclosed.size()) - 1);
  // Thinking off: the prompt opened the response, so the value comes first.
  const auto direct = sluice::chat::json_reply_grammar(
      schema, sluice::chat::xtml_constraint_frame(f.format, false, {f.end}));
  CHECK(first_refused(f, direct, ids(cat({{R"({"a": 2})"}, tail}))) == -1);
  CHECK(first_refused(f, direct, ids({"x"})) == 0);
}

TEST_CASE(
    "tool_choice auto: free until the family's opener, then the call is held to the grammar") {
  {
    const Family f = qwen3();
    const int open = f.id("<tool_call>"), close = f.id("</tool_call>");
    const int think = f.id("<think>"), unthink = f.id("</think>");
    const auto g = lazy(f);
    const auto call = qwen_call("get_time", R"({"zone": "UTC"})");
    CHECK(first_refused(f, g, ids({"Hello there.", f.end})) == -1);
    CHECK(first_refused(f, g, ids({"Let me look.", open, call, close, f.end})) == -1);
    CHECK(first_refused(f, g,
                        ids({"Hi", open, qwen_call("get_weather", R"({"city": "London"})")})) > 3);
    CHECK(first_refused(f, g, ids({"Hi", open, "{\"name\": \"x\"}"})) == 3);
    CHECK(first_refused(f, g, ids({open, call, close, "more"})) ==
          int(ids({open, call, close}).size()));
    // An opener inside reasoning is reasoning, as the parser reads it.
    CHECK(first_refused(f, g, ids({think, "a", open, "junk", unthink, "ok", f.end})) == -1);
  }
  {
    const Family f = deepseek();
    const int section = *f.format.section_open, section_end = *f.format.section_close;
    const int call = *f.format.call_open, call_end = *f.format.call_close,
              sep = *f.format.separator;
    const auto g = lazy(f);
    CHECK(first_refused(f, g, ids({"Sure.", f.end})) == -1);
    CHECK(first_refused(f, g,
                        ids({"Sure.", section, call, "function", sep,
                             "get_time\n```json\n{\"zone\": \"UTC\"}\n```", call_end, section_end,
                             f.end})) == -1);
    CHECK(first_refused(f, g, ids({"Sure.", section, "text"})) == 6);
  }
  {
    const Family f = kimi();
    const int section = *f.format.section_open, section_end = *f.format.section_close;
    const int call = *f.format.call_open, call_end = *f.format.call_close,
              args = *f.format.separator;
    const auto g = lazy(f);
    CHECK(first_refused(f, g,
                        ids({"ok", section, call, "functions.get_time:0", args, R"({"zone":"UTC"})",
                             call_end, section_end, f.end})) == -1);
    CHECK(first_refused(f, g, ids({"ok", section, call, "functions.get_time:0", args, "{}"})) > 0);
  }
  {
    const Family f = xtml();
    const auto g = lazy(f);
    CHECK(first_refused(f, g,
                        ids(cat({{"Hi"}, xclose(f, "response"), xclose(f, "message"), {f.end}}))) ==
          -1);
    const auto call = xtml_call(f, "get_time", 1, {{"zone", "string", "UTC"}});
    const auto with_call = ids(cat({{"Let me see."},
                                    xclose(f, "response"),
                                    xopen(f, "tools"),
                                    call,
                                    xclose(f, "tools"),
                                    xclose(f, "message"),
                                    {f.end}}));
    CHECK(first_refused(f, g, with_call) == -1);
    const auto parsed = sluice::chat::parse_reply(f.tok, f.format, with_call, {false, 7});
    CHECK(parsed.content == "Let me see.");
    REQUIRE(parsed.tool_calls.size() == 1);
    CHECK(parsed.tool_calls[0].arguments == R"({"zone":"UTC"})");
    const auto bad = ids(cat({xclose(f, "response"), xopen(f, "tools"),
                              xtml_call(f, "get_time", 1, {{"zone", "number", "7"}})}));
    CHECK(first_refused(f, g, bad) >
          int(ids(cat({xclose(f, "response"), xopen(f, "tools")})).size()));
  }
}

TEST_CASE("the mask leaves exactly the tokens allows() takes, all along a call") {
  for (const Family& f : {qwen3(), deepseek(), kimi(), xtml()}) {
    const auto g = grammar(f);
    GrammarConstraint c(g, f.trie);
    std::vector<int> path;
    if (f.format.tools == ToolSyntax::kQwen3) {
      path = ids({f.id("<tool_call>"), qwen_call("get_weather", R"({"city": "Paris", "days": 2})"),
                  f.id("</tool_call>")});
    } else if (f.format.tools == ToolSyntax::kDeepSeekV3) {
      path = ids({*f.format.section_open, *f.format.call_open, "function", *f.format.separator,
                  "get_weather\n```json\n{\"city\": \"Paris\"}\n```", *f.format.call_close});
    } else if (f.format.tools == ToolSyntax::kKimi) {
      path = ids({*f.format.section_open, *f.format.call_open, "functions.get_weather:3",
                  *f.format.separator, R"({"city": "Paris", "days": 2})", *f.format.call_close});
    } else {
      path = xtml_reply(f, {xtml_call(f, "get_weather", 1,
                                      {{"city", "string", "Paris"}, {"days", "number", "2"}})});
      path.pop_back();
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
  for (const Family& f : {qwen3(), deepseek(), kimi(), xtml()}) {
    for (const bool auto_choice : {false, true}) {
      const auto g = auto_choice ? lazy(f) : grammar(f);
      // The opener: what tool_choice "auto" waits for.
      const int opener =
          f.format.tools == ToolSyntax::kQwen3 ? *f.format.call_open : *f.format.section_open;
      int whole = 0, called = 0;
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
          bool ended = false, opened = false;
          for (int step = 0; step < 300 && !ended; ++step) {
            for (float& l : logits) l = normal(rng);
            logits[static_cast<size_t>(f.end)] += 4.0f;  // the model wants to stop early
            // Reasoning is free text (it may end the reply): these replies call at once.
            if (f.format.thinks()) logits[static_cast<size_t>(*f.format.think_open)] = -INFINITY;
            // Until the call opens (XTML writes the opener inside calls too).
            if (auto_choice && !opened) logits[static_cast<size_t>(opener)] += 6.0f;
            const int32_t token = sampler.sample(logits, {});
            opened = opened || token == opener;
            ended = token == f.end;
            if (!ended) reply.push_back(token);
          }
          if (!ended) continue;  // "length": the call may be unfinished
          ++whole;
          const auto parsed = sluice::chat::parse_reply(f.tok, f.format, reply, {false, 7});
          INFO("syntax ", int(f.format.tools), " seed ", seed, " temp ", temp);
          // Qwen3's newline between calls is no content.
          if (!auto_choice) CHECK(parsed.content.empty());
          if (!auto_choice) REQUIRE(!parsed.tool_calls.empty());
          called += parsed.tool_calls.empty() ? 0 : 1;
          for (const auto& call : parsed.tool_calls) {
            INFO(call.name, " ", call.arguments);
            const auto tool = std::find_if(tools.begin(), tools.end(),
                                           [&](const ToolSpec& t) { return t.name == call.name; });
            REQUIRE(tool != tools.end());
            CHECK(sluice::chat::matches(tool->arguments, call.arguments));
          }
        }
      }
      INFO("syntax ", int(f.format.tools), " auto ", auto_choice);
      CHECK(whole > 60);  // most runs finish; the rest ran out of steps
      CHECK(called > 30);
    }
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
