// compute/chat/token_grammar.cpp: the token grammar graph and the constraint
// that walks it: a set of cursors (one per open path), stepped by token id
// for markers and byte by byte for ordinary tokens; masking walks the trie in
// preorder and skips the subtree of a byte no cursor takes.
#include "compute/chat/token_grammar.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "compute/chat/json_grammar_node.h"
#include "proto/error.h"

namespace sluice::chat {
namespace {

using Kind = TokenGrammar::EdgeKind;

constexpr int kMaxEmptyChain = 64;   // empty edges followed in a row
constexpr size_t kMaxCursors = 256;  // paths kept open at once

bool contains(const std::vector<TokenId>& ids, int32_t token) {
  return std::find(ids.begin(), ids.end(), token) != ids.end();
}

}  // namespace

TokenGrammar::TokenGrammar() : out_(1) {}

TokenGrammar::NodeId TokenGrammar::add_node() {
  out_.emplace_back();
  return static_cast<NodeId>(out_.size() - 1);
}

void TokenGrammar::add(NodeId from, Edge edge) {
  if (from >= out_.size() || edge.to >= out_.size())
    fail("token grammar: an edge {} -> {} leaves the {} nodes", from, edge.to, out_.size());
  out_[from].push_back(static_cast<uint32_t>(edges_.size()));
  edges_.push_back(std::move(edge));
}

void TokenGrammar::add_token(NodeId from, std::vector<TokenId> ids, NodeId to) {
  if (ids.empty()) fail("token grammar: a token edge with no token");
  add(from, {Kind::kToken, to, std::move(ids), {}, nullptr});
}

void TokenGrammar::add_bytes(NodeId from, std::string bytes, NodeId to) {
  if (bytes.empty()) fail("token grammar: an empty byte edge (use add_empty)");
  add(from, {Kind::kBytes, to, {}, std::move(bytes), nullptr});
}

void TokenGrammar::add_json(NodeId from, std::shared_ptr<const JsonGrammar> json, NodeId to) {
  if (!json) fail("token grammar: a JSON edge with no grammar");
  add(from, {Kind::kJson, to, {}, {}, std::move(json)});
}

void TokenGrammar::add_free_until(NodeId from, TokenId until, NodeId to) {
  add(from, {Kind::kFreeUntil, to, {until}, {}, nullptr});
}

void TokenGrammar::add_empty(NodeId from, NodeId to) {
  add(from, {Kind::kEmpty, to, {}, {}, nullptr});
}

GrammarConstraint::GrammarConstraint(std::shared_ptr<const TokenGrammar> grammar,
                                     std::shared_ptr<const TokenTrie> trie)
    : grammar_(std::move(grammar)), trie_(std::move(trie)) {
  if (!grammar_) fail("grammar constraint: no grammar");
  if (!trie_) fail("grammar constraint: no token trie");
  scratch_.resize(trie_->max_depth() + 1);
  scratch_count_.assign(trie_->max_depth() + 1, 0);
  enter(grammar_->start(), cursors_, count_, 0);
}

void GrammarConstraint::enter(TokenGrammar::NodeId node, std::vector<Cursor>& out, size_t& count,
                              int depth) const {
  if (depth > kMaxEmptyChain) fail("token grammar: a cycle of empty edges at node {}", node);
  for (uint32_t e : grammar_->out(node)) {
    const TokenGrammar::Edge& edge = grammar_->edge(e);
    if (edge.kind == Kind::kEmpty) {
      enter(edge.to, out, count, depth + 1);
      continue;
    }
    // Two paths waiting at the same marker or literal byte are one path.
    bool same = false;
    for (size_t i = 0; i < count && edge.kind != Kind::kJson; ++i)
      same = same || (out[i].edge == e && out[i].offset == 0);
    if (same) continue;
    if (count >= kMaxCursors) fail("token grammar: more than {} open paths", kMaxCursors);
    if (out.size() <= count) out.emplace_back();
    Cursor& c = out[count++];
    c.edge = e;
    c.offset = 0;
    if (edge.kind == Kind::kJson) {
      c.stack.assign(1, JsonFrame{});
    } else {
      c.stack.clear();
    }
  }
}

bool GrammarConstraint::step_byte(const std::vector<Cursor>& from, size_t from_count, uint8_t byte,
                                  std::vector<Cursor>& out, size_t& count) const {
  count = 0;
  for (size_t i = 0; i < from_count; ++i) {
    const Cursor& c = from[i];
    const TokenGrammar::Edge& edge = grammar_->edge(c.edge);
    if (edge.kind == Kind::kBytes) {
      if (static_cast<uint8_t>(edge.bytes[c.offset]) != byte) continue;
      if (c.offset + 1 == edge.bytes.size()) {
        enter(edge.to, out, count, 0);
        continue;
      }
      if (out.size() <= count) out.emplace_back();
      Cursor& n = out[count++];
      n.edge = c.edge;
      n.offset = c.offset + 1;
      n.stack.clear();
    } else if (edge.kind == Kind::kJson) {
      if (out.size() <= count) out.emplace_back();
      Cursor& n = out[count];
      n.edge = c.edge;
      n.offset = 0;
      n.stack = c.stack;
      if (!feed_byte(*edge.json, n.stack, byte)) continue;
      ++count;
      // A complete value may still grow (a number's digits): both stay open.
      if (stack_complete(n.stack)) enter(edge.to, out, count, 0);
    }
  }
  return count > 0;
}

bool GrammarConstraint::step_token(int32_t token) {
  next_count_ = 0;
  const bool ordinary = token >= 0 && static_cast<size_t>(token) < trie_->vocab_size() &&
                        !trie_->bytes(token).empty();
  // A marker may lead to a node with no edges (the end of the reply): taken,
  // with nothing after it.
  bool marker_taken = false, bytes_taken = false;
  for (size_t i = 0; i < count_; ++i) {
    const Cursor& c = cursors_[i];
    const TokenGrammar::Edge& edge = grammar_->edge(c.edge);
    if (edge.kind == Kind::kToken && contains(edge.ids, token)) {
      marker_taken = true;
      enter(edge.to, next_, next_count_, 0);
    } else if (edge.kind == Kind::kFreeUntil) {
      if (token == edge.ids[0]) {
        marker_taken = true;
        enter(edge.to, next_, next_count_, 0);
      } else {
        if (next_.size() <= next_count_) next_.emplace_back();
        next_[next_count_++] = c;
      }
    } else if ((edge.kind == Kind::kBytes || edge.kind == Kind::kJson) && ordinary) {
      bytes_taken = true;
    }
  }
  if (!bytes_taken) return marker_taken || next_count_ > 0;
  // The byte-reading cursors take the token's bytes one at a time.
  std::vector<Cursor>& a = scratch_[0];
  size_t a_count = 0;
  for (size_t i = 0; i < count_; ++i) {
    const Kind kind = grammar_->edge(cursors_[i].edge).kind;
    if (kind != Kind::kBytes && kind != Kind::kJson) continue;
    if (a.size() <= a_count) a.emplace_back();
    a[a_count++] = cursors_[i];
  }
  std::vector<Cursor> b;
  size_t b_count = 0;
  for (char ch : trie_->bytes(token)) {
    if (!step_byte(a, a_count, static_cast<uint8_t>(ch), b, b_count))
      return marker_taken || next_count_ > 0;
    std::swap(a, b);
    std::swap(a_count, b_count);
  }
  for (size_t i = 0; i < a_count; ++i) {
    if (next_.size() <= next_count_) next_.emplace_back();
    next_[next_count_++] = std::move(a[i]);
  }
  return true;
}

bool GrammarConstraint::active() const {
  for (size_t i = 0; i < count_; ++i)
    if (grammar_->edge(cursors_[i].edge).kind == Kind::kFreeUntil) return false;
  return true;
}

bool GrammarConstraint::expects_token(int32_t token) const {
  for (size_t i = 0; i < count_; ++i) {
    const TokenGrammar::Edge& edge = grammar_->edge(cursors_[i].edge);
    if (edge.kind == Kind::kToken && contains(edge.ids, token)) return true;
  }
  return false;
}

bool GrammarConstraint::allows(int32_t token) {
  if (!active()) return true;
  return step_token(token);
}

void GrammarConstraint::accept(int32_t token) {
  if (!step_token(token))
    fail("grammar constraint: token {} was chosen but no path of the grammar takes it", token);
  std::swap(cursors_, next_);
  std::swap(count_, next_count_);
}

void GrammarConstraint::mask(std::span<float> logits) {
  if (!active()) return;
  allowed_.assign(logits.size(), 0);
  auto allow = [&](int32_t id) {
    if (id >= 0 && static_cast<size_t>(id) < allowed_.size()) allowed_[static_cast<size_t>(id)] = 1;
  };
  size_t& root_count = scratch_count_[0];
  root_count = 0;
  for (size_t i = 0; i < count_; ++i) {
    const TokenGrammar::Edge& edge = grammar_->edge(cursors_[i].edge);
    if (edge.kind == Kind::kToken) {
      for (TokenId id : edge.ids) allow(id);
    } else {
      if (scratch_[0].size() <= root_count) scratch_[0].emplace_back();
      scratch_[0][root_count++] = cursors_[i];
    }
  }
  if (root_count > 0) {
    const size_t nodes = trie_->nodes();
    for (size_t i = 0; i < nodes;) {
      const uint32_t d = trie_->depth(i);
      if (!step_byte(scratch_[d - 1], scratch_count_[d - 1], trie_->byte(i), scratch_[d],
                     scratch_count_[d])) {
        i = trie_->subtree_end(i);
        continue;
      }
      for (TokenId id : trie_->ends(i)) allow(id);
      ++i;
    }
  }
  const float off = -std::numeric_limits<float>::infinity();
  for (size_t id = 0; id < logits.size(); ++id) {
    if (!allowed_[id]) logits[id] = off;
  }
}

namespace {

// Free reasoning first, as `options` says; returns the node where the
// constrained part of the reply begins.
TokenGrammar::NodeId after_reasoning(TokenGrammar& g, const ConstraintOptions& options) {
  if (options.end_ids.empty()) fail("grammar constraint: no end token to finish the reply with");
  const auto begin = g.add_node();
  g.add_empty(0, begin);
  if (options.start_after) {
    const auto reasoning = g.add_node();
    g.add_free_until(reasoning, *options.start_after, begin);
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

}  // namespace

std::shared_ptr<const TokenGrammar> json_reply_grammar(std::shared_ptr<const JsonGrammar> json,
                                                       const ConstraintOptions& options) {
  auto g = std::make_shared<TokenGrammar>();
  const auto value = after_reasoning(*g, options);
  const auto done = g->add_node(), end = g->add_node();
  g->add_json(value, std::move(json), done);
  g->add_token(done, options.end_ids, end);
  return g;
}

std::vector<ToolSpec> tool_specs(const nlohmann::ordered_json& tools) {
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
      fail("tools[{}].function.parameters: {}", i, e.what());
    }
    specs.push_back(std::move(spec));
  }
  return specs;
}

std::shared_ptr<const TokenGrammar> tool_call_grammar(const ReplyFormat& format,
                                                      const std::vector<ToolSpec>& tools,
                                                      bool parallel,
                                                      const ConstraintOptions& options) {
  if (tools.empty()) fail("tool call grammar: no tools to call");
  auto g = std::make_shared<TokenGrammar>();
  const auto begin = after_reasoning(*g, options);
  const auto end = g->add_node();
  // From `call` one call of any tool in the family's syntax, to `called`.
  const auto call = g->add_node(), called = g->add_node();
  switch (format.tools) {
    case ToolSyntax::kNone:
      fail("tool call grammar: the tokenizer has no tool-call markers");
    case ToolSyntax::kXtml:
      fail("tool call grammar: XTML (Kimi K3) calls are not constrained yet");
    case ToolSyntax::kQwen3: {
      // <tool_call>\n{"name": NAME, "arguments": ARGS}\n</tool_call>, as the template writes it.
      const auto opened = g->add_node(), closing = g->add_node();
      g->add_token(call, {*format.call_open}, opened);
      for (const ToolSpec& tool : tools) {
        const auto args = g->add_node(), after = g->add_node();
        g->add_bytes(
            opened, "\n{\"name\": " + nlohmann::json(tool.name).dump() + ", \"arguments\": ", args);
        g->add_json(args, tool.arguments, after);
        g->add_bytes(after, "}\n", closing);
      }
      g->add_token(closing, {*format.call_close}, called);
      g->add_empty(begin, call);
      g->add_token(called, options.end_ids, end);
      if (parallel) {
        const auto again = g->add_node();
        g->add_bytes(called, "\n", again);
        g->add_token(again, {*format.call_open}, opened);
      }
      return g;
    }
    case ToolSyntax::kDeepSeekV3: {
      // <｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\nARGS\n```<｜tool▁call▁end｜>
      const auto opened = g->add_node(), typed = g->add_node(), closing = g->add_node();
      g->add_token(call, {*format.call_open}, opened);
      g->add_bytes(opened, "function", typed);
      const auto named = g->add_node();
      g->add_token(typed, {*format.separator}, named);
      for (const ToolSpec& tool : tools) {
        const auto args = g->add_node(), after = g->add_node();
        g->add_bytes(named, tool.name + "\n```json\n", args);
        g->add_json(args, tool.arguments, after);
        g->add_bytes(after, "\n```", closing);
      }
      g->add_token(closing, {*format.call_close}, called);
      break;
    }
    case ToolSyntax::kKimi: {
      // <|tool_call_begin|>functions.NAME:IDX<|tool_call_argument_begin|>ARGS<|tool_call_end|>
      static const auto index = JsonGrammar::from_schema({{"type", "integer"}, {"minimum", 0}});
      const auto opened = g->add_node(), closing = g->add_node();
      g->add_token(call, {*format.call_open}, opened);
      for (const ToolSpec& tool : tools) {
        const auto numbered = g->add_node(), indexed = g->add_node(), args = g->add_node();
        g->add_bytes(opened, "functions." + tool.name + ":", numbered);
        g->add_json(numbered, index, indexed);
        g->add_token(indexed, {*format.separator}, args);
        g->add_json(args, tool.arguments, closing);
      }
      g->add_token(closing, {*format.call_close}, called);
      break;
    }
  }
  // DeepSeek-V3 and Kimi: the calls sit in a section.
  const auto section_end = g->add_node();
  g->add_token(begin, {*format.section_open}, call);
  g->add_token(called, {*format.section_close}, section_end);
  g->add_token(section_end, options.end_ids, end);
  if (parallel) {
    g->add_empty(called, call);
    if (format.tools == ToolSyntax::kDeepSeekV3) {
      const auto again = g->add_node();
      g->add_bytes(called, "\n", again);  // the template puts a newline between calls
      g->add_empty(again, call);
    }
  }
  return g;
}

JsonConstraint::JsonConstraint(std::shared_ptr<const JsonGrammar> json,
                               std::shared_ptr<const TokenTrie> trie,
                               const ConstraintOptions& options)
    : GrammarConstraint(json_reply_grammar(std::move(json), options), std::move(trie)),
      end_id_(options.end_ids.front()) {}

}  // namespace sluice::chat
