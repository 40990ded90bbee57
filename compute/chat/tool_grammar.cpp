// compute/chat/tool_grammar.cpp: the reply grammars built on token_grammar.h's
// graph: one JSON value, and each family's tool-call syntax (Qwen3,
// DeepSeek-V3, Kimi, XTML), required from the first token or lazily after its
// opener. It builds graphs only; it never samples or reads logits.
#include <algorithm>
#include <utility>

#include "compute/chat/json_grammar_node.h"
#include "compute/chat/token_grammar.h"
#include "compute/chat/xtml.h"
#include "proto/error.h"

namespace sluice::chat {
namespace {

using NodeId = TokenGrammar::NodeId;
using GrammarNode = JsonGrammar::Node;

// `pieces` in order from `from`; returns the node after the last.
NodeId add_pieces(TokenGrammar& g, NodeId from, const std::vector<SyntaxPiece>& pieces) {
  for (const SyntaxPiece& piece : pieces) {
    const NodeId next = g.add_node();
    if (piece.token) {
      g.add_token(from, {*piece.token}, next);
    } else {
      g.add_bytes(from, piece.bytes, next);
    }
    from = next;
  }
  return from;
}

// A call's index in plain decimal from `from` to `to`: 0 (when `zero`) or
// [1-9][0-9]{0,5}. A JSON integer would also let "-0" or an exponent
// through, and no bound keeps a model writing digits to max_tokens.
constexpr int kIndexDigits = 6;
void add_index(TokenGrammar& g, NodeId from, NodeId to, bool zero) {
  if (zero) g.add_bytes(from, "0", to);
  NodeId digits = g.add_node();  // after the first digit
  for (char digit = '1'; digit <= '9'; ++digit) g.add_bytes(from, std::string(1, digit), digits);
  for (int written = 1; written < kIndexDigits; ++written) {
    const NodeId more = g.add_node();
    g.add_empty(digits, to);
    for (char digit = '0'; digit <= '9'; ++digit) g.add_bytes(digits, std::string(1, digit), more);
    digits = more;
  }
  g.add_empty(digits, to);
}

// Free reasoning first, as `options` says; returns the node where the
// constrained part of the reply begins.
NodeId after_reasoning(TokenGrammar& g, const ConstraintOptions& options) {
  if (options.end_ids.empty()) fail("grammar constraint: no end token to finish the reply with");
  const auto begin = g.add_node();
  g.add_empty(0, begin);
  if (options.start_after) {
    const auto reasoning = g.add_node(), closing = g.add_node(), closed = g.add_node();
    g.add_free_until(reasoning, {*options.start_after}, closing);
    g.add_token(closing, {*options.start_after}, closed);
    g.add_empty(add_pieces(g, closed, options.after_reasoning), begin);
    if (options.starts_free) {
      g.set_start(reasoning);
    } else if (options.reasoning_open) {
      g.add_token(0, {*options.reasoning_open}, reasoning);
    }
  }
  return begin;
}

bool valid_function_name(const std::string& name) {
  return !name.empty() && name.size() <= 64 && std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-';
  });
}

// XTML's element syntax by id: <|open|>TAG<|sep|> ... <|close|>TAG<|sep|>.
struct Xtml {
  TokenGrammar& g;
  TokenId open, close, sep;

  NodeId opened(NodeId from, const std::string& tag) {
    const NodeId a = g.add_node(), b = g.add_node(), c = g.add_node();
    g.add_token(from, {open}, a);
    g.add_bytes(a, tag, b);
    g.add_token(b, {sep}, c);
    return c;
  }
  void closed(NodeId from, const std::string& tag, NodeId to) {
    const NodeId a = g.add_node(), b = g.add_node();
    g.add_token(from, {close}, a);
    g.add_bytes(a, tag, b);
    g.add_token(b, {sep}, to);
  }

  // The values `node` allows, each under the type attribute it is written
  // with: `head` + T + `"`, <|sep|>, the value (a string raw, anything else
  // as JSON), to `to`.
  void typed_values(const std::shared_ptr<const JsonGrammar>& json, const GrammarNode& node,
                    const std::string& head, NodeId from, NodeId to) {
    auto branch = [&](const char* type) {
      const NodeId named = g.add_node(), body = g.add_node();
      g.add_bytes(from, head + type + "\"", named);
      g.add_token(named, {sep}, body);
      return body;
    };
    using Kind = GrammarNode::Kind;
    switch (node.kind) {
      case Kind::kChoice:
        for (const GrammarNode* alternative : node.alternatives)
          typed_values(json, *alternative, head, from, to);
        return;
      case Kind::kString:
        return g.add_text(branch("string"), json, &node, to);
      case Kind::kNumber:
      case Kind::kInteger:
        return g.add_json(branch("number"), json, to, &node);
      case Kind::kObject:
        return g.add_json(branch("object"), json, to, &node);
      case Kind::kArray:
        return g.add_json(branch("array"), json, to, &node);
      case Kind::kLiteral:
        for (const std::string& literal : node.literals) {
          const char first = literal[0];
          if (first == '"') {
            const std::string raw = nlohmann::json::parse(literal).get<std::string>();
            const NodeId body = branch("string");
            if (raw.empty()) {
              g.add_empty(body, to);
            } else {
              g.add_bytes(body, raw, to);
            }
            continue;
          }
          const char* type = first == 't' || first == 'f' ? "boolean"
                             : first == 'n'               ? "null"
                             : first == '{'               ? "object"
                             : first == '['               ? "array"
                                                          : "number";
          g.add_bytes(branch(type), literal, to);
        }
        return;
    }
  }

  // A call's arguments from `from` to `to`: an object's properties as
  // argument elements in their schema's order (the optional ones may be
  // left out), anything else as one json element holding the JSON.
  void arguments(const ToolSpec& tool, NodeId from, NodeId to) {
    const GrammarNode& root = tool.arguments->root();
    const bool by_property =
        root.kind == GrammarNode::Kind::kObject && (!root.properties.empty() || !root.additional);
    if (!by_property) {
      const NodeId body = opened(from, "json type=\"object\""), value = g.add_node();
      g.add_json(body, tool.arguments, value);
      return closed(value, "json", to);
    }
    NodeId at = from;
    for (size_t i = 0; i < root.properties.size(); ++i) {
      const GrammarNode::Property& property = root.properties[i];
      const NodeId next = i + 1 == root.properties.size() ? to : g.add_node();
      if (!(root.required >> i & 1)) g.add_empty(at, next);
      const NodeId element = g.add_node(), value = g.add_node();
      g.add_token(at, {open}, element);
      const std::string key = nlohmann::json::parse("\"" + property.key + "\"").get<std::string>();
      typed_values(tool.arguments, *property.value,
                   "argument key=\"" + xtml_escape_attribute(key) + "\" type=\"", element, value);
      closed(value, "argument", next);
      at = next;
    }
    if (root.properties.empty()) g.add_empty(from, to);
  }
};

// The calls of one reply in the family's syntax: `opened` is where the reply
// is once the family's `opener` token has been written; the calls lead to
// one of `end_ids`. `also` are other tokens the reply parser starts a call
// at, and where each leads (DeepSeek-V3's and Kimi's call opener without
// the section's).
struct CallSection {
  TokenId opener;
  NodeId opened;
  std::vector<std::pair<TokenId, NodeId>> also;
};

CallSection add_calls(TokenGrammar& g, const ReplyFormat& format,
                      const std::vector<ToolSpec>& tools, bool parallel,
                      const std::vector<TokenId>& end_ids) {
  if (tools.empty()) fail("tool call grammar: no tools to call");
  const auto end = g.add_node();
  // From `call` one call of any tool in the family's syntax, to `called`.
  const auto call = g.add_node(), called = g.add_node();
  NodeId call_opened = 0;  // DeepSeek-V3, Kimi: after the call opener
  switch (format.tools) {
    case ToolSyntax::kNone:
      fail("tool call grammar: the tokenizer has no tool-call markers");
    case ToolSyntax::kXtml: {
      // <|open|>tools<|sep|><|open|>call tool="NAME" index="K"<|sep|>ARGUMENTS
      // <|close|>call<|sep|>...<|close|>tools<|sep|><|close|>message<|sep|>
      Xtml x{g, *format.section_open, *format.section_close, *format.separator};
      const auto opened = g.add_node(), tagged = g.add_node();
      g.add_bytes(opened, "tools", tagged);
      g.add_token(tagged, {x.sep}, call);
      const auto element = g.add_node(), closing = g.add_node();
      g.add_token(call, {x.open}, element);
      for (const ToolSpec& tool : tools) {
        const auto numbered = g.add_node(), indexed = g.add_node(), quoted = g.add_node();
        const auto args = g.add_node();
        g.add_bytes(element, "call tool=\"" + tool.name + "\" index=\"", numbered);
        add_index(g, numbered, indexed, false);
        g.add_bytes(indexed, "\"", quoted);
        g.add_token(quoted, {x.sep}, args);
        x.arguments(tool, args, closing);
      }
      x.closed(closing, "call", called);
      const auto tools_closed = g.add_node(), message_closed = g.add_node();
      x.closed(called, "tools", tools_closed);
      x.closed(tools_closed, "message", message_closed);
      g.add_token(message_closed, end_ids, end);
      if (parallel) g.add_empty(called, call);
      return {x.open, opened, {}};
    }
    case ToolSyntax::kQwen3: {
      // <tool_call>\n{"name": NAME, "arguments": ARGS}\n</tool_call>, as the template writes it.
      const auto closing = g.add_node();
      for (const ToolSpec& tool : tools) {
        const auto args = g.add_node(), after = g.add_node();
        g.add_bytes(call,
                    "\n{\"name\": " + nlohmann::json(tool.name).dump() + ", \"arguments\": ", args);
        g.add_json(args, tool.arguments, after);
        g.add_bytes(after, "}\n", closing);
      }
      g.add_token(closing, {*format.call_close}, called);
      g.add_token(called, end_ids, end);
      if (parallel) {
        const auto again = g.add_node();
        g.add_bytes(called, "\n", again);
        g.add_token(again, {*format.call_open}, call);
      }
      return {*format.call_open, call, {}};
    }
    case ToolSyntax::kDeepSeekV3: {
      // <｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\nARGS\n```<｜tool▁call▁end｜>
      const auto opened = g.add_node(), typed = g.add_node(), closing = g.add_node();
      g.add_token(call, {*format.call_open}, opened);
      g.add_bytes(opened, "function", typed);
      const auto named = g.add_node();
      g.add_token(typed, {*format.separator}, named);
      for (const ToolSpec& tool : tools) {
        const auto args = g.add_node(), after = g.add_node();
        g.add_bytes(named, tool.name + "\n```json\n", args);
        g.add_json(args, tool.arguments, after);
        g.add_bytes(after, "\n```", closing);
      }
      g.add_token(closing, {*format.call_close}, called);
      call_opened = opened;
      break;
    }
    case ToolSyntax::kKimi: {
      // <|tool_call_begin|>functions.NAME:IDX<|tool_call_argument_begin|>ARGS<|tool_call_end|>
      const auto opened = g.add_node(), closing = g.add_node();
      g.add_token(call, {*format.call_open}, opened);
      for (const ToolSpec& tool : tools) {
        const auto numbered = g.add_node(), indexed = g.add_node(), args = g.add_node();
        g.add_bytes(opened, "functions." + tool.name + ":", numbered);
        add_index(g, numbered, indexed, true);
        g.add_token(indexed, {*format.separator}, args);
        g.add_json(args, tool.arguments, closing);
      }
      g.add_token(closing, {*format.call_close}, called);
      call_opened = opened;
      break;
    }
  }
  // DeepSeek-V3 and Kimi: the calls sit in a section.
  const auto section_end = g.add_node();
  g.add_token(called, {*format.section_close}, section_end);
  g.add_token(section_end, end_ids, end);
  if (parallel) {
    g.add_empty(called, call);
    if (format.tools == ToolSyntax::kDeepSeekV3) {
      const auto again = g.add_node();
      g.add_bytes(called, "\n", again);  // the template puts a newline between calls
      g.add_empty(again, call);
    }
  }
  return {*format.section_open, call, {{*format.call_open, call_opened}}};
}

}  // namespace

std::shared_ptr<const TokenGrammar> json_reply_grammar(std::shared_ptr<const JsonGrammar> json,
                                                       const ConstraintOptions& options) {
  auto g = std::make_shared<TokenGrammar>();
  const auto value = after_reasoning(*g, options);
  const auto done = g->add_node(), end = g->add_node();
  g->add_json(value, std::move(json), done);
  g->add_token(add_pieces(*g, done, options.before_end), options.end_ids, end);
  return g;
}

std::vector<ToolSpec> tool_specs(const nlohmann::ordered_json& tools, bool loose_parameters) {
  std::vector<ToolSpec> specs;
  if (!tools.is_array()) fail("tools: expected a list of tools");
  for (size_t i = 0; i < tools.size(); ++i) {
    const auto& function = tools[i].is_object()
                               ? tools[i].value("function", nlohmann::ordered_json())
                               : nlohmann::ordered_json();
    if (!function.is_object() || !function.contains("name") || !function["name"].is_string())
      fail("tools[{}].function.name: missing or not a string", i);
    ToolSpec spec;
    spec.name = function["name"].get<std::string>();
    if (!valid_function_name(spec.name))
      fail("tools[{}].function.name: '{}' is not a function name (1 to 64 of a-z, A-Z, 0-9, _, -)",
           i, spec.name);
    // No parameters: the function takes none, so its arguments are {}.
    const nlohmann::json parameters =
        function.contains("parameters") && !function["parameters"].is_null()
            ? nlohmann::json::parse(function["parameters"].dump())
            : nlohmann::json{{"type", "object"}};
    try {
      spec.arguments = JsonGrammar::from_schema(parameters);
    } catch (const Error& e) {
      if (!loose_parameters) fail("tools[{}].function.parameters: {}", i, e.what());
      spec.arguments = JsonGrammar::any_object();
    }
    specs.push_back(std::move(spec));
  }
  return specs;
}

std::shared_ptr<const TokenGrammar> tool_call_grammar(const ReplyFormat& format,
                                                      const std::vector<ToolSpec>& tools,
                                                      bool parallel,
                                                      const ConstraintOptions& options) {
  auto g = std::make_shared<TokenGrammar>();
  NodeId begin = after_reasoning(*g, options);
  const CallSection calls = add_calls(*g, format, tools, parallel, options.end_ids);
  if (format.tools == ToolSyntax::kXtml) {
    // The calls follow the response element, which the reply leaves empty.
    const NodeId response_closed = g->add_node();
    Xtml{*g, *format.section_open, *format.section_close, *format.separator}.closed(
        begin, "response", response_closed);
    begin = response_closed;
  }
  g->add_token(begin, {calls.opener}, calls.opened);
  return g;
}

std::shared_ptr<const TokenGrammar> lazy_tool_call_grammar(const ReplyFormat& format,
                                                           const std::vector<ToolSpec>& tools,
                                                           bool parallel,
                                                           const ConstraintOptions& options) {
  auto g = std::make_shared<TokenGrammar>();
  const NodeId begin = after_reasoning(*g, options);
  const CallSection calls = add_calls(*g, format, tools, parallel, options.end_ids);
  const NodeId opening = g->add_node();
  std::vector<TokenId> stops = {calls.opener};
  g->add_token(opening, {calls.opener}, calls.opened);
  for (const auto& [token, node] : calls.also) {
    stops.push_back(token);
    g->add_token(opening, {token}, node);
  }
  g->add_free_until(begin, std::move(stops), opening);
  return g;
}

}  // namespace sluice::chat
