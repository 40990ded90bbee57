// compute/chat/value.h: the values a chat template computes with, modelled on
// the Python objects jinja2 sees (None, bool, int, float, str, list, dict,
// callables) and printed the way Python prints them. Every string carries
// per-byte provenance; no operation here may drop or invent taint.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace sluice::chat {

// A failure while evaluating; the renderer adds the template name and line.
// `raised` marks the template's own raise_exception message.
struct EvalError : std::runtime_error {
  explicit EvalError(const std::string& message, bool raised = false)
      : std::runtime_error(message), raised(raised) {}
  bool raised;
};

// UTF-8 bytes with one provenance bit per byte: set when the byte came from
// the messages or tools (content), clear when the template wrote it (markup).
class Text {
 public:
  Text() = default;
  static Text markup(std::string_view s) { return Text(std::string(s), false); }
  static Text content(std::string_view s) { return Text(std::string(s), true); }

  const std::string& str() const { return bytes_; }
  size_t size() const { return bytes_.size(); }
  bool empty() const { return bytes_.empty(); }
  bool tainted_at(size_t i) const { return !taint_.empty() && taint_[i]; }

  void append(const Text& other);
  void append(std::string_view s, bool tainted);
  void append_markup(std::string_view s) { append(s, false); }
  Text substr(size_t pos, size_t count = std::string::npos) const;

 private:
  Text(std::string s, bool tainted);
  std::string bytes_;
  std::vector<bool> taint_;  // empty when no byte is tainted, else one per byte
};

class Value;
using List = std::vector<Value>;
struct Dict;
struct CallArgs;
class Renderer;

// A function a template can call: a builtin, a bound method or a macro.
struct Callable {
  std::string name;
  std::function<Value(CallArgs&, Renderer&)> call;
};

// jinja2's default Undefined: prints empty, iterates empty, is falsy, and
// fails on anything else; `hint` says what was missing.
struct Undefined {
  std::string hint;
};

class Value {
 public:
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kCallable };

  Value() : v_(Undefined{}) {}
  static Value undefined(std::string hint) { return Value(Undefined{std::move(hint)}); }
  static Value none() { return Value(Storage(nullptr)); }
  Value(bool b) : v_(b) {}
  Value(int64_t i) : v_(i) {}
  Value(int i) : v_(int64_t{i}) {}
  Value(double d) : v_(d) {}
  Value(Text t) : v_(std::move(t)) {}
  static Value markup(std::string_view s) { return Value(Text::markup(s)); }
  Value(std::shared_ptr<List> l) : v_(std::move(l)) {}
  Value(std::shared_ptr<Dict> d) : v_(std::move(d)) {}
  Value(std::shared_ptr<Callable> c) : v_(std::move(c)) {}
  static Value list(List items = {});
  static Value function(std::string name, std::function<Value(CallArgs&, Renderer&)> fn);

  Kind kind() const { return static_cast<Kind>(v_.index()); }
  bool is_undefined() const { return kind() == Kind::kUndefined; }
  bool is_none() const { return kind() == Kind::kNone; }
  bool is_string() const { return kind() == Kind::kString; }
  bool is_number() const {
    return kind() == Kind::kInt || kind() == Kind::kFloat || kind() == Kind::kBool;
  }
  bool is_list() const { return kind() == Kind::kList; }
  bool is_dict() const { return kind() == Kind::kDict; }
  bool is_callable() const { return kind() == Kind::kCallable; }

  bool as_bool() const { return std::get<bool>(v_); }
  int64_t as_int() const;   // bool or int
  double as_float() const;  // bool, int or float
  const Text& text() const { return std::get<Text>(v_); }
  const std::string& str() const { return text().str(); }
  List& items() const { return *std::get<std::shared_ptr<List>>(v_); }
  Dict& dict() const { return *std::get<std::shared_ptr<Dict>>(v_); }
  const Callable& callable() const { return *std::get<std::shared_ptr<Callable>>(v_); }
  const std::string& undefined_hint() const { return std::get<Undefined>(v_).hint; }

 private:
  using Storage =
      std::variant<Undefined, std::nullptr_t, bool, int64_t, double, Text, std::shared_ptr<List>,
                   std::shared_ptr<Dict>, std::shared_ptr<Callable>>;
  explicit Value(Storage v) : v_(std::move(v)) {}
  Storage v_;
};

// Insertion-ordered, string-keyed (keys keep their provenance). A namespace()
// object is a Dict whose attributes `set ns.x = ...` may assign.
struct Dict {
  std::vector<std::pair<Text, Value>> entries;
  bool is_namespace = false;

  const Value* find(std::string_view key) const;
  void set(const Text& key, Value value);
  static Value make(bool is_namespace = false);
};

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;

  // The argument at `index` or named `name`, or nullopt; consumes it.
  std::optional<Value> take(size_t index, std::string_view name);
  // Fails naming `function` when an argument was left unconsumed.
  void expect_consumed(std::string_view function) const;
  size_t consumed_positional = 0;
};

// Python's type name, for error messages ("NoneType", "str", ...).
std::string type_name(const Value& v);
bool truthy(const Value& v);
// str(v) and repr(v), keeping the provenance of every string inside.
Text to_text(const Value& v);
Text repr(const Value& v);
std::string python_float_repr(double d);
// Python ==, and <, <=, >, >= (throws EvalError for unorderable types).
bool equals(const Value& a, const Value& b);
bool less_than(const Value& a, const Value& b);

// No string or list a template builds may exceed this many bytes or items.
inline constexpr size_t kMaxBuiltSize = size_t{1} << 26;
// Throws EvalError naming `what` when `size` is above kMaxBuiltSize.
void check_built_size(size_t size, const char* what);

// Python's + - * / // % ** on values (strings and lists concatenate and
// repeat), and the comparisons == != < <= > >= in, "not in".
Value binary_operator(const std::string& op, const Value& a, const Value& b);
bool compare_values(const std::string& op, const Value& a, const Value& b);

struct JsonStyle {
  std::optional<std::string> indent;  // json.dumps indent, already as a string
  std::string item_separator = ", ";
  std::string key_separator = ": ";
  bool sort_keys = false;
  bool ensure_ascii = false;
};
// json.dumps(v, ...) as Hugging Face's tojson calls it (no HTML escaping).
Text to_json(const Value& v, const JsonStyle& style);

// A JSON document as template values; every string in it (keys too) gets
// provenance `tainted`.
Value from_json(const nlohmann::ordered_json& j, bool tainted);

}  // namespace sluice::chat
