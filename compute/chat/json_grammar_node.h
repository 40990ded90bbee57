// compute/chat/json_grammar_node.h: the compiled form of a JSON grammar,
// shared by the schema compiler (json_grammar.cpp) and the recogniser
// (json_constraint.cpp), and the recogniser's step that the mask walk
// (token_mask.cpp) drives. Private to compute/chat; nodes never change once built.
#pragma once

#include <bitset>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "compute/chat/json_constraint.h"

namespace sluice::chat {

inline constexpr uint32_t kUnbounded = std::numeric_limits<uint32_t>::max();
inline constexpr size_t kMaxProperties = 64;  // a bit per property in JsonFrame::seen
inline constexpr size_t kMaxLiterals = 64;    // a bit per literal in JsonFrame::candidates

struct JsonGrammar::Node {
  // kChoice never appears on the stack: the first byte of the value picks
  // the one alternative that can begin with it.
  enum class Kind { kObject, kArray, kString, kNumber, kInteger, kLiteral, kChoice };
  Kind kind = Kind::kLiteral;
  std::bitset<256> first;  // bytes a value of this node can begin with

  struct Property {
    std::string key;  // as written between the quotes (JSON-escaped)
    const Node* value = nullptr;
  };
  std::vector<Property> properties;
  uint64_t required = 0;             // bits of properties that must be written
  const Node* additional = nullptr;  // the value of any other key; null: no other key

  std::vector<const Node*> prefix_items;
  const Node* items = nullptr;  // items after prefix_items; null: none
  uint32_t min_items = 0, max_items = kUnbounded;

  uint32_t min_length = 0, max_length = kUnbounded;  // code points

  std::optional<int64_t> minimum, maximum;  // kInteger

  std::vector<std::string> literals;  // kLiteral: the exact texts allowed

  std::vector<const Node*> alternatives;  // kChoice

  uint64_t all_properties() const {
    return properties.size() == 64 ? ~uint64_t{0} : (uint64_t{1} << properties.size()) - 1;
  }
  const Node* item(uint32_t index) const {
    return index < prefix_items.size() ? prefix_items[index] : items;
  }
};

// One byte into a recogniser's stack (json_constraint.cpp) of one value of
// `root` (a grammar's root, or one of its nodes); false when it is refused,
// and the stack is then not to be used again.
bool feed_byte(const JsonGrammar::Node& root, std::vector<JsonFrame>& stack, uint8_t byte);
bool stack_complete(const std::vector<JsonFrame>& stack);
// The stack is inside a top-level string (after its opening quote) that a
// closing quote would complete now: no escape or character half written,
// minLength met.
bool string_closable(const std::vector<JsonFrame>& stack);

}  // namespace sluice::chat
