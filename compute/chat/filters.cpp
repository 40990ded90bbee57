// compute/chat/filters.cpp: jinja2's builtin filters and tests as chat
// templates use them, with Hugging Face's tojson (json.dumps, no HTML
// escaping). A filter never mutates its input; results keep provenance.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "compute/chat/pystr.h"
#include "compute/chat/renderer.h"

namespace sluice::chat {
namespace {

size_t length_of(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return 0;
    case Value::Kind::kString:
      return code_point_count(v.str());
    case Value::Kind::kList:
      return v.items().size();
    case Value::Kind::kDict:
      return v.dict().entries.size();
    default:
      throw EvalError(fmt::format("object of type '{}' has no len()", type_name(v)));
  }
}

Text text_of(const Value& v) {
  return to_text(v);
}

std::optional<std::string> string_arg(const std::optional<Value>& v) {
  if (!v || v->is_none()) return std::nullopt;
  if (!v->is_string())
    throw EvalError(fmt::format("expected a string argument, got {}", type_name(*v)));
  return v->str();
}

// Hugging Face's tojson(x, ensure_ascii=False, indent=None, separators=None,
// sort_keys=False): note that a lone positional argument is ensure_ascii.
JsonStyle json_style(CallArgs& a) {
  JsonStyle style;
  if (std::optional<Value> ascii = a.take(0, "ensure_ascii")) style.ensure_ascii = truthy(*ascii);
  std::optional<Value> indent = a.take(1, "indent");
  if (indent && !indent->is_none()) {
    if (indent->is_string()) {
      style.indent = indent->str();
    } else if (indent->kind() == Value::Kind::kInt) {
      // Bounded so a template cannot make one indent gigabytes long.
      if (indent->as_int() > 64) throw EvalError("tojson indent above 64 is refused");
      style.indent = std::string(static_cast<size_t>(std::max<int64_t>(indent->as_int(), 0)), ' ');
    } else {
      throw EvalError("tojson indent must be an integer or a string");
    }
    style.item_separator.assign(1, ',');
  }
  if (std::optional<Value> seps = a.take(2, "separators"); seps && !seps->is_none()) {
    if (!seps->is_list() || seps->items().size() != 2 || !seps->items()[0].is_string() ||
        !seps->items()[1].is_string()) {
      throw EvalError("tojson separators must be a pair of strings");
    }
    style.item_separator = seps->items()[0].str();
    style.key_separator = seps->items()[1].str();
  }
  if (std::optional<Value> sort = a.take(3, "sort_keys")) style.sort_keys = truthy(*sort);
  a.expect_consumed("tojson");
  return style;
}

// A (test name, its arguments) pair from select/reject style arguments
// starting at positional index `first`.
bool passes(Renderer& r, const Value& v, const std::optional<std::string>& test, const List& args) {
  if (!test) return truthy(v);
  CallArgs call;
  call.positional = args;
  return r.test(*test, v, call);
}

Value select_items(Renderer& r, const Value& input, CallArgs& a, bool by_attribute, bool keep) {
  List items = r.iterate(input);
  std::optional<std::string> attribute;
  size_t next = 0;
  if (by_attribute) {
    if (a.positional.empty() || !a.positional[0].is_string())
      throw EvalError("selectattr needs an attribute name");
    attribute = a.positional[0].str();
    next = 1;
  }
  std::optional<std::string> test;
  if (a.positional.size() > next) test = string_arg(a.positional[next]);
  List test_args(
      a.positional.begin() + static_cast<ptrdiff_t>(std::min(a.positional.size(), next + 1)),
      a.positional.end());
  List out;
  for (const Value& item : items) {
    const Value subject = attribute ? r.attribute(item, *attribute) : item;
    if (passes(r, subject, test, test_args) == keep) out.push_back(item);
  }
  return Value::list(std::move(out));
}

Value html_escape(const Value& v) {
  const Text t = to_text(v);
  Text out;
  for (size_t i = 0; i < t.size(); ++i) {
    const char c = t.str()[i];
    const char* repl = c == '&'    ? "&amp;"
                       : c == '<'  ? "&lt;"
                       : c == '>'  ? "&gt;"
                       : c == '"'  ? "&#34;"
                       : c == '\'' ? "&#39;"
                                   : nullptr;
    out.append(repl ? std::string_view(repl) : std::string_view(&t.str()[i], 1), t.tainted_at(i));
  }
  return Value(std::move(out));
}

}  // namespace

Value apply_filter(Renderer& r, const std::string& name, Value input, CallArgs& a) {
  auto done = [&](Value v) {
    a.expect_consumed(name);
    return v;
  };
  if (name == "length" || name == "count")
    return done(Value(static_cast<int64_t>(length_of(input))));
  if (name == "tojson") return Value(to_json(input, json_style(a)));
  if (name == "safe") return done(input);
  if (name == "string") return done(Value(text_of(input)));
  if (name == "e" || name == "escape" || name == "forceescape") return done(html_escape(input));
  if (name == "trim") {
    auto chars = string_arg(a.take(0, "chars"));
    return done(Value(strip(text_of(input), chars, StripSide::kBoth)));
  }
  if (name == "upper") return done(Value(change_case(text_of(input), Case::kUpper)));
  if (name == "lower") return done(Value(change_case(text_of(input), Case::kLower)));
  if (name == "title") return done(Value(jinja_title(text_of(input))));
  if (name == "capitalize") return done(Value(capitalize(text_of(input))));
  if (name == "replace") {
    std::optional<Value> old = a.take(0, "old");
    std::optional<Value> repl = a.take(1, "new");
    std::optional<Value> count = a.take(2, "count");
    if (!old || !repl) throw EvalError("replace filter needs old and new");
    const int64_t n = count && !count->is_none() ? count->as_int() : -1;
    return done(Value(replace(text_of(input), text_of(*old).str(), text_of(*repl), n)));
  }
  if (name == "join") {
    std::optional<Value> sep = a.take(0, "d");
    auto attribute = string_arg(a.take(1, "attribute"));
    const Text separator = sep ? text_of(*sep) : Text();
    List items = r.iterate(input);
    Text out;
    for (size_t i = 0; i < items.size(); ++i) {
      if (i) out.append(separator);
      out.append(to_text(attribute ? r.attribute(items[i], *attribute) : items[i]));
    }
    return done(Value(std::move(out)));
  }
  if (name == "default" || name == "d") {
    std::optional<Value> dflt = a.take(0, "default_value");
    std::optional<Value> boolean = a.take(1, "boolean");
    const bool replace_falsy = boolean && truthy(*boolean);
    if (input.is_undefined() || (replace_falsy && !truthy(input)))
      return done(dflt ? *dflt : Value::markup(""));
    return done(input);
  }
  if (name == "first" || name == "last") {
    List items = r.iterate(input);
    if (items.empty())
      return done(Value::undefined(fmt::format("No {} item, sequence was empty.", name)));
    return done(name == "first" ? items.front() : items.back());
  }
  if (name == "list") return done(Value::list(r.iterate(input)));
  if (name == "reverse") {
    if (input.is_string()) {
      List chars = r.iterate(input);
      Text out;
      for (auto it = chars.rbegin(); it != chars.rend(); ++it) out.append(it->text());
      return done(Value(std::move(out)));
    }
    List items = r.iterate(input);
    std::reverse(items.begin(), items.end());
    return done(Value::list(std::move(items)));
  }
  if (name == "items") {
    if (input.is_undefined()) return done(Value::list());
    if (!input.is_dict())
      throw EvalError(
          fmt::format("can only get item pairs from a mapping, not {}", type_name(input)));
    List out;
    for (const auto& [k, v] : input.dict().entries) out.push_back(Value::list({Value(k), v}));
    return done(Value::list(std::move(out)));
  }
  if (name == "int" || name == "float") {
    std::optional<Value> dflt = a.take(0, "default");
    const Value fallback = dflt ? *dflt : name == "int" ? Value(0) : Value(0.0);
    if (input.is_number())
      return done(name == "int" ? Value(static_cast<int64_t>(input.as_float()))
                                : Value(input.as_float()));
    if (input.is_string()) {
      try {
        size_t used = 0;
        const std::string s = strip(input.text(), std::nullopt, StripSide::kBoth).str();
        if (name == "int") {
          const int64_t v = std::stoll(s, &used);
          if (used == s.size()) return done(Value(v));
        } else {
          const double v = std::stod(s, &used);
          if (used == s.size()) return done(Value(v));
        }
      } catch (const std::exception&) {
      }
    }
    return done(fallback);
  }
  if (name == "abs") {
    if (!input.is_number())
      throw EvalError(fmt::format("bad operand type for abs(): '{}'", type_name(input)));
    return done(input.kind() == Value::Kind::kFloat
                    ? Value(std::fabs(input.as_float()))
                    : Value(static_cast<int64_t>(std::llabs(input.as_int()))));
  }
  if (name == "round") {
    std::optional<Value> precision = a.take(0, "precision");
    if (!input.is_number()) throw EvalError("round filter needs a number");
    const double scale = std::pow(10.0, precision ? static_cast<double>(precision->as_int()) : 0.0);
    // Python's round, as jinja2 calls it: halves to even, and an int stays an int.
    const double rounded = std::nearbyint(input.as_float() * scale) / scale;
    if (input.kind() != Value::Kind::kFloat) return done(Value(static_cast<int64_t>(rounded)));
    return done(Value(rounded));
  }
  if (name == "select" || name == "reject")
    return select_items(r, input, a, false, name == "select");
  if (name == "selectattr" || name == "rejectattr")
    return select_items(r, input, a, true, name == "selectattr");
  if (name == "map") {
    List items = r.iterate(input);
    List out;
    if (std::optional<Value> attribute = a.take(SIZE_MAX, "attribute")) {
      std::optional<Value> dflt = a.take(SIZE_MAX, "default");
      for (const Value& item : items) {
        Value v = r.attribute(item, text_of(*attribute).str());
        out.push_back(v.is_undefined() && dflt ? *dflt : v);
      }
      return done(Value::list(std::move(out)));
    }
    if (a.positional.empty() || !a.positional[0].is_string())
      throw EvalError("map needs a filter name or attribute=");
    const std::string filter = a.positional[0].str();
    for (const Value& item : items) {
      CallArgs inner;
      inner.positional.assign(a.positional.begin() + 1, a.positional.end());
      inner.keyword = a.keyword;
      out.push_back(r.filter(filter, item, inner));
    }
    return Value::list(std::move(out));
  }
  if (name == "indent") {
    std::optional<Value> width = a.take(0, "width");
    std::optional<Value> first = a.take(1, "first");
    std::optional<Value> blank = a.take(2, "blank");
    Text pad =
        width && width->is_string()
            ? width->text()
            : Text::markup(std::string(
                  static_cast<size_t>(std::clamp<int64_t>(width ? width->as_int() : 4, 0, 256)),
                  ' '));
    const Text s = text_of(input);
    std::vector<Text> lines = split(s, std::string("\n"), -1);
    Text out;
    for (size_t i = 0; i < lines.size(); ++i) {
      if (i) out.append_markup("\n");
      const bool indent_it =
          (i > 0 || (first && truthy(*first))) && (!lines[i].empty() || (blank && truthy(*blank)));
      if (indent_it) out.append(pad);
      out.append(lines[i]);
    }
    return done(Value(std::move(out)));
  }
  if (name == "sort" || name == "unique" || name == "min" || name == "max") {
    std::optional<Value> reverse = name == "sort" ? a.take(0, "reverse") : std::nullopt;
    auto attribute = string_arg(a.take(SIZE_MAX, "attribute"));
    a.take(SIZE_MAX, "case_sensitive");
    List items = r.iterate(input);
    auto key = [&](const Value& v) { return attribute ? r.attribute(v, *attribute) : v; };
    if (name == "unique") {
      List out;
      for (const Value& v : items) {
        if (std::none_of(out.begin(), out.end(),
                         [&](const Value& o) { return equals(key(o), key(v)); }))
          out.push_back(v);
      }
      return done(Value::list(std::move(out)));
    }
    std::stable_sort(items.begin(), items.end(),
                     [&](const Value& x, const Value& y) { return less_than(key(x), key(y)); });
    if (name == "min")
      return done(items.empty() ? Value::undefined("No aggregated item, sequence was empty.")
                                : items.front());
    if (name == "max")
      return done(items.empty() ? Value::undefined("No aggregated item, sequence was empty.")
                                : items.back());
    if (reverse && truthy(*reverse)) std::reverse(items.begin(), items.end());
    return done(Value::list(std::move(items)));
  }
  if (name == "sum") {
    auto attribute = string_arg(a.take(0, "attribute"));
    std::optional<Value> start = a.take(1, "start");
    Value total = start ? *start : Value(0);
    for (const Value& v : r.iterate(input)) {
      const Value x = attribute ? r.attribute(v, *attribute) : v;
      if (!x.is_number() || !total.is_number()) throw EvalError("sum filter needs numbers");
      total = total.kind() == Value::Kind::kFloat || x.kind() == Value::Kind::kFloat
                  ? Value(total.as_float() + x.as_float())
                  : Value(total.as_int() + x.as_int());
    }
    return done(total);
  }
  throw EvalError(fmt::format("no filter named '{}'", name));
}

bool apply_test(Renderer& r, const std::string& name, const Value& v, CallArgs& a) {
  using K = Value::Kind;
  auto arg = [&]() {
    if (a.positional.empty()) throw EvalError(fmt::format("test '{}' needs an argument", name));
    return a.positional[0];
  };
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "boolean") return v.kind() == K::kBool;
  if (name == "false") return v.kind() == K::kBool && !v.as_bool();
  if (name == "true") return v.kind() == K::kBool && v.as_bool();
  if (name == "string") return v.is_string();
  if (name == "number") return v.is_number();
  if (name == "integer") return v.kind() == K::kInt;
  if (name == "float") return v.kind() == K::kFloat;
  if (name == "mapping") return v.is_dict() && !v.dict().is_namespace;
  if (name == "iterable") return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict();
  if (name == "sequence")
    return v.is_string() || v.is_list() || (v.is_dict() && !v.dict().is_namespace);
  if (name == "callable") return v.is_callable();
  if (name == "odd" || name == "even") {
    if (v.kind() != K::kInt && v.kind() != K::kBool)
      throw EvalError(fmt::format("test '{}' needs an integer", name));
    return (v.as_int() % 2 != 0) == (name == "odd");
  }
  if (name == "divisibleby") {
    const Value d = arg();
    if (!d.is_number() || !v.is_number() || d.as_float() == 0.0)
      throw EvalError("divisibleby needs non-zero numbers");
    return std::fmod(v.as_float(), d.as_float()) == 0.0;
  }
  if (name == "eq" || name == "equalto" || name == "==") return equals(v, arg());
  if (name == "ne" || name == "!=") return !equals(v, arg());
  if (name == "lt" || name == "lessthan" || name == "<") return less_than(v, arg());
  if (name == "gt" || name == "greaterthan" || name == ">") return less_than(arg(), v);
  if (name == "le" || name == "<=") return !less_than(arg(), v);
  if (name == "ge" || name == ">=") return !less_than(v, arg());
  if (name == "in") {
    const Value seq = arg();
    if (seq.is_string()) return v.is_string() && seq.str().find(v.str()) != std::string::npos;
    if (seq.is_dict()) return v.is_string() && seq.dict().find(v.str());
    for (const Value& item : r.iterate(seq)) {
      if (equals(item, v)) return true;
    }
    return false;
  }
  if (name == "sameas") {
    const Value other = arg();
    if (v.kind() != other.kind()) return false;
    if (v.is_none() || v.is_undefined()) return true;
    if (v.kind() == K::kBool) return v.as_bool() == other.as_bool();
    // CPython shares the objects of small ints.
    if (v.kind() == K::kInt)
      return v.as_int() == other.as_int() && v.as_int() >= -5 && v.as_int() <= 256;
    if (v.is_list()) return &v.items() == &other.items();
    if (v.is_dict()) return &v.dict() == &other.dict();
    return false;
  }
  if (name == "lower") return v.is_string() && change_case(v.text(), Case::kLower).str() == v.str();
  if (name == "upper") return v.is_string() && change_case(v.text(), Case::kUpper).str() == v.str();
  if (name == "escaped") return false;
  throw EvalError(fmt::format("no test named '{}'", name));
}

}  // namespace sluice::chat
