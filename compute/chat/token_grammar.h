// compute/chat/token_grammar.h: constrained decoding over a reply's whole
// token stream: a small graph whose edges are marker tokens (by id), literal
// bytes, JSON values of a JsonGrammar (or raw strings of one) and free text,
// and the sampler hook that keeps the reply on a path of it. Structured output
// and tool calls (required, or lazily after the model's own opener) are graphs
// of this (built in tool_grammar.cpp); it never reads the logits' values.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "compute/chat/json_constraint.h"
#include "compute/chat/reply_parser.h"
#include "compute/model/sampler.h"

namespace sluice::chat {

// Built once, then shared read-only by the generations that use it. Node 0
// is the start unless start() says otherwise. No cycle may consist of empty
// edges only.
class TokenGrammar {
 public:
  using NodeId = uint32_t;
  enum class EdgeKind {
    kToken,  // one of `ids` (markers and end tokens, which the trie leaves out)
    kBytes,  // `bytes` exactly, written in ordinary tokens
    kJson,   // one value of `json` (from json_root), in ordinary tokens
    // A string of `json` (json_root, a string node) written raw, without
    // quotes or escapes, as XTML writes a string argument.
    kText,
    // Any tokens until one of ids, which the token edges of `to` then read.
    kFreeUntil,
    kEmpty,  // nothing
  };
  struct Edge {
    EdgeKind kind;
    NodeId to;
    std::vector<TokenId> ids;
    std::string bytes;
    std::shared_ptr<const JsonGrammar> json;
    const JsonGrammar::Node* json_root = nullptr;  // a node of `json`
  };

  TokenGrammar();
  NodeId add_node();
  void add_token(NodeId from, std::vector<TokenId> ids, NodeId to);
  void add_bytes(NodeId from, std::string bytes, NodeId to);  // throws on empty bytes
  // A value of `root` (a node of `json`; null: its root).
  void add_json(NodeId from, std::shared_ptr<const JsonGrammar> json, NodeId to,
                const JsonGrammar::Node* root = nullptr);
  // Throws unless `string_node` (of `json`) is a string.
  void add_text(NodeId from, std::shared_ptr<const JsonGrammar> json,
                const JsonGrammar::Node* string_node, NodeId to);
  // Any tokens until one of `stops`, which a token edge leaving `to` reads.
  void add_free_until(NodeId from, std::vector<TokenId> stops, NodeId to);
  void add_empty(NodeId from, NodeId to);
  void set_start(NodeId node) { start_ = node; }

  NodeId start() const { return start_; }
  size_t nodes() const { return out_.size(); }
  const Edge& edge(uint32_t index) const { return edges_[index]; }
  std::span<const uint32_t> out(NodeId node) const { return out_[node]; }

 private:
  void add(NodeId from, Edge edge);
  std::vector<Edge> edges_;
  std::vector<std::vector<uint32_t>> out_;  // edge indices by node
  NodeId start_ = 0;
};

// The sampler hook (SamplingParams::constraint) for one generation. It keeps
// every path of the graph the tokens so far could be on (alternatives that
// share a prefix, e.g. tools whose names begin alike, stay open together).
class GrammarConstraint : public TokenConstraint {
 public:
  GrammarConstraint(std::shared_ptr<const TokenGrammar> grammar,
                    std::shared_ptr<const TokenTrie> trie);
  bool allows(int32_t token) override;
  void mask(std::span<float> logits) override;
  // Throws Error when `token` is not allowed.
  void accept(int32_t token) override;
  // Inside no free part: the next token is constrained.
  bool active() const;
  // A kToken edge whose ids include `token` can be taken next (an end token
  // once a value is complete).
  bool expects_token(int32_t token) const;

  struct Cursor {
    uint32_t edge = 0;
    uint32_t offset = 0;           // kBytes: bytes matched so far
    std::vector<JsonFrame> stack;  // kJson: the recogniser's stack
  };

 private:
  // Appends the cursors that wait at `node`'s edges (through empty edges).
  void enter(TokenGrammar::NodeId node, std::vector<Cursor>& out, size_t& count, int depth) const;
  // `from`'s byte-reading cursors after `byte`, into `out`; false when none survive.
  bool step_byte(const std::vector<Cursor>& from, size_t from_count, uint8_t byte,
                 std::vector<Cursor>& out, size_t& count) const;
  // The cursors after `token`, into next_; false when it is refused.
  bool step_token(int32_t token);

  std::shared_ptr<const TokenGrammar> grammar_;
  std::shared_ptr<const TokenTrie> trie_;
  std::vector<Cursor> cursors_, next_;
  size_t count_ = 0, next_count_ = 0;
  // One cursor set per trie depth while masking (and while probing bytes).
  std::vector<std::vector<Cursor>> scratch_;
  std::vector<size_t> scratch_count_;
  std::vector<uint8_t> allowed_;
};

// A reply that is one JSON value of `json` (after reasoning, as `options`
// says), then one of options.end_ids.
std::shared_ptr<const TokenGrammar> json_reply_grammar(std::shared_ptr<const JsonGrammar> json,
                                                       const ConstraintOptions& options);

// A tool the reply may call: its name and the grammar of its arguments.
struct ToolSpec {
  std::string name;
  std::shared_ptr<const JsonGrammar> arguments;
};

// The OpenAI `tools` list as ToolSpecs. Throws Error "tools[i].function...:
// ..." naming the tool whose parameters cannot be enforced, or, with
// `loose_parameters`, gives that tool arguments of any JSON object.
std::vector<ToolSpec> tool_specs(const nlohmann::ordered_json& tools,
                                 bool loose_parameters = false);

// A reply that is one tool call (several when `parallel`) of `tools` in the
// family's syntax (format.tools, its markers by id), each call's arguments a
// value of its tool's grammar, then one of options.end_ids; reasoning first
// stays free as options says. XTML writes an object's properties as
// argument elements (in `properties` order, strings raw), any other
// arguments as one json element. Throws Error when the format has no tool
// syntax or `tools` is empty.
std::shared_ptr<const TokenGrammar> tool_call_grammar(const ReplyFormat& format,
                                                      const std::vector<ToolSpec>& tools,
                                                      bool parallel,
                                                      const ConstraintOptions& options);

// tool_choice "auto": the reply is free until the model writes a token the
// reply parser starts a call at (Qwen3's <tool_call>, DeepSeek-V3's and
// Kimi's section or call opener, XTML's <|open|> past the think element,
// which must then open the tools); from there on it is the calls of
// tool_call_grammar, then an end token. An opener inside reasoning stays
// reasoning, as the parser reads it.
std::shared_ptr<const TokenGrammar> lazy_tool_call_grammar(const ReplyFormat& format,
                                                           const std::vector<ToolSpec>& tools,
                                                           bool parallel,
                                                           const ConstraintOptions& options);

// Structured output: json_reply_grammar(json, options) as a constraint.
class JsonConstraint final : public GrammarConstraint {
 public:
  JsonConstraint(std::shared_ptr<const JsonGrammar> json, std::shared_ptr<const TokenTrie> trie,
                 const ConstraintOptions& options);
  // The value is complete (an end token may come).
  bool complete() const { return expects_token(end_id_); }

 private:
  TokenId end_id_;
};

}  // namespace sluice::chat
