// compute/chat/token_mask.cpp: the vocabulary trie that masking walks
// (token_grammar.cpp): every ordinary token's bytes, in preorder, so a refused
// byte skips its whole subtree. Added and special tokens never enter it.
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

}  // namespace sluice::chat
