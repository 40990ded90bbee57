// compute/chat/json_constraint.h: structured output by constrained decoding
// (serving.md 8): a byte-level recogniser of one JSON value of a grammar
// (any object, or a JSON Schema subset) and a trie over the vocabulary's
// bytes; the sampler hook that drives them is token_grammar.h's. The
// recogniser never accepts a byte that cannot continue a valid value.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "compute/tokenizer/tokenizer.h"

namespace sluice::chat {

using tokenizer::TokenId;

// What the value must be. Supported schema keywords: type (a name or a
// list), properties, required, additionalProperties (absent: no extra keys,
// as llama.cpp), enum, const, anyOf/oneOf whose alternatives begin with
// different bytes (e.g. a type and null), allOf of one schema, local $ref
// (#/$defs/..., #/definitions/...), items, prefixItems, minItems, maxItems,
// minLength, maxLength, integer minimum/maximum; title, description,
// default, examples, $schema, strict and $defs are ignored. Anything else
// is refused, naming it. Whitespace between tokens: none, one space, or a
// newline and up to 20 spaces or tabs.
class JsonGrammar {
 public:
  // {"type": "json_object"}: any JSON object.
  static std::shared_ptr<const JsonGrammar> any_object();
  // Throws Error "json schema at /properties/x: ..." naming the keyword.
  static std::shared_ptr<const JsonGrammar> from_schema(const nlohmann::json& schema);
  // An OpenAI response_format: {"type": "text"} gives nullptr, "json_object"
  // any_object(), "json_schema" the schema in json_schema.schema. Throws
  // Error naming response_format and the field.
  static std::shared_ptr<const JsonGrammar> from_response_format(const nlohmann::json& format);

  struct Node;
  ~JsonGrammar();
  const Node& root() const;

 private:
  JsonGrammar();
  std::vector<std::unique_ptr<Node>> nodes_;
  friend struct GrammarCompiler;
};

// Where the recogniser is inside one value being written: plain data, so
// a state is copied with a memcpy. Only json_constraint.cpp reads the fields.
struct JsonFrame {
  const JsonGrammar::Node* node = nullptr;
  uint8_t phase = 0;
  uint8_t whitespace = 0;  // the run since the last token: 1 one space, 2+ a newline and spaces
  uint8_t escape = 0;      // inside a string: 1 after a backslash, 2..5 hex digits still due
  uint8_t utf8_left = 0;   // continuation bytes still due
  uint8_t utf8_low = 0x80, utf8_high = 0xBF;  // the range of the next one
  bool negative = false;
  uint32_t count = 0;       // items, code points, bytes of a key or literal, digits
  uint32_t property = 0;    // the property whose value is being written
  uint64_t seen = 0;        // properties written
  uint64_t candidates = 0;  // properties (keys) or literals still matching
  uint64_t magnitude = 0;   // an integer's digits so far (saturating)
};

// One JSON value of a grammar, recognised byte by byte. Cheap to copy.
class JsonRecognizer {
 public:
  explicit JsonRecognizer(std::shared_ptr<const JsonGrammar> grammar);
  // False (and the state unchanged) when `byte` cannot continue any value.
  bool feed(uint8_t byte);
  // All or nothing: false (state unchanged) when any byte is refused.
  bool feed(std::string_view bytes);
  // The bytes so far are a whole value (nothing but its end may follow).
  bool complete() const;

 private:
  std::shared_ptr<const JsonGrammar> grammar_;
  std::vector<JsonFrame> stack_;
};

// Whether `text` is exactly one value of the grammar.
bool matches(const std::shared_ptr<const JsonGrammar>& grammar, std::string_view text);

// The vocabulary's token bytes as a trie, built once per tokenizer and shared
// read-only. Added and special tokens are left out: structured output is
// written in ordinary tokens. Nodes are stored in preorder (children by
// byte), so a walk that refuses a node skips its whole subtree at once.
class TokenTrie {
 public:
  explicit TokenTrie(const tokenizer::Tokenizer& tokenizer);
  size_t nodes() const { return byte_.size(); }
  size_t tokens() const { return token_count_; }
  size_t vocab_size() const { return bytes_.size(); }
  // Empty for a token outside the trie.
  const std::string& bytes(TokenId id) const { return bytes_[static_cast<size_t>(id)]; }

  // Node i (the root is implicit): the byte leading to it, its depth (1 for
  // the root's children), one past its subtree, and the tokens ending there.
  uint8_t byte(size_t node) const { return byte_[node]; }
  uint32_t depth(size_t node) const { return depth_[node]; }
  uint32_t subtree_end(size_t node) const { return subtree_end_[node]; }
  std::span<const TokenId> ends(size_t node) const {
    return {end_list_.data() + end_begin_[node], end_list_.data() + end_begin_[node + 1]};
  }
  uint32_t max_depth() const { return max_depth_; }

 private:
  std::vector<std::string> bytes_;  // by id
  std::vector<uint8_t> byte_;
  std::vector<uint32_t> depth_, subtree_end_, end_begin_;
  std::vector<TokenId> end_list_;
  size_t token_count_ = 0;
  uint32_t max_depth_ = 0;
};

// A piece of fixed reply syntax: a marker token, or else literal bytes.
struct SyntaxPiece {
  std::optional<TokenId> token;
  std::string bytes;
};

// What surrounds the constrained part of a reply (token_grammar.h).
struct ConstraintOptions {
  // Allowed once the value is complete, and only then (end of turn, end of
  // sequence).
  std::vector<TokenId> end_ids;
  // Tokens are free until this one is accepted (e.g. </think> when the prompt
  // opened reasoning); nullopt: constrained from the first token.
  std::optional<TokenId> start_after;
  // May come as the very first token (e.g. <think>), freeing the tokens until
  // start_after: a thinking model reasons first, unconstrained.
  std::optional<TokenId> reasoning_open;
  bool starts_free = false;  // the prompt already opened reasoning
  // Written after start_after, before the constrained part (XTML:
  // think<|sep|><|open|>response<|sep|>).
  std::vector<SyntaxPiece> after_reasoning;
  // Written after a constrained value, before the end token (XTML:
  // <|close|>response<|sep|><|close|>message<|sep|>).
  std::vector<SyntaxPiece> before_end;
};

}  // namespace sluice::chat
