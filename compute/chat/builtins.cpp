// compute/chat/builtins.cpp: what a template can call — jinja2's filters and
// tests, the Python methods of str/dict/list that chat templates use, and
// Hugging Face's globals (raise_exception, strftime_now, range, namespace).
// Like ImmutableSandboxedEnvironment, nothing here mutates a list or dict.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <ctime>

#include "compute/chat/pystr.h"
#include "compute/tokenizer/unicode.h"
#include "compute/chat/renderer.h"

namespace sluice::chat {
namespace {

constexpr int64_t kMaxRange = 100000;  // jinja2.sandbox.MAX_RANGE

using Fn = std::function<Value(CallArgs&, Renderer&)>;

const std::string& need_string(const Value& v, std::string_view what) {
  if (!v.is_string())
    throw EvalError(fmt::format("{} must be a string, not {}", what, type_name(v)));
  return v.str();
}

int64_t need_int(const Value& v, std::string_view what) {
  if (v.kind() != Value::Kind::kInt && v.kind() != Value::Kind::kBool) {
    throw EvalError(fmt::format("{} must be an integer, not {}", what, type_name(v)));
  }
  return v.as_int();
}

std::optional<std::string> optional_string(const std::optional<Value>& v, std::string_view what) {
  if (!v || v->is_none()) return std::nullopt;
  return need_string(*v, what);
}

Value texts(std::vector<Text> parts) {
  List items;
  for (Text& t : parts) items.emplace_back(std::move(t));
  return Value::list(std::move(items));
}

// A prefix test against a string or a tuple/list of strings.
bool affix_matches(const Value& self, const Value& affix, bool prefix) {
  auto one = [&](const std::string& a) {
    const std::string& s = self.str();
    if (a.size() > s.size()) return false;
    return prefix ? s.compare(0, a.size(), a) == 0
                  : s.compare(s.size() - a.size(), a.size(), a) == 0;
  };
  if (affix.is_list()) {
    for (const Value& a : affix.items()) {
      if (one(need_string(a, "tuple item"))) return true;
    }
    return false;
  }
  return one(need_string(affix, prefix ? "startswith argument" : "endswith argument"));
}

Value join(Renderer& r, const List& items, const Text& separator,
           const std::optional<std::string>& attribute) {
  Text out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) out.append(separator);
    out.append(to_text(attribute ? r.attribute(items[i], *attribute) : items[i]));
  }
  return Value(std::move(out));
}

Value string_method(const Value& self, const std::string& name) {
  const std::string label = "str." + name;
  auto bind = [&](Fn fn) { return Value::function(label, std::move(fn)); };
  if (name == "startswith" || name == "endswith") {
    const bool prefix = name == "startswith";
    return bind([self, prefix, label](CallArgs& a, Renderer&) {
      std::optional<Value> affix = a.take(0, "prefix");
      a.expect_consumed(label);
      if (!affix) throw EvalError(label + "() takes at least 1 argument");
      return Value(affix_matches(self, *affix, prefix));
    });
  }
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    const StripSide side = name == "strip"    ? StripSide::kBoth
                           : name == "lstrip" ? StripSide::kLeft
                                              : StripSide::kRight;
    return bind([self, side, label](CallArgs& a, Renderer&) {
      auto chars = optional_string(a.take(0, "chars"), label + " argument");
      a.expect_consumed(label);
      return Value(strip(self.text(), chars, side));
    });
  }
  if (name == "split" || name == "rsplit") {
    const bool right = name == "rsplit";
    return bind([self, right, label](CallArgs& a, Renderer&) {
      auto sep = optional_string(a.take(0, "sep"), label + " separator");
      std::optional<Value> max = a.take(1, "maxsplit");
      a.expect_consumed(label);
      const int64_t maxsplit = max ? need_int(*max, "maxsplit") : -1;
      return texts(right ? rsplit(self.text(), sep, maxsplit) : split(self.text(), sep, maxsplit));
    });
  }
  if (name == "splitlines") {
    return bind([self, label](CallArgs& a, Renderer&) {
      a.expect_consumed(label);
      std::vector<Text> lines;
      const std::string& s = self.str();
      size_t begin = 0;
      for (size_t i = 0; i < s.size();) {
        const char32_t c = decode_at(s, i);
        const size_t len = utf8_length_at(s, i);
        if (c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D ||
            c == 0x1E || c == 0x85 || c == 0x2028 || c == 0x2029) {
          lines.push_back(self.text().substr(begin, i - begin));
          i += (c == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ? 2 : len;
          begin = i;
        } else {
          i += len;
        }
      }
      if (begin < s.size()) lines.push_back(self.text().substr(begin));
      return texts(std::move(lines));
    });
  }
  if (name == "replace") {
    return bind([self, label](CallArgs& a, Renderer&) {
      std::optional<Value> old = a.take(0, "old");
      std::optional<Value> repl = a.take(1, "new");
      std::optional<Value> count = a.take(2, "count");
      a.expect_consumed(label);
      if (!old || !repl) throw EvalError(label + "() takes at least 2 arguments");
      need_string(*repl, "replacement");
      return Value(replace(self.text(), need_string(*old, "old"), repl->text(),
                           count ? need_int(*count, "count") : -1));
    });
  }
  if (name == "upper" || name == "lower" || name == "title" || name == "capitalize" ||
      name == "isdigit" || name == "isalpha" || name == "isspace" || name == "isupper" ||
      name == "islower" || name == "isalnum") {
    return bind([self, name, label](CallArgs& a, Renderer&) -> Value {
      a.expect_consumed(label);
      if (name == "upper") return Value(change_case(self.text(), Case::kUpper));
      if (name == "lower") return Value(change_case(self.text(), Case::kLower));
      if (name == "title") return Value(python_title(self.text()));
      if (name == "capitalize") return Value(capitalize(self.text()));
      const std::string& s = self.str();
      if (s.empty()) return Value(false);
      bool all = true;
      for (size_t i = 0; i < s.size(); i += utf8_length_at(s, i)) {
        const char32_t c = decode_at(s, i);
        const bool ascii_letter = (c | 0x20) >= 'a' && (c | 0x20) <= 'z';
        if (name == "isdigit") all = all && c >= '0' && c <= '9';
        if (name == "isalpha") all = all && ascii_letter;
        if (name == "isalnum") all = all && (ascii_letter || (c >= '0' && c <= '9'));
        if (name == "isspace") all = all && tokenizer::is_python_space(c);
      }
      if (name == "isupper")
        return Value(change_case(self.text(), Case::kLower).str() != s &&
                     change_case(self.text(), Case::kUpper).str() == s);
      if (name == "islower")
        return Value(change_case(self.text(), Case::kUpper).str() != s &&
                     change_case(self.text(), Case::kLower).str() == s);
      return Value(all);
    });
  }
  if (name == "find" || name == "count" || name == "removeprefix" || name == "removesuffix") {
    return bind([self, name, label](CallArgs& a, Renderer&) -> Value {
      std::optional<Value> arg = a.take(0, "sub");
      a.expect_consumed(label);
      if (!arg) throw EvalError(label + "() takes exactly one argument");
      const std::string& sub = need_string(*arg, label + " argument");
      const std::string& s = self.str();
      if (name == "find") return Value(chat::find(s, sub));
      if (name == "count") {
        if (sub.empty()) return Value(static_cast<int64_t>(code_point_count(s) + 1));
        int64_t n = 0;
        for (size_t at = s.find(sub); at != std::string::npos; at = s.find(sub, at + sub.size()))
          ++n;
        return Value(n);
      }
      if (name == "removeprefix")
        return Value(s.compare(0, sub.size(), sub) == 0 ? self.text().substr(sub.size())
                                                        : self.text());
      const bool ends =
          sub.size() <= s.size() && s.compare(s.size() - sub.size(), sub.size(), sub) == 0;
      return Value(ends ? self.text().substr(0, s.size() - sub.size()) : self.text());
    });
  }
  if (name == "join") {
    return bind([self, label](CallArgs& a, Renderer& r) {
      std::optional<Value> items = a.take(0, "iterable");
      a.expect_consumed(label);
      if (!items) throw EvalError(label + "() takes exactly one argument");
      List list = r.iterate(*items);
      for (const Value& v : list) need_string(v, "sequence item");
      return join(r, list, self.text(), std::nullopt);
    });
  }
  return Value();
}

Value dict_method(const Value& self, const std::string& name) {
  const std::string label = "dict." + name;
  if (name == "items" || name == "keys" || name == "values") {
    return Value::function(label, [self, name, label](CallArgs& a, Renderer&) {
      a.expect_consumed(label);
      List out;
      for (const auto& [k, v] : self.dict().entries) {
        if (name == "items")
          out.push_back(Value::list({Value(k), v}));
        else if (name == "keys")
          out.emplace_back(k);
        else
          out.push_back(v);
      }
      return Value::list(std::move(out));
    });
  }
  if (name == "get") {
    return Value::function(label, [self, label](CallArgs& a, Renderer&) {
      std::optional<Value> key = a.take(0, "key");
      std::optional<Value> dflt = a.take(1, "default");
      a.expect_consumed(label);
      if (!key) throw EvalError("dict.get() takes at least 1 argument");
      if (key->is_string()) {
        if (const Value* v = self.dict().find(key->str())) return *v;
      }
      return dflt ? *dflt : Value::none();
    });
  }
  static const char* const kMutating[] = {"pop", "popitem", "setdefault", "update", "clear"};
  for (const char* m : kMutating) {
    if (name == m) {
      return Value::function(label, [name](CallArgs&, Renderer&) -> Value {
        throw EvalError(fmt::format("access to attribute '{}' of 'dict' object is unsafe", name));
      });
    }
  }
  if (name == "copy")
    return Value::function(label, [self](CallArgs&, Renderer&) {
      Value d = Dict::make();
      d.dict().entries = self.dict().entries;
      return d;
    });
  return Value();
}

Value list_method(const Value& self, const std::string& name) {
  const std::string label = "list." + name;
  if (name == "index" || name == "count") {
    return Value::function(label, [self, name, label](CallArgs& a, Renderer&) {
      std::optional<Value> x = a.take(0, "value");
      a.expect_consumed(label);
      if (!x) throw EvalError(label + "() takes exactly one argument");
      int64_t n = 0;
      for (size_t i = 0; i < self.items().size(); ++i) {
        if (equals(self.items()[i], *x)) {
          if (name == "index") return Value(static_cast<int64_t>(i));
          ++n;
        }
      }
      if (name == "index") throw EvalError(fmt::format("{} is not in list", repr(*x).str()));
      return Value(n);
    });
  }
  static const char* const kMutating[] = {"append", "extend",  "insert", "pop",
                                          "remove", "reverse", "sort",   "clear"};
  for (const char* m : kMutating) {
    if (name == m) {
      return Value::function(label, [name](CallArgs&, Renderer&) -> Value {
        throw EvalError(fmt::format("access to attribute '{}' of 'list' object is unsafe", name));
      });
    }
  }
  return Value();
}

}  // namespace

Value method(const Value& object, const std::string& name) {
  if (object.is_string()) return string_method(object, name);
  if (object.is_dict() && !object.dict().is_namespace) return dict_method(object, name);
  if (object.is_list()) return list_method(object, name);
  return Value();
}

void add_globals(Scope& scope) {
  scope.set("range", Value::function("range", [](CallArgs& a, Renderer&) {
              std::vector<int64_t> n;
              for (const Value& v : a.positional) n.push_back(need_int(v, "range() argument"));
              if (n.empty() || n.size() > 3 || !a.keyword.empty())
                throw EvalError("range expected 1 to 3 integer arguments");
              const int64_t start = n.size() == 1 ? 0 : n[0];
              const int64_t stop = n.size() == 1 ? n[0] : n[1];
              const int64_t step = n.size() == 3 ? n[2] : 1;
              if (step == 0) throw EvalError("range() arg 3 must not be zero");
              List out;
              for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
                if (static_cast<int64_t>(out.size()) >= kMaxRange) {
                  throw EvalError(
                      "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
                }
                out.emplace_back(i);
              }
              return Value::list(std::move(out));
            }));
  auto make_dict = [](bool is_namespace) {
    return [is_namespace](CallArgs& a, Renderer&) {
      Value d = Dict::make(is_namespace);
      for (const Value& p : a.positional) {
        if (!p.is_dict())
          throw EvalError("namespace() and dict() take a mapping or keyword arguments");
        for (const auto& [k, v] : p.dict().entries) d.dict().set(k, v);
      }
      for (const auto& [k, v] : a.keyword) d.dict().set(Text::markup(k), v);
      return d;
    };
  };
  scope.set("namespace", Value::function("namespace", make_dict(true)));
  scope.set("dict", Value::function("dict", make_dict(false)));
  scope.set("raise_exception",
            Value::function("raise_exception", [](CallArgs& a, Renderer&) -> Value {
              std::optional<Value> message = a.take(0, "message");
              throw EvalError(
                  message ? to_text(*message).str() : std::string("raise_exception called"), true);
            }));
  scope.set("strftime_now", Value::function("strftime_now", [](CallArgs& a, Renderer&) {
              std::optional<Value> format = a.take(0, "format");
              a.expect_consumed("strftime_now");
              if (!format) throw EvalError("strftime_now() takes a format");
              const std::time_t now = std::time(nullptr);
              std::tm local{};
              localtime_r(&now, &local);
              char buf[512];
              const size_t n =
                  std::strftime(buf, sizeof buf, need_string(*format, "format").c_str(), &local);
              return Value::markup(std::string_view(buf, n));
            }));
}

}  // namespace sluice::chat
