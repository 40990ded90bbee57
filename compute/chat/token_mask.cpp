// compute/chat/token_mask.cpp: the vocabulary trie and the JsonConstraint
// sampler hook. Masking walks the trie in preorder from the current state and
// skips the whole subtree of a refused byte; it never reads the logits' values.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <utility>

#include "compute/chat/json_constraint.h"
#include "compute/chat/json_grammar_node.h"
#include "proto/error.h"

namespace sluice::chat {

TokenTrie::TokenTrie(const tokenizer::Tokenizer& tok) {
  bytes_.resize(tok.vocab_size());
  std::vector<TokenId> order;
  for (size_t id = 0; id < bytes_.size(); ++id) {
    const auto t = static_cast<TokenId>(id);
    if (!tok.id_to_token(t) || tok.is_added(t) || tok.is_special(t)) continue;
    bytes_[id] = tok.token_bytes(t);
    if (!bytes_[id].empty()) order.push_back(t);
  }
  token_count_ = order.size();
  std::sort(order.begin(), order.end(), [&](TokenId a, TokenId b) {
    return bytes_[static_cast<size_t>(a)] < bytes_[static_cast<size_t>(b)] ||
           (bytes_[static_cast<size_t>(a)] == bytes_[static_cast<size_t>(b)] && a < b);
  });
  // Sorted strings give the preorder directly: each token adds the nodes
  // past its common prefix with the one before.
  std::vector<uint32_t> path;  // node index at each depth - 1
  std::vector<std::pair<uint32_t, TokenId>> ends;
  const std::string* previous = nullptr;
  for (TokenId id : order) {
    const std::string& s = bytes_[static_cast<size_t>(id)];
    size_t common = 0;
    if (previous) {
      while (common < s.size() && common < previous->size() && s[common] == (*previous)[common])
        ++common;
    }
    for (size_t d = path.size(); d > common; --d)
      subtree_end_[path[d - 1]] = static_cast<uint32_t>(byte_.size());
    path.resize(common);
    for (size_t d = common; d < s.size(); ++d) {
      path.push_back(static_cast<uint32_t>(byte_.size()));
      byte_.push_back(static_cast<uint8_t>(s[d]));
      depth_.push_back(static_cast<uint32_t>(d + 1));
      subtree_end_.push_back(0);
    }
    ends.emplace_back(path.back(), id);
    max_depth_ = std::max<uint32_t>(max_depth_, static_cast<uint32_t>(s.size()));
    previous = &s;
  }
  for (uint32_t node : path) subtree_end_[node] = static_cast<uint32_t>(byte_.size());
  end_begin_.assign(byte_.size() + 1, 0);
  for (const auto& [node, id] : ends) ++end_begin_[node + 1];
  std::partial_sum(end_begin_.begin(), end_begin_.end(), end_begin_.begin());
  end_list_.resize(ends.size());
  std::vector<uint32_t> fill(end_begin_.begin(), end_begin_.end() - 1);
  for (const auto& [node, id] : ends) end_list_[fill[node]++] = id;
}

JsonConstraint::JsonConstraint(std::shared_ptr<const JsonGrammar> grammar,
                               std::shared_ptr<const TokenTrie> trie, ConstraintOptions options)
    : trie_(std::move(trie)),
      options_(std::move(options)),
      state_(std::move(grammar)),
      active_(!(options_.start_after && options_.starts_free)) {
  if (!trie_) fail("json constraint: no token trie");
  scratch_.resize(trie_->max_depth() + 1);
}

bool JsonConstraint::complete() const {
  return state_.complete();
}

bool JsonConstraint::allows(int32_t token) {
  if (!active_) return true;
  if (first_ && options_.start_after && options_.reasoning_open &&
      token == *options_.reasoning_open) {
    return true;
  }
  if (std::find(options_.end_ids.begin(), options_.end_ids.end(), token) !=
      options_.end_ids.end()) {
    return complete();
  }
  if (token < 0 || static_cast<size_t>(token) >= trie_->vocab_size()) return false;
  const std::string& bytes = trie_->bytes(token);
  if (bytes.empty()) return false;
  JsonRecognizer probe = state_;
  return probe.feed(bytes);
}

void JsonConstraint::accept(int32_t token) {
  const bool first = std::exchange(first_, false);
  if (!active_) {
    active_ = options_.start_after && token == *options_.start_after;
    return;
  }
  if (first && options_.start_after && options_.reasoning_open &&
      token == *options_.reasoning_open) {
    active_ = false;
    return;
  }
  if (std::find(options_.end_ids.begin(), options_.end_ids.end(), token) != options_.end_ids.end())
    return;
  if (token < 0 || static_cast<size_t>(token) >= trie_->vocab_size() ||
      !state_.feed(trie_->bytes(token))) {
    fail("json constraint: token {} was chosen but does not continue the value", token);
  }
}

void JsonConstraint::mask(std::span<float> logits) {
  if (!active_) return;
  allowed_.assign(logits.size(), 0);
  if (first_ && options_.start_after && options_.reasoning_open &&
      static_cast<size_t>(*options_.reasoning_open) < allowed_.size()) {
    allowed_[static_cast<size_t>(*options_.reasoning_open)] = 1;
  }
  if (complete()) {
    for (TokenId id : options_.end_ids) {
      if (id >= 0 && static_cast<size_t>(id) < allowed_.size())
        allowed_[static_cast<size_t>(id)] = 1;
    }
  }
  const JsonGrammar& grammar = *state_.grammar_;
  scratch_[0] = state_.stack_;
  const size_t nodes = trie_->nodes();
  for (size_t i = 0; i < nodes;) {
    const uint32_t d = trie_->depth(i);
    std::vector<JsonFrame>& here = scratch_[d];
    here = scratch_[d - 1];
    if (!feed_byte(grammar, here, trie_->byte(i))) {
      i = trie_->subtree_end(i);
      continue;
    }
    for (TokenId id : trie_->ends(i)) {
      if (static_cast<size_t>(id) < allowed_.size()) allowed_[static_cast<size_t>(id)] = 1;
    }
    ++i;
  }
  const float off = -std::numeric_limits<float>::infinity();
  for (size_t id = 0; id < logits.size(); ++id) {
    if (!allowed_[id]) logits[id] = off;
  }
}

}  // namespace sluice::chat
