// compute/chat/value.cpp: Python semantics of template values — truth, str()
// and repr(), equality and ordering, json.dumps — with provenance carried
// byte for byte from every input string to every output string.
#include "compute/chat/value.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>

#include "compute/chat/pystr.h"

namespace sluice::chat {
namespace {

// Values nest (lists in dicts in lists); every recursive walk over one is
// bounded so a deeply nested message or template value cannot exhaust the
// stack. One render runs on one thread, so the counter is per thread.
constexpr int kMaxValueDepth = 500;
thread_local int value_depth = 0;

struct DepthGuard {
  DepthGuard() {
    if (++value_depth > kMaxValueDepth) {
      --value_depth;
      throw EvalError(fmt::format("value nested deeper than {} levels", kMaxValueDepth));
    }
  }
  ~DepthGuard() { --value_depth; }
  DepthGuard(const DepthGuard&) = delete;
  DepthGuard& operator=(const DepthGuard&) = delete;
};

}  // namespace

Text::Text(std::string s, bool tainted) : bytes_(std::move(s)) {
  if (tainted && !bytes_.empty()) taint_.assign(bytes_.size(), true);
}

void Text::append(const Text& other) {
  if (other.taint_.empty()) {
    append(other.bytes_, false);
    return;
  }
  if (taint_.empty()) taint_.assign(bytes_.size(), false);
  bytes_ += other.bytes_;
  taint_.insert(taint_.end(), other.taint_.begin(), other.taint_.end());
}

void Text::append(std::string_view s, bool tainted) {
  if (s.empty()) return;
  const bool track = tainted || !taint_.empty();
  if (track && taint_.size() != bytes_.size()) taint_.assign(bytes_.size(), false);
  bytes_ += s;
  if (track) taint_.insert(taint_.end(), s.size(), tainted);
}

Text Text::substr(size_t pos, size_t count) const {
  Text out;
  if (pos >= bytes_.size()) return out;
  count = std::min(count, bytes_.size() - pos);
  out.bytes_ = bytes_.substr(pos, count);
  if (!taint_.empty()) {
    auto first = taint_.begin() + static_cast<ptrdiff_t>(pos);
    if (std::find(first, first + static_cast<ptrdiff_t>(count), true) !=
        first + static_cast<ptrdiff_t>(count)) {
      out.taint_.assign(first, first + static_cast<ptrdiff_t>(count));
    }
  }
  return out;
}

Value Value::list(List items) {
  return Value(std::make_shared<List>(std::move(items)));
}

Value Value::function(std::string name, std::function<Value(CallArgs&, Renderer&)> fn) {
  return Value(std::make_shared<Callable>(Callable{std::move(name), std::move(fn)}));
}

void check_built_size(size_t size, const char* what) {
  if (size > kMaxBuiltSize)
    throw EvalError(fmt::format("{}: result larger than {} bytes", what, kMaxBuiltSize));
}

int64_t Value::as_int() const {
  if (kind() == Kind::kBool) return as_bool() ? 1 : 0;
  return std::get<int64_t>(v_);
}

double Value::as_float() const {
  if (kind() == Kind::kFloat) return std::get<double>(v_);
  return static_cast<double>(as_int());
}

const Value* Dict::find(std::string_view key) const {
  for (const auto& [k, v] : entries) {
    if (k.str() == key) return &v;
  }
  return nullptr;
}

void Dict::set(const Text& key, Value value) {
  for (auto& [k, v] : entries) {
    if (k.str() == key.str()) {
      v = std::move(value);
      return;
    }
  }
  entries.emplace_back(key, std::move(value));
}

Value Dict::make(bool is_namespace) {
  auto d = std::make_shared<Dict>();
  d->is_namespace = is_namespace;
  return Value(std::move(d));
}

std::optional<Value> CallArgs::take(size_t index, std::string_view name) {
  if (index < positional.size()) {
    consumed_positional = std::max(consumed_positional, index + 1);
    return positional[index];
  }
  for (auto it = keyword.begin(); it != keyword.end(); ++it) {
    if (it->first == name) {
      Value v = std::move(it->second);
      keyword.erase(it);
      return v;
    }
  }
  return std::nullopt;
}

void CallArgs::expect_consumed(std::string_view function) const {
  if (positional.size() > consumed_positional) {
    throw EvalError(fmt::format("{}() takes at most {} positional argument(s) ({} given)", function,
                                consumed_positional, positional.size()));
  }
  if (!keyword.empty()) {
    throw EvalError(fmt::format("{}() got an unexpected keyword argument '{}'", function,
                                keyword.front().first));
  }
}

std::string type_name(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return "Undefined";
    case Value::Kind::kNone:
      return "NoneType";
    case Value::Kind::kBool:
      return "bool";
    case Value::Kind::kInt:
      return "int";
    case Value::Kind::kFloat:
      return "float";
    case Value::Kind::kString:
      return "str";
    case Value::Kind::kList:
      return "list";
    case Value::Kind::kDict:
      return v.dict().is_namespace ? "Namespace" : "dict";
    case Value::Kind::kCallable:
      return "function";
  }
  return "object";
}

bool truthy(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return false;
    case Value::Kind::kBool:
      return v.as_bool();
    case Value::Kind::kInt:
      return v.as_int() != 0;
    case Value::Kind::kFloat:
      return v.as_float() != 0.0;
    case Value::Kind::kString:
      return !v.str().empty();
    case Value::Kind::kList:
      return !v.items().empty();
    case Value::Kind::kDict:
      return v.dict().is_namespace || !v.dict().entries.empty();
    case Value::Kind::kCallable:
      return true;
  }
  return false;
}

// Python's repr(float): the shortest digits that read back to the same
// double, positional between 1e-4 and 1e16, otherwise with an exponent.
std::string python_float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  std::string sign;
  if (sci[0] == '-') {
    sign = "-";
    sci.erase(0, 1);
  }
  const size_t e = sci.find('e');
  std::string digits = sci.substr(0, e);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  const int exponent = std::stoi(sci.substr(e + 1));
  const int point = exponent + 1;  // digits before the decimal point
  const int n = static_cast<int>(digits.size());
  if (point > -4 && point <= 16) {
    if (point <= 0) return sign + "0." + std::string(static_cast<size_t>(-point), '0') + digits;
    if (point >= n) return sign + digits + std::string(static_cast<size_t>(point - n), '0') + ".0";
    return sign + digits.substr(0, static_cast<size_t>(point)) + "." +
           digits.substr(static_cast<size_t>(point));
  }
  std::string mantissa = digits.substr(0, 1);
  if (n > 1) mantissa += "." + digits.substr(1);
  return fmt::format("{}{}e{}{:02d}", sign, mantissa, exponent < 0 ? '-' : '+', std::abs(exponent));
}

namespace {

// Python's repr(str): single quotes unless the text has ' and no ".
void repr_string(const Text& s, Text& out) {
  const std::string& b = s.str();
  const bool double_quotes = b.find('\'') != std::string::npos && b.find('"') == std::string::npos;
  const char quote = double_quotes ? '"' : '\'';
  out.append_markup(std::string_view(&quote, 1));
  size_t i = 0;
  while (i < b.size()) {
    const size_t len = utf8_length_at(b, i);
    const char32_t c = decode_at(b, i);
    const bool tainted = s.tainted_at(i);
    std::string piece;
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      piece = std::string("\\") + static_cast<char>(c);
    } else if (c == '\n') {
      piece = "\\n";
    } else if (c == '\r') {
      piece = "\\r";
    } else if (c == '\t') {
      piece = "\\t";
    } else if (!is_printable(c)) {
      piece = c < 0x100     ? fmt::format("\\x{:02x}", static_cast<uint32_t>(c))
              : c < 0x10000 ? fmt::format("\\u{:04x}", static_cast<uint32_t>(c))
                            : fmt::format("\\U{:08x}", static_cast<uint32_t>(c));
    } else {
      piece = b.substr(i, len);
    }
    out.append(piece, tainted);
    i += len;
  }
  out.append_markup(std::string_view(&quote, 1));
}

void repr_into(const Value& v, Text& out) {
  const DepthGuard guard;
  switch (v.kind()) {
    case Value::Kind::kString:
      repr_string(v.text(), out);
      return;
    case Value::Kind::kList: {
      out.append_markup("[");
      bool first = true;
      for (const Value& item : v.items()) {
        if (!first) out.append_markup(", ");
        first = false;
        repr_into(item, out);
      }
      out.append_markup("]");
      return;
    }
    case Value::Kind::kDict: {
      if (v.dict().is_namespace) out.append_markup("<Namespace ");
      out.append_markup("{");
      bool first = true;
      for (const auto& [k, item] : v.dict().entries) {
        if (!first) out.append_markup(", ");
        first = false;
        repr_string(k, out);
        out.append_markup(": ");
        repr_into(item, out);
      }
      out.append_markup("}");
      if (v.dict().is_namespace) out.append_markup(">");
      return;
    }
    default:
      out.append(to_text(v));
      return;
  }
}

}  // namespace

Text to_text(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return {};
    case Value::Kind::kNone:
      return Text::markup("None");
    case Value::Kind::kBool:
      return Text::markup(v.as_bool() ? "True" : "False");
    case Value::Kind::kInt:
      return Text::markup(std::to_string(v.as_int()));
    case Value::Kind::kFloat:
      return Text::markup(python_float_repr(v.as_float()));
    case Value::Kind::kString:
      return v.text();
    case Value::Kind::kCallable:
      return Text::markup("<function " + v.callable().name + ">");
    default:
      return repr(v);
  }
}

Text repr(const Value& v) {
  Text out;
  repr_into(v, out);
  return out;
}

bool equals(const Value& a, const Value& b) {
  const DepthGuard guard;
  using K = Value::Kind;
  if (a.is_number() && b.is_number()) {
    if (a.kind() == K::kFloat || b.kind() == K::kFloat) return a.as_float() == b.as_float();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case K::kUndefined:
    case K::kNone:
      return true;
    case K::kString:
      return a.str() == b.str();
    case K::kList: {
      const List& x = a.items();
      const List& y = b.items();
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i) {
        if (!equals(x[i], y[i])) return false;
      }
      return true;
    }
    case K::kDict: {
      const Dict& x = a.dict();
      const Dict& y = b.dict();
      if (x.is_namespace || y.is_namespace) return &x == &y;
      if (x.entries.size() != y.entries.size()) return false;
      for (const auto& [k, v] : x.entries) {
        const Value* other = y.find(k.str());
        if (!other || !equals(v, *other)) return false;
      }
      return true;
    }
    case K::kCallable:
      return &a.callable() == &b.callable();
    default:
      return false;
  }
}

bool less_than(const Value& a, const Value& b) {
  const DepthGuard guard;
  using K = Value::Kind;
  if (a.is_number() && b.is_number()) {
    if (a.kind() == K::kFloat || b.kind() == K::kFloat) return a.as_float() < b.as_float();
    return a.as_int() < b.as_int();
  }
  if (a.is_string() && b.is_string()) return a.str() < b.str();  // UTF-8 order is code point order
  if (a.is_list() && b.is_list()) {
    const List& x = a.items();
    const List& y = b.items();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (!equals(x[i], y[i])) return less_than(x[i], y[i]);
    }
    return x.size() < y.size();
  }
  throw EvalError(fmt::format("'<' not supported between instances of '{}' and '{}'", type_name(a),
                              type_name(b)));
}

namespace {

void json_string(const Text& s, const JsonStyle& style, Text& out) {
  out.append_markup("\"");
  const std::string& b = s.str();
  size_t i = 0;
  while (i < b.size()) {
    const size_t len = utf8_length_at(b, i);
    const char32_t c = decode_at(b, i);
    const bool tainted = s.tainted_at(i);
    std::string piece;
    switch (c) {
      case '"':
        piece = "\\\"";
        break;
      case '\\':
        piece = "\\\\";
        break;
      case '\n':
        piece = "\\n";
        break;
      case '\r':
        piece = "\\r";
        break;
      case '\t':
        piece = "\\t";
        break;
      case '\b':
        piece = "\\b";
        break;
      case '\f':
        piece = "\\f";
        break;
      default:
        if (c < 0x20) {
          piece = fmt::format("\\u{:04x}", static_cast<uint32_t>(c));
        } else if (style.ensure_ascii && c > 0x7e) {
          if (c >= 0x10000) {
            const uint32_t v = static_cast<uint32_t>(c) - 0x10000;
            piece = fmt::format("\\u{:04x}\\u{:04x}", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
          } else {
            piece = fmt::format("\\u{:04x}", static_cast<uint32_t>(c));
          }
        } else {
          piece = b.substr(i, len);
        }
    }
    out.append(piece, tainted);
    i += len;
  }
  out.append_markup("\"");
}

void json_into(const Value& v, const JsonStyle& style, int depth, Text& out) {
  if (depth > 200) throw EvalError("tojson: value nested too deeply");
  const bool pretty = style.indent.has_value();
  auto newline = [&](int level) {
    out.append_markup("\n");
    for (int i = 0; i < level; ++i) out.append_markup(*style.indent);
  };
  switch (v.kind()) {
    case Value::Kind::kNone:
      out.append_markup("null");
      return;
    case Value::Kind::kBool:
      out.append_markup(v.as_bool() ? "true" : "false");
      return;
    case Value::Kind::kInt:
      out.append_markup(std::to_string(v.as_int()));
      return;
    case Value::Kind::kFloat: {
      const double d = v.as_float();
      out.append_markup(std::isnan(d)   ? "NaN"
                        : std::isinf(d) ? (d < 0 ? "-Infinity" : "Infinity")
                                        : python_float_repr(d));
      return;
    }
    case Value::Kind::kString:
      json_string(v.text(), style, out);
      return;
    case Value::Kind::kList: {
      const List& items = v.items();
      if (items.empty()) {
        out.append_markup("[]");
        return;
      }
      out.append_markup("[");
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out.append_markup(style.item_separator);
        if (pretty) newline(depth + 1);
        json_into(items[i], style, depth + 1, out);
      }
      if (pretty) newline(depth);
      out.append_markup("]");
      return;
    }
    case Value::Kind::kDict: {
      std::vector<const std::pair<Text, Value>*> entries;
      for (const auto& e : v.dict().entries) entries.push_back(&e);
      if (style.sort_keys) {
        std::stable_sort(entries.begin(), entries.end(), [](const auto* x, const auto* y) {
          return x->first.str() < y->first.str();
        });
      }
      if (entries.empty()) {
        out.append_markup("{}");
        return;
      }
      out.append_markup("{");
      for (size_t i = 0; i < entries.size(); ++i) {
        if (i) out.append_markup(style.item_separator);
        if (pretty) newline(depth + 1);
        json_string(entries[i]->first, style, out);
        out.append_markup(style.key_separator);
        json_into(entries[i]->second, style, depth + 1, out);
      }
      if (pretty) newline(depth);
      out.append_markup("}");
      return;
    }
    default:
      throw EvalError(fmt::format("Object of type {} is not JSON serializable", type_name(v)));
  }
}

}  // namespace

Text to_json(const Value& v, const JsonStyle& style) {
  Text out;
  json_into(v, style, 0, out);
  return out;
}

Value from_json(const nlohmann::ordered_json& j, bool tainted) {
  const DepthGuard guard;
  using J = nlohmann::ordered_json::value_t;
  switch (j.type()) {
    case J::null:
      return Value::none();
    case J::boolean:
      return Value(j.get<bool>());
    case J::number_integer:
      return Value(j.get<int64_t>());
    case J::number_unsigned: {
      const uint64_t u = j.get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) return Value(static_cast<double>(u));
      return Value(static_cast<int64_t>(u));
    }
    case J::number_float:
      return Value(j.get<double>());
    case J::string:
      return Value(tainted ? Text::content(j.get_ref<const std::string&>())
                           : Text::markup(j.get_ref<const std::string&>()));
    case J::array: {
      List items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(from_json(e, tainted));
      return Value::list(std::move(items));
    }
    case J::object: {
      Value d = Dict::make();
      for (const auto& [k, e] : j.items())
        d.dict().set(tainted ? Text::content(k) : Text::markup(k), from_json(e, tainted));
      return d;
    }
    default:
      return Value::none();
  }
}

}  // namespace sluice::chat
