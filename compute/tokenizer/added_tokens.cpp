// compute/tokenizer/added_tokens.cpp: a byte trie over the added tokens and
// the lstrip/rstrip/single_word rules of Hugging Face's added vocabulary.
// Whitespace and word characters are judged on whole code points, never bytes.
#include "compute/tokenizer/added_tokens.h"

#include <algorithm>

#include "compute/tokenizer/unicode.h"

namespace sluice::tokenizer {
namespace {

// Start of the code point that ends at `end` in valid UTF-8.
size_t previous_char_start(std::string_view text, size_t end) {
  size_t i = end - 1;
  while (i > 0 && (static_cast<unsigned char>(text[i]) & 0xC0) == 0x80) --i;
  return i;
}

char32_t char_at(std::string_view text, size_t at, size_t* length) {
  std::u32string one;
  size_t len = 1;
  const auto b = static_cast<unsigned char>(text[at]);
  if (b >= 0xF0) {
    len = 4;
  } else if (b >= 0xE0) {
    len = 3;
  } else if (b >= 0xC0) {
    len = 2;
  }
  len = std::min(len, text.size() - at);
  decode_utf8(text.substr(at, len), one);
  if (length) *length = len;
  return one.empty() ? 0 : one[0];
}

bool is_word_before(std::string_view text, size_t at) {
  if (at == 0) return false;
  return (char_classes(char_at(text, previous_char_start(text, at), nullptr)) & kWord) != 0;
}

bool is_word_after(std::string_view text, size_t at) {
  if (at >= text.size()) return false;
  return (char_classes(char_at(text, at, nullptr)) & kWord) != 0;
}

}  // namespace

AddedTokenMatcher::AddedTokenMatcher(std::vector<AddedToken> tokens) : tokens_(std::move(tokens)) {
  first_byte_.fill(false);
  nodes_.emplace_back();
  for (size_t t = 0; t < tokens_.size(); ++t) {
    const std::string& content = tokens_[t].content;
    if (content.empty()) continue;  // an empty token would match everywhere
    first_byte_[static_cast<uint8_t>(content[0])] = true;
    uint32_t node = 0;
    for (char ch : content) {
      const auto byte = static_cast<uint8_t>(ch);
      auto& children = nodes_[node].children;
      auto it = std::find_if(children.begin(), children.end(), [&](const auto& c) { return c.first == byte; });
      if (it != children.end()) {
        node = it->second;
      } else {
        const auto child = static_cast<uint32_t>(nodes_.size());
        nodes_[node].children.emplace_back(byte, child);
        nodes_.emplace_back();
        node = child;
      }
    }
    nodes_[node].token = static_cast<int>(t);  // a later duplicate wins, like a map insert
  }
}

std::pair<size_t, int> AddedTokenMatcher::longest_at(std::string_view text, size_t at) const {
  std::pair<size_t, int> best{0, -1};
  uint32_t node = 0;
  for (size_t i = at; i < text.size(); ++i) {
    const auto byte = static_cast<uint8_t>(text[i]);
    const auto& children = nodes_[node].children;
    auto it = std::find_if(children.begin(), children.end(), [&](const auto& c) { return c.first == byte; });
    if (it == children.end()) break;
    node = it->second;
    if (nodes_[node].token >= 0) best = {i + 1 - at, nodes_[node].token};
  }
  return best;
}

void AddedTokenMatcher::split(std::string_view text, std::vector<Segment>& out) const {
  out.clear();
  size_t last_end = 0;
  for (size_t pos = 0; pos < text.size();) {
    if (!first_byte_[static_cast<uint8_t>(text[pos])]) {
      ++pos;
      continue;
    }
    const auto [length, index] = longest_at(text, pos);
    if (index < 0) {
      ++pos;
      continue;
    }
    const AddedToken& token = tokens_[static_cast<size_t>(index)];
    size_t start = pos;
    size_t stop = pos + length;
    pos = stop;  // a rejected match is skipped whole, as a non-overlapping scan does
    if (token.single_word && (is_word_before(text, start) || is_word_after(text, stop))) continue;
    if (token.lstrip) {
      while (start > last_end) {
        const size_t prev = previous_char_start(text, start);
        if (!(char_classes(char_at(text, prev, nullptr)) & kSpace)) break;
        start = prev;
      }
    }
    if (token.rstrip) {
      while (stop < text.size()) {
        size_t len = 0;
        if (!(char_classes(char_at(text, stop, &len)) & kSpace)) break;
        stop += len;
      }
      pos = stop;
    }
    if (last_end < start) out.push_back({last_end, start, -1});
    out.push_back({start, stop, index});
    last_end = stop;
  }
  if (last_end < text.size()) out.push_back({last_end, text.size(), -1});
}

}  // namespace sluice::tokenizer
