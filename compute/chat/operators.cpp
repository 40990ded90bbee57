// compute/chat/operators.cpp: Python's binary operators, `in` and the
// comparisons on template values, with Python's errors for mixed types and
// jinja2's UndefinedError for undefined operands. Never mutates an operand.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "compute/chat/value.h"

namespace sluice::chat {
namespace {

[[noreturn]] void undefined_error(const Value& v) {
  throw EvalError(v.undefined_hint().empty() ? "value is undefined" : v.undefined_hint());
}

[[noreturn]] void type_error(const std::string& op, const Value& a, const Value& b) {
  throw EvalError(fmt::format("unsupported operand type(s) for {}: '{}' and '{}'", op, type_name(a),
                              type_name(b)));
}

int64_t floor_div(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

bool contains(const Value& container, const Value& needle) {
  switch (container.kind()) {
    case Value::Kind::kUndefined:
      return false;
    case Value::Kind::kString:
      if (!needle.is_string()) {
        throw EvalError(fmt::format("'in <string>' requires string as left operand, not {}",
                                    type_name(needle)));
      }
      return container.str().find(needle.str()) != std::string::npos;
    case Value::Kind::kList:
      for (const Value& item : container.items()) {
        if (equals(item, needle)) return true;
      }
      return false;
    case Value::Kind::kDict:
      return needle.is_string() && container.dict().find(needle.str()) != nullptr;
    default:
      throw EvalError(fmt::format("argument of type '{}' is not iterable", type_name(container)));
  }
}

}  // namespace

Value binary_operator(const std::string& op, const Value& a, const Value& b) {
  if (a.is_undefined()) undefined_error(a);
  if (b.is_undefined()) undefined_error(b);
  using K = Value::Kind;
  if (op == "+") {
    if (a.is_string() && b.is_string()) {
      check_built_size(a.str().size() + b.str().size(), "+");
      Text t = a.text();
      t.append(b.text());
      return Value(std::move(t));
    }
    if (a.is_list() && b.is_list()) {
      check_built_size(a.items().size() + b.items().size(), "+");
      List items = a.items();
      items.insert(items.end(), b.items().begin(), b.items().end());
      return Value::list(std::move(items));
    }
    if (a.is_string() || b.is_string()) {
      if (a.is_string())
        throw EvalError(fmt::format("can only concatenate str (not \"{}\") to str", type_name(b)));
    }
  }
  if (op == "*") {
    const Value* seq = a.is_string() || a.is_list()   ? &a
                       : b.is_string() || b.is_list() ? &b
                                                      : nullptr;
    const Value* count = seq == &a ? &b : &a;
    if (seq && (count->kind() == K::kInt || count->kind() == K::kBool)) {
      const int64_t n = count->as_int();
      const size_t unit =
          std::max<size_t>(1, seq->is_string() ? seq->str().size() : seq->items().size());
      if (n > 0 && static_cast<uint64_t>(n) > kMaxBuiltSize / unit) {
        throw EvalError("repetition result too large");
      }
      if (seq->is_string()) {
        Text t;
        for (int64_t i = 0; i < n; ++i) t.append(seq->text());
        return Value(std::move(t));
      }
      List items;
      for (int64_t i = 0; i < n; ++i)
        items.insert(items.end(), seq->items().begin(), seq->items().end());
      return Value::list(std::move(items));
    }
  }
  if (!a.is_number() || !b.is_number()) type_error(op, a, b);
  const bool floats = a.kind() == K::kFloat || b.kind() == K::kFloat;
  if (op == "/") {
    if (b.as_float() == 0.0) throw EvalError("division by zero");
    return Value(a.as_float() / b.as_float());
  }
  if (floats) {
    const double x = a.as_float(), y = b.as_float();
    if (op == "+") return Value(x + y);
    if (op == "-") return Value(x - y);
    if (op == "*") return Value(x * y);
    if (op == "**") return Value(std::pow(x, y));
    if (y == 0.0) throw EvalError("float division by zero");
    if (op == "//") return Value(std::floor(x / y));
    if (op == "%") {
      double m = std::fmod(x, y);
      if (m != 0.0 && ((m < 0) != (y < 0))) m += y;
      return Value(m);
    }
  } else {
    const int64_t x = a.as_int(), y = b.as_int();
    if (op == "+") return Value(x + y);
    if (op == "-") return Value(x - y);
    if (op == "*") return Value(x * y);
    if (op == "**") {
      if (y < 0) return Value(std::pow(static_cast<double>(x), static_cast<double>(y)));
      int64_t r = 1;
      for (int64_t i = 0; i < y && i < 64; ++i) r *= x;
      return Value(r);
    }
    if (y == 0) throw EvalError("integer division or modulo by zero");
    if (op == "//") return Value(floor_div(x, y));
    if (op == "%") return Value(x - floor_div(x, y) * y);
  }
  type_error(op, a, b);
}

bool compare_values(const std::string& op, const Value& a, const Value& b) {
  if (op == "==") return equals(a, b);
  if (op == "!=") return !equals(a, b);
  if (op == "in") return contains(b, a);
  if (op == "not in") return !contains(b, a);
  if (a.is_undefined()) undefined_error(a);
  if (b.is_undefined()) undefined_error(b);
  if (op == "<") return less_than(a, b);
  if (op == ">") return less_than(b, a);
  if (op == "<=") return less_than(a, b) || equals(a, b);
  return less_than(b, a) || equals(a, b);
}

}  // namespace sluice::chat
