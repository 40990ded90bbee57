// compute/chat/json_constraint.cpp: the byte-level pushdown recogniser over
// grammar nodes (the trie is in token_mask.cpp, the sampler hook in
// token_grammar.cpp). It bounds nesting, numbers and whitespace, so no value
// can grow without end outside strings and arrays; it never allocates beyond
// its stack.
#include "compute/chat/json_constraint.h"

#include <limits>
#include <utility>

#include "compute/chat/json_grammar_node.h"
#include "proto/error.h"

namespace sluice::chat {
namespace {

using Node = JsonGrammar::Node;
using Kind = Node::Kind;
using Stack = std::vector<JsonFrame>;

constexpr size_t kMaxDepth = 64;          // nesting of containers
constexpr uint32_t kMaxNumberBytes = 40;  // longer numbers are refused
constexpr uint32_t kAdditionalProperty = kUnbounded;
constexpr uint8_t kMaxIndent = 20;

// Phases. The document frame (node null) sits at the bottom of every stack.
enum : uint8_t { kDocBefore, kDocAfter };
enum : uint8_t { kObjOpen, kObjFirst, kObjKey, kObjColon, kObjValue, kObjAfter, kObjNext };
enum : uint8_t { kArrOpen, kArrFirst, kArrAfter, kArrNext };
enum : uint8_t { kStrOpen, kStrBody };
enum : uint8_t {
  kNumStart,
  kNumMinus,
  kNumZero,
  kNumInt,
  kNumDot,
  kNumFrac,
  kNumExp,
  kNumExpSign,
  kNumExpDigits
};

// 1 taken, 0 not whitespace, -1 whitespace beyond the allowed run.
int whitespace(JsonFrame& f, uint8_t b) {
  if (b != ' ' && b != '\t' && b != '\n' && b != '\r') return 0;
  if (f.whitespace == 0 && b == ' ') {
    f.whitespace = 1;
    return 1;
  }
  if (f.whitespace == 0 && b == '\n') {
    f.whitespace = 2;
    return 1;
  }
  if (f.whitespace >= 2 && (b == ' ' || b == '\t') && f.whitespace < 2 + kMaxIndent) {
    ++f.whitespace;
    return 1;
  }
  return -1;
}

enum class StringByte { kNewChar, kMore, kClose, kRefuse };

// One byte inside a string: UTF-8 checked (no overlong forms, no surrogates),
// escapes checked, control bytes refused.
StringByte string_byte(JsonFrame& f, uint8_t b) {
  if (f.utf8_left > 0) {
    if (b < f.utf8_low || b > f.utf8_high) return StringByte::kRefuse;
    --f.utf8_left;
    f.utf8_low = 0x80;
    f.utf8_high = 0xBF;
    return StringByte::kMore;
  }
  if (f.escape == 1) {
    if (b == 'u') {
      f.escape = 6;
    } else if (b == '"' || b == '\\' || b == '/' || b == 'b' || b == 'f' || b == 'n' || b == 'r' ||
               b == 't') {
      f.escape = 0;
    } else {
      return StringByte::kRefuse;
    }
    return StringByte::kMore;
  }
  if (f.escape >= 3) {
    if (!((b >= '0' && b <= '9') || (b >= 'a' && b <= 'f') || (b >= 'A' && b <= 'F'))) {
      return StringByte::kRefuse;
    }
    f.escape = f.escape == 3 ? 0 : f.escape - 1;
    return StringByte::kMore;
  }
  if (b == '"') return StringByte::kClose;
  if (b == '\\') {
    f.escape = 1;
    return StringByte::kNewChar;
  }
  if (b < 0x20) return StringByte::kRefuse;
  if (b < 0x80) return StringByte::kNewChar;
  if (b >= 0xC2 && b <= 0xDF) {
    f.utf8_left = 1;
  } else if (b >= 0xE0 && b <= 0xEF) {
    f.utf8_left = 2;
    if (b == 0xE0) f.utf8_low = 0xA0;
    if (b == 0xED) f.utf8_high = 0x9F;
  } else if (b >= 0xF0 && b <= 0xF4) {
    f.utf8_left = 3;
    if (b == 0xF0) f.utf8_low = 0x90;
    if (b == 0xF4) f.utf8_high = 0x8F;
  } else {
    return StringByte::kRefuse;
  }
  return StringByte::kNewChar;
}

// Whether an integer whose digits so far are `magnitude` (`digits` of them,
// sign `negative`) can still end inside [minimum, maximum].
bool integer_viable(const Node& n, bool negative, uint64_t magnitude, uint32_t digits,
                    bool can_end) {
  if (!n.minimum && !n.maximum) return true;
  const int64_t lo = n.minimum.value_or(std::numeric_limits<int64_t>::min());
  const int64_t hi = n.maximum.value_or(std::numeric_limits<int64_t>::max());
  auto meets = [&](long double a, long double b) {  // the magnitudes [a, b] with the sign
    const long double x = negative ? -b : a, y = negative ? -a : b;
    return y >= static_cast<long double>(lo) && x <= static_cast<long double>(hi);
  };
  if (can_end && digits > 0 && meets(magnitude, magnitude)) return true;
  if (digits > 0 && magnitude == 0) return false;  // a leading 0 takes no more digits
  long double scale = 1;
  for (int more = 1; more <= 19; ++more) {
    scale *= 10;
    const long double low = digits == 0 ? (more == 1 ? 0 : scale / 10) : magnitude * scale;
    const long double high = digits == 0 ? scale - 1 : magnitude * scale + scale - 1;
    if (meets(low, high)) return true;
  }
  return false;
}

bool number_accepting(const JsonFrame& f) {
  if (f.phase != kNumZero && f.phase != kNumInt && f.phase != kNumFrac &&
      f.phase != kNumExpDigits) {
    return false;
  }
  if (f.node->kind != Kind::kInteger) return true;
  const long double value = f.negative ? -static_cast<long double>(f.magnitude) : f.magnitude;
  return (!f.node->minimum || value >= *f.node->minimum) &&
         (!f.node->maximum || value <= *f.node->maximum);
}

bool literal_accepting(const JsonFrame& f) {
  for (size_t i = 0; i < f.node->literals.size(); ++i) {
    if ((f.candidates >> i & 1) && f.node->literals[i].size() == f.count) return true;
  }
  return false;
}

bool step(Stack& st, uint8_t b);

// The value of the frame on top of `st` is complete: pop it, move its parent on.
void value_done(Stack& st) {
  st.pop_back();
  JsonFrame& parent = st.back();
  parent.whitespace = 0;
  if (!parent.node) {
    parent.phase = kDocAfter;
  } else if (parent.node->kind == Kind::kObject) {
    if (parent.property != kAdditionalProperty) parent.seen |= uint64_t{1} << parent.property;
    parent.phase = kObjAfter;
  } else {
    ++parent.count;
    parent.phase = kArrAfter;
  }
}

// A value of `node` begins with `b`.
bool begin_value(Stack& st, const Node* node, uint8_t b) {
  while (node->kind == Kind::kChoice) {
    const Node* next = nullptr;
    for (const Node* a : node->alternatives) {
      if (a->first.test(b)) next = a;
    }
    if (!next) return false;
    node = next;
  }
  if (!node->first.test(b) || st.size() >= kMaxDepth) return false;
  JsonFrame f;
  f.node = node;
  if (node->kind == Kind::kLiteral)
    f.candidates =
        node->literals.size() == 64 ? ~uint64_t{0} : (uint64_t{1} << node->literals.size()) - 1;
  st.push_back(f);
  return step(st, b);
}

bool step_object(Stack& st, uint8_t b) {
  JsonFrame& f = st.back();
  const Node& n = *f.node;
  const bool open_keys = n.additional || (n.all_properties() & ~f.seen) != 0;
  const bool required_met = (n.required & ~f.seen) == 0;
  switch (f.phase) {
    case kObjOpen:
      f.phase = kObjFirst;
      return true;  // begin_value checked the '{'
    case kObjFirst:
    case kObjNext:
      if (int w = whitespace(f, b)) return w > 0;
      if (b == '}' && f.phase == kObjFirst && required_met) {
        value_done(st);
        return true;
      }
      if (b != '"' || !open_keys) return false;
      f.phase = kObjKey;
      f.count = 0;
      f.candidates = n.additional ? n.all_properties() : n.all_properties() & ~f.seen;
      return true;
    case kObjKey: {
      if (n.additional) {
        const StringByte kind = string_byte(f, b);
        if (kind == StringByte::kRefuse) return false;
        if (kind != StringByte::kClose) {
          uint64_t still = 0;
          for (size_t i = 0; i < n.properties.size(); ++i) {
            const std::string& key = n.properties[i].key;
            if ((f.candidates >> i & 1) && key.size() > f.count &&
                static_cast<uint8_t>(key[f.count]) == b) {
              still |= uint64_t{1} << i;
            }
          }
          f.candidates = still;
          ++f.count;
          return true;
        }
      }
      size_t exact = n.properties.size();
      uint64_t still = 0;
      for (size_t i = 0; i < n.properties.size(); ++i) {
        if (!(f.candidates >> i & 1)) continue;
        const std::string& key = n.properties[i].key;
        if (key.size() == f.count) exact = i;
        if (key.size() > f.count && static_cast<uint8_t>(key[f.count]) == b)
          still |= uint64_t{1} << i;
      }
      if (b == '"' && (n.additional || exact < n.properties.size())) {
        if (exact < n.properties.size() && (f.seen >> exact & 1)) return false;  // a repeated key
        f.property =
            exact < n.properties.size() ? static_cast<uint32_t>(exact) : kAdditionalProperty;
        f.phase = kObjColon;
        f.whitespace = 0;
        return true;
      }
      if (!still) return false;
      f.candidates = still;
      ++f.count;
      return true;
    }
    case kObjColon:
      if (int w = whitespace(f, b)) return w > 0;
      if (b != ':') return false;
      f.phase = kObjValue;
      f.whitespace = 0;
      return true;
    case kObjValue: {
      if (int w = whitespace(f, b)) return w > 0;
      const Node* value =
          f.property == kAdditionalProperty ? n.additional : n.properties[f.property].value;
      return begin_value(st, value, b);
    }
    case kObjAfter:
      if (int w = whitespace(f, b)) return w > 0;
      if (b == '}' && required_met) {
        value_done(st);
        return true;
      }
      if (b != ',' || !open_keys) return false;
      f.phase = kObjNext;
      f.whitespace = 0;
      return true;
  }
  return false;
}

bool step_array(Stack& st, uint8_t b) {
  JsonFrame& f = st.back();
  const Node& n = *f.node;
  const bool more = f.count < n.max_items && n.item(f.count) != nullptr;
  switch (f.phase) {
    case kArrOpen:
      f.phase = kArrFirst;
      return true;
    case kArrFirst:
    case kArrNext:
      if (int w = whitespace(f, b)) return w > 0;
      if (b == ']' && f.phase == kArrFirst && n.min_items == 0) {
        value_done(st);
        return true;
      }
      if (!more) return false;
      return begin_value(st, n.item(f.count), b);
    case kArrAfter:
      if (int w = whitespace(f, b)) return w > 0;
      if (b == ']' && f.count >= n.min_items) {
        value_done(st);
        return true;
      }
      if (b != ',' || !more) return false;
      f.phase = kArrNext;
      f.whitespace = 0;
      return true;
  }
  return false;
}

bool step_string(Stack& st, uint8_t b) {
  JsonFrame& f = st.back();
  if (f.phase == kStrOpen) {
    f.phase = kStrBody;
    return true;
  }
  switch (string_byte(f, b)) {
    case StringByte::kRefuse:
      return false;
    case StringByte::kMore:
      return true;
    case StringByte::kNewChar:
      return f.count++ < f.node->max_length;
    case StringByte::kClose:
      if (f.count < f.node->min_length) return false;
      value_done(st);
      return true;
  }
  return false;
}

// A byte that cannot continue the number (or literal) on top ends it, when
// it may end there, and goes to the parent.
bool end_then_step(Stack& st, uint8_t b, bool accepting) {
  if (!accepting) return false;
  value_done(st);
  return step(st, b);
}

bool step_number(Stack& st, uint8_t b) {
  JsonFrame& f = st.back();
  const bool integer = f.node->kind == Kind::kInteger;
  const bool digit = b >= '0' && b <= '9';
  if (f.count >= kMaxNumberBytes &&
      (digit || b == '.' || b == 'e' || b == 'E' || b == '-' || b == '+'))
    return false;
  auto take_digit = [&](uint8_t next_phase) {
    const uint64_t m =
        f.magnitude > (UINT64_MAX - 9) / 10 ? UINT64_MAX : f.magnitude * 10 + (b - '0');
    if (integer && !integer_viable(*f.node, f.negative, m, f.count + 1, true)) return false;
    if (f.phase != kNumFrac && f.phase != kNumExpDigits && f.phase != kNumDot &&
        f.phase != kNumExp && f.phase != kNumExpSign) {
      f.magnitude = m;
    }
    f.phase = next_phase;
    ++f.count;
    return true;
  };
  switch (f.phase) {
    case kNumStart:
      if (b == '-') {
        if (integer && !integer_viable(*f.node, true, 0, 0, false)) return false;
        f.negative = true;
        f.phase = kNumMinus;
        return true;
      }
      [[fallthrough]];
    case kNumMinus:
      if (!digit) return false;
      return take_digit(b == '0' ? kNumZero : kNumInt);
    case kNumZero:
    case kNumInt:
      if (digit && f.phase == kNumInt) return take_digit(kNumInt);
      if (!integer && b == '.') return f.phase = kNumDot, true;
      if (!integer && (b == 'e' || b == 'E')) return f.phase = kNumExp, true;
      if (digit) return false;
      return end_then_step(st, b, number_accepting(f));
    case kNumDot:
      return digit && take_digit(kNumFrac);
    case kNumFrac:
      if (digit) return take_digit(kNumFrac);
      if (b == 'e' || b == 'E') return f.phase = kNumExp, true;
      return end_then_step(st, b, true);
    case kNumExp:
      if (b == '+' || b == '-') return f.phase = kNumExpSign, true;
      [[fallthrough]];
    case kNumExpSign:
      return digit && take_digit(kNumExpDigits);
    case kNumExpDigits:
      if (digit) return take_digit(kNumExpDigits);
      return end_then_step(st, b, true);
  }
  return false;
}

bool step_literal(Stack& st, uint8_t b) {
  JsonFrame& f = st.back();
  const auto& literals = f.node->literals;
  uint64_t still = 0;
  bool longer = false;  // a candidate goes on past this byte
  for (size_t i = 0; i < literals.size(); ++i) {
    if ((f.candidates >> i & 1) && literals[i].size() > f.count &&
        static_cast<uint8_t>(literals[i][f.count]) == b) {
      still |= uint64_t{1} << i;
      longer = longer || literals[i].size() > f.count + 1;
    }
  }
  if (!still) return end_then_step(st, b, literal_accepting(f));
  f.candidates = still;
  ++f.count;
  if (!longer) value_done(st);  // nothing can follow inside the literal
  return true;
}

bool step(Stack& st, uint8_t b) {
  JsonFrame& f = st.back();
  if (!f.node) return false;  // the document frame: after its value nothing more
  switch (f.node->kind) {
    case Kind::kObject:
      return step_object(st, b);
    case Kind::kArray:
      return step_array(st, b);
    case Kind::kString:
      return step_string(st, b);
    case Kind::kNumber:
    case Kind::kInteger:
      return step_number(st, b);
    case Kind::kLiteral:
      return step_literal(st, b);
    case Kind::kChoice:
      break;
  }
  return false;
}

}  // namespace

// The first byte goes to begin_value from the document frame; the rest to step.
bool feed_byte(const Node& root, Stack& st, uint8_t b) {
  if (st.size() == 1) {
    return st[0].phase == kDocBefore && begin_value(st, &root, b);
  }
  return step(st, b);
}

bool string_closable(const Stack& st) {
  if (st.size() != 2) return false;
  const JsonFrame& top = st.back();
  return top.node->kind == Kind::kString && top.phase == kStrBody && top.escape == 0 &&
         top.utf8_left == 0 && top.count >= top.node->min_length;
}

bool stack_complete(const Stack& st) {
  if (st.size() == 1) return st[0].phase == kDocAfter;
  if (st.size() != 2) return false;
  const JsonFrame& top = st.back();
  if (top.node->kind == Kind::kNumber || top.node->kind == Kind::kInteger)
    return number_accepting(top);
  return top.node->kind == Kind::kLiteral && literal_accepting(top);
}

JsonRecognizer::JsonRecognizer(std::shared_ptr<const JsonGrammar> grammar)
    : grammar_(std::move(grammar)), stack_(1) {
  if (!grammar_) fail("json recogniser: no grammar");
}

bool JsonRecognizer::feed(uint8_t byte) {
  return feed(std::string_view(reinterpret_cast<const char*>(&byte), 1));
}

bool JsonRecognizer::feed(std::string_view bytes) {
  Stack next = stack_;
  for (char c : bytes) {
    if (!feed_byte(grammar_->root(), next, static_cast<uint8_t>(c))) return false;
  }
  stack_ = std::move(next);
  return true;
}

bool JsonRecognizer::complete() const {
  return stack_complete(stack_);
}

bool matches(const std::shared_ptr<const JsonGrammar>& grammar, std::string_view text) {
  JsonRecognizer r(grammar);
  return r.feed(text) && r.complete();
}

}  // namespace sluice::chat
