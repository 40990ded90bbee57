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

bool reads_bytes(Kind kind) {
  return kind == Kind::kBytes || kind == Kind::kJson || kind == Kind::kText;
}

// One byte of raw text into a JSON string's stack: as the escape JSON
// would write it.
bool feed_raw_byte(const JsonGrammar::Node& root, std::vector<JsonFrame>& stack, uint8_t byte) {
  static constexpr char kHex[] = "0123456789abcdef";
  char escaped[6] = {static_cast<char>(byte)};
  size_t length = 1;
  if (byte == '"' || byte == '\\') {
    escaped[0] = '\\';
    escaped[1] = static_cast<char>(byte);
    length = 2;
  } else if (byte < 0x20) {
    const char u[6] = {'\\', 'u', '0', '0', kHex[byte >> 4], kHex[byte & 15]};
    std::copy(u, u + 6, escaped);
    length = 6;
  }
  for (size_t i = 0; i < length; ++i)
    if (!feed_byte(root, stack, static_cast<uint8_t>(escaped[i]))) return false;
  return true;
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

void TokenGrammar::add_json(NodeId from, std::shared_ptr<const JsonGrammar> json, NodeId to,
                            const JsonGrammar::Node* root) {
  if (!json) fail("token grammar: a JSON edge with no grammar");
  if (!root) root = &json->root();
  add(from, {Kind::kJson, to, {}, {}, std::move(json), root});
}

void TokenGrammar::add_text(NodeId from, std::shared_ptr<const JsonGrammar> json,
                            const JsonGrammar::Node* string_node, NodeId to) {
  if (!json || !string_node || string_node->kind != JsonGrammar::Node::Kind::kString)
    fail("token grammar: a text edge needs a string node of its grammar");
  add(from, {Kind::kText, to, {}, {}, std::move(json), string_node});
}

void TokenGrammar::add_free_until(NodeId from, std::vector<TokenId> stops, NodeId to) {
  if (stops.empty()) fail("token grammar: a free edge with no token to stop at");
  add(from, {Kind::kFreeUntil, to, std::move(stops), {}, nullptr});
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
    const bool reads_json = edge.kind == Kind::kJson || edge.kind == Kind::kText;
    bool same = false;
    for (size_t i = 0; i < count && !reads_json; ++i)
      same = same || (out[i].edge == e && out[i].offset == 0);
    if (same) continue;
    if (count >= kMaxCursors) fail("token grammar: more than {} open paths", kMaxCursors);
    if (out.size() <= count) out.emplace_back();
    Cursor& c = out[count++];
    c.edge = e;
    c.offset = 0;
    if (reads_json) {
      c.stack.assign(1, JsonFrame{});
    } else {
      c.stack.clear();
    }
    if (edge.kind == Kind::kText) {
      // The string's opening quote is implied; an empty one may be all of it.
      if (!feed_byte(*edge.json_root, c.stack, '"'))
        fail("token grammar: a text edge whose node takes no string");
      if (string_closable(c.stack)) enter(edge.to, out, count, depth + 1);
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
      if (!feed_byte(*edge.json_root, n.stack, byte)) continue;
      ++count;
      // A complete value may still grow (a number's digits): both stay open.
      if (stack_complete(n.stack)) enter(edge.to, out, count, 0);
    } else if (edge.kind == Kind::kText) {
      if (out.size() <= count) out.emplace_back();
      Cursor& n = out[count];
      n.edge = c.edge;
      n.offset = 0;
      n.stack = c.stack;
      if (!feed_raw_byte(*edge.json_root, n.stack, byte)) continue;
      ++count;
      if (string_closable(n.stack)) enter(edge.to, out, count, 0);
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
      if (contains(edge.ids, token)) {
        for (uint32_t e : grammar_->out(edge.to)) {
          const TokenGrammar::Edge& stop = grammar_->edge(e);
          if (stop.kind != Kind::kToken || !contains(stop.ids, token)) continue;
          marker_taken = true;
          enter(stop.to, next_, next_count_, 0);
        }
      } else {
        if (next_.size() <= next_count_) next_.emplace_back();
        next_[next_count_++] = c;
      }
    } else if (reads_bytes(edge.kind) && ordinary) {
      bytes_taken = true;
    }
  }
  if (!bytes_taken) return marker_taken || next_count_ > 0;
  // The byte-reading cursors take the token's bytes one at a time.
  std::vector<Cursor>& a = scratch_[0];
  size_t a_count = 0;
  for (size_t i = 0; i < count_; ++i) {
    if (!reads_bytes(grammar_->edge(cursors_[i].edge).kind)) continue;
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

JsonConstraint::JsonConstraint(std::shared_ptr<const JsonGrammar> json,
                               std::shared_ptr<const TokenTrie> trie,
                               const ConstraintOptions& options)
    : GrammarConstraint(json_reply_grammar(std::move(json), options), std::move(trie)),
      end_id_(options.end_ids.front()) {}

}  // namespace sluice::chat
