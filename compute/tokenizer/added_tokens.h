// compute/tokenizer/added_tokens.h: finds added (special and control) tokens
// as whole strings in text, longest match first, with their strip and
// single-word rules. It only marks spans; it never tokenizes what lies between.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "compute/tokenizer/bpe.h"

namespace sluice::tokenizer {

struct AddedToken {
  TokenId id = 0;
  std::string content;
  bool special = false;
  bool normalized = false;  // matched in normalized text rather than raw text
  bool lstrip = false;      // swallows whitespace on its left
  bool rstrip = false;      // swallows whitespace on its right
  bool single_word = false; // only matches when not inside a word
};

// A span of the text: an added token (index into the matcher's token list)
// or a stretch of ordinary text (token < 0).
struct Segment {
  size_t begin;
  size_t end;
  int token;
};

class AddedTokenMatcher {
 public:
  AddedTokenMatcher() { first_byte_.fill(false); }
  explicit AddedTokenMatcher(std::vector<AddedToken> tokens);

  bool empty() const { return tokens_.empty(); }
  const AddedToken& token(int index) const { return tokens_[static_cast<size_t>(index)]; }
  const std::vector<AddedToken>& tokens() const { return tokens_; }

  // Splits valid UTF-8 `text` into segments covering it in order. Scanning
  // left to right, the longest token starting at the leftmost position wins.
  void split(std::string_view text, std::vector<Segment>& out) const;

 private:
  struct Node {
    std::vector<std::pair<uint8_t, uint32_t>> children;
    int token = -1;
  };
  // Longest token starting at `at`: (length, token index) or (0, -1).
  std::pair<size_t, int> longest_at(std::string_view text, size_t at) const;

  std::vector<AddedToken> tokens_;
  std::vector<Node> nodes_;
  std::array<bool, 256> first_byte_;
};

}  // namespace sluice::tokenizer
