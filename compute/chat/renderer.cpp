// compute/chat/renderer.cpp: statements and expressions evaluated as jinja2
// evaluates them (scoping, loop variables, macros, Python operators, the
// default Undefined). Output keeps provenance; the limits are checked on
// every step so no template can run away.
#include "compute/chat/renderer.h"

#include <fmt/format.h>

#include <cmath>

#include "compute/chat/pystr.h"

namespace sluice::chat {

Value* Scope::find(std::string_view name) {
  for (Scope* s = this; s; s = s->parent.get()) {
    for (auto& [k, v] : s->vars) {
      if (k == name) return &v;
    }
  }
  return nullptr;
}

void Scope::set(const std::string& name, Value value) {
  for (auto& [k, v] : vars) {
    if (k == name) {
      v = std::move(value);
      return;
    }
  }
  vars.emplace_back(name, std::move(value));
}

namespace {

[[noreturn]] void undefined_error(const Value& v) {
  throw EvalError(v.undefined_hint().empty() ? "value is undefined" : v.undefined_hint());
}

std::optional<int64_t> slice_bound(const Value& v) {
  if (v.is_none()) return std::nullopt;
  if (v.kind() != Value::Kind::kInt && v.kind() != Value::Kind::kBool) {
    throw EvalError("slice indices must be integers or None");
  }
  return v.as_int();
}

}  // namespace

void Renderer::step() {
  if (++steps_ > limits_.max_steps) throw EvalError("template took too many steps");
}

void Renderer::emit(const Text& t) {
  emitted_ += t.size();
  if (emitted_ > limits_.max_output_bytes) {
    throw EvalError(fmt::format("output exceeds the limit of {} bytes", limits_.max_output_bytes));
  }
  out_->append(t);
}

void Renderer::render(const Body& body, Text& out) {
  out_ = &out;
  render_body(body);
}

Text Renderer::capture(const Body& body) {
  Text captured;
  Text* saved = out_;
  out_ = &captured;
  try {
    render_body(body);
  } catch (...) {
    out_ = saved;
    throw;
  }
  out_ = saved;
  return captured;
}

Renderer::Flow Renderer::render_body(const Body& body) {
  for (const NodePtr& n : body) {
    const Flow flow = render_node(*n);
    if (flow != Flow::kNormal) return flow;
  }
  return Flow::kNormal;
}

Renderer::Flow Renderer::render_node(const Node& n) {
  step();
  line_ = n.line;
  switch (n.kind) {
    case Node::Kind::kText:
      emit(Text::markup(n.text));
      break;
    case Node::Kind::kOutput:
      emit(to_text(eval(*n.expr)));
      break;
    case Node::Kind::kIf:
      for (const auto& [condition, body] : n.branches) {
        if (!condition || truthy(eval(*condition))) return render_body(body);
        line_ = n.line;
      }
      break;
    case Node::Kind::kFor:
      render_for(n);
      break;
    case Node::Kind::kSet: {
      Value v = eval(*n.expr);
      if (!n.attribute.empty()) {
        Value* target = scope_->find(n.targets[0]);
        if (!target || !target->is_dict() || !target->dict().is_namespace) {
          throw EvalError("cannot assign attribute on non-namespace object");
        }
        target->dict().set(Text::markup(n.attribute), std::move(v));
      } else {
        assign(n.targets, v);
      }
      break;
    }
    case Node::Kind::kSetBlock: {
      Value v(capture(n.body));
      if (n.filter) v = eval_filter_node(*n.filter, std::move(v));
      scope_->set(n.targets[0], std::move(v));
      break;
    }
    case Node::Kind::kMacro:
      scope_->set(n.name, define_macro(n, scope_, n.name));
      break;
    case Node::Kind::kCallBlock: {
      const Expr& call_expr = *n.expr;
      Value callee = eval(*call_expr.args[0]);
      CallArgs args;
      for (size_t i = 1; i < call_expr.args.size(); ++i)
        args.positional.push_back(eval(*call_expr.args[i]));
      for (const auto& [k, e] : call_expr.kwargs) args.keyword.emplace_back(k, eval(*e));
      args.keyword.emplace_back("caller", define_macro(n, scope_, "caller"));
      emit(to_text(call(callee, args)));
      break;
    }
    case Node::Kind::kFilterBlock:
      emit(to_text(eval_filter_node(*n.filter, Value(capture(n.body)))));
      break;
    case Node::Kind::kWith: {
      auto inner = std::make_shared<Scope>();
      inner->parent = scope_;
      for (const auto& [name, e] : n.params) inner->set(name, eval(*e));
      std::swap(scope_, inner);
      Flow flow = Flow::kNormal;
      try {
        flow = render_body(n.body);
      } catch (...) {
        std::swap(scope_, inner);
        throw;
      }
      std::swap(scope_, inner);
      return flow;
    }
    case Node::Kind::kScope:
      return render_body(n.body);
    case Node::Kind::kBreak:
      return Flow::kBreak;
    case Node::Kind::kContinue:
      return Flow::kContinue;
  }
  return Flow::kNormal;
}

Value Renderer::eval_filter_node(const Expr& f, Value input) {
  // A filter chain parsed with a null innermost input: evaluate inside out.
  if (f.args[0]) input = eval_filter_node(*f.args[0], std::move(input));
  CallArgs args;
  for (size_t i = 1; i < f.args.size(); ++i) args.positional.push_back(eval(*f.args[i]));
  for (const auto& [k, e] : f.kwargs) args.keyword.emplace_back(k, eval(*e));
  return filter(f.name, std::move(input), args);
}

void Renderer::assign(const std::vector<std::string>& targets, const Value& v) {
  if (targets.size() == 1) {
    scope_->set(targets[0], v);
    return;
  }
  List items = iterate(v);
  if (items.size() != targets.size()) {
    throw EvalError(
        fmt::format("cannot unpack {} values into {} names", items.size(), targets.size()));
  }
  for (size_t i = 0; i < targets.size(); ++i) scope_->set(targets[i], items[i]);
}

List Renderer::iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return {};
    case Value::Kind::kList:
      return v.items();
    case Value::Kind::kDict: {
      List keys;
      for (const auto& [k, unused] : v.dict().entries) keys.emplace_back(k);
      return keys;
    }
    case Value::Kind::kString: {
      List chars;
      const std::string& s = v.str();
      for (size_t i = 0; i < s.size();) {
        const size_t len = utf8_length_at(s, i);
        chars.emplace_back(v.text().substr(i, len));
        i += len;
      }
      return chars;
    }
    default:
      throw EvalError(fmt::format("'{}' object is not iterable", type_name(v)));
  }
}

void Renderer::render_for(const Node& n) {
  List all = iterate(eval(*n.expr));
  auto loop_scope = std::make_shared<Scope>();
  loop_scope->parent = scope_;
  std::swap(scope_, loop_scope);
  struct Restore {
    std::shared_ptr<Scope>& current;
    std::shared_ptr<Scope>& saved;
    ~Restore() { std::swap(current, saved); }
  } restore{scope_, loop_scope};

  const std::shared_ptr<Scope> loop_scope_of_for = scope_;
  List items;
  if (n.condition) {
    for (Value& item : all) {
      assign(n.targets, item);
      if (truthy(eval(*n.condition))) items.push_back(std::move(item));
    }
  } else {
    items = std::move(all);
  }
  const auto length = static_cast<int64_t>(items.size());
  for (int64_t i = 0; i < length; ++i) {
    step();
    Value loop = Dict::make();
    Dict& d = loop.dict();
    d.set(Text::markup("index0"), Value(i));
    d.set(Text::markup("index"), Value(i + 1));
    d.set(Text::markup("revindex0"), Value(length - i - 1));
    d.set(Text::markup("revindex"), Value(length - i));
    d.set(Text::markup("first"), Value(i == 0));
    d.set(Text::markup("last"), Value(i == length - 1));
    d.set(Text::markup("length"), Value(length));
    d.set(Text::markup("depth0"), Value(0));
    d.set(Text::markup("depth"), Value(1));
    d.set(Text::markup("previtem"), i > 0 ? items[static_cast<size_t>(i - 1)]
                                          : Value::undefined("there is no previous item"));
    d.set(Text::markup("nextitem"), i + 1 < length ? items[static_cast<size_t>(i + 1)]
                                                   : Value::undefined("there is no next item"));
    d.set(Text::markup("cycle"), Value::function("cycle", [i](CallArgs& args, Renderer&) {
            if (args.positional.empty()) throw EvalError("no items for cycling given");
            return args.positional[static_cast<size_t>(i) % args.positional.size()];
          }));
    // Each iteration starts from the scope outside the loop, as in jinja2:
    // a set inside the body does not carry over to the next iteration.
    auto iteration = std::make_shared<Scope>();
    iteration->parent = loop_scope_of_for;
    scope_ = iteration;
    scope_->set("loop", std::move(loop));
    assign(n.targets, items[static_cast<size_t>(i)]);
    const Flow flow = render_body(n.body);
    scope_ = loop_scope_of_for;
    if (flow == Flow::kBreak) break;
  }
  if (length == 0) render_body(n.else_body);
}

Value Renderer::define_macro(const Node& n, std::shared_ptr<Scope> scope, const std::string& name) {
  const Node* node = &n;
  // Weak: the macro is usually stored in the very scope it closes over, and
  // a strong pointer would make that a cycle that outlives the render.
  std::weak_ptr<Scope> weak_scope = scope;
  return Value::function(name, [node, weak_scope, name](CallArgs& args, Renderer& r) {
    std::shared_ptr<Scope> scope = weak_scope.lock();
    if (!scope) throw EvalError(fmt::format("macro '{}' called after its scope ended", name));
    if (r.call_depth_ >= r.limits_.max_call_depth) {
      throw EvalError(fmt::format("macro calls nested deeper than {}", r.limits_.max_call_depth));
    }
    auto frame = std::make_shared<Scope>();
    frame->parent = scope;
    if (args.positional.size() > node->params.size()) {
      throw EvalError(
          fmt::format("macro '{}' takes not more than {} argument(s)", name, node->params.size()));
    }
    for (size_t i = 0; i < node->params.size(); ++i) {
      const auto& [param, dflt] = node->params[i];
      std::optional<Value> v = args.take(i, param);
      frame->set(param, v      ? *v
                        : dflt ? r.eval(*dflt)
                               : Value::undefined(fmt::format("'{}' is undefined", param)));
    }
    if (std::optional<Value> caller = args.take(SIZE_MAX, "caller")) frame->set("caller", *caller);
    if (!args.keyword.empty()) {
      throw EvalError(
          fmt::format("macro '{}' has no argument '{}'", name, args.keyword.front().first));
    }
    ++r.call_depth_;
    std::swap(r.scope_, frame);
    const int line = r.line_;
    Text out;
    try {
      out = r.capture(node->body);
    } catch (...) {
      std::swap(r.scope_, frame);
      --r.call_depth_;
      throw;
    }
    std::swap(r.scope_, frame);
    --r.call_depth_;
    r.line_ = line;
    return Value(std::move(out));
  });
}

Value Renderer::call(const Value& callee, CallArgs& args) {
  if (callee.is_undefined()) undefined_error(callee);
  if (!callee.is_callable())
    throw EvalError(fmt::format("'{}' object is not callable", type_name(callee)));
  return callee.callable().call(args, *this);
}

Value Renderer::attribute(const Value& object, const std::string& name) {
  if (object.is_undefined()) undefined_error(object);
  if (object.is_dict()) {
    if (!object.dict().is_namespace) {
      Value m = method(object, name);
      if (!m.is_undefined()) return m;
    }
    if (const Value* v = object.dict().find(name)) return *v;
    return Value::undefined(
        fmt::format("'{}' object has no attribute '{}'", type_name(object), name));
  }
  Value m = method(object, name);
  if (!m.is_undefined()) return m;
  return Value::undefined(
      fmt::format("'{}' object has no attribute '{}'", type_name(object), name));
}

Value Renderer::item(const Value& object, const Value& key) {
  if (object.is_undefined()) undefined_error(object);
  const bool int_key = key.kind() == Value::Kind::kInt || key.kind() == Value::Kind::kBool;
  if (object.is_dict() && key.is_string()) {
    if (const Value* v = object.dict().find(key.str())) return *v;
  } else if ((object.is_list() || object.is_string()) && int_key) {
    const size_t n = object.is_list() ? object.items().size() : code_point_count(object.str());
    int64_t i = key.as_int();
    if (i < 0) i += static_cast<int64_t>(n);
    if (i >= 0 && static_cast<size_t>(i) < n) {
      if (object.is_list()) return object.items()[static_cast<size_t>(i)];
      const std::vector<size_t> at = code_point_offsets(object.str());
      return Value(object.text().substr(
          at[static_cast<size_t>(i)], at[static_cast<size_t>(i) + 1] - at[static_cast<size_t>(i)]));
    }
  }
  if (key.is_string()) {
    Value m = object.is_dict() && object.dict().is_namespace ? Value() : method(object, key.str());
    if (!m.is_undefined()) return m;
  }
  return Value::undefined(
      fmt::format("'{}' object has no element {}", type_name(object), repr(key).str()));
}

Value Renderer::filter(const std::string& name, Value input, CallArgs& args) {
  return apply_filter(*this, name, std::move(input), args);
}

bool Renderer::test(const std::string& name, const Value& v, CallArgs& args) {
  return apply_test(*this, name, v, args);
}

Value Renderer::eval(const Expr& e) {
  line_ = e.line;
  switch (e.kind) {
    case Expr::Kind::kLiteral:
      return e.value;
    case Expr::Kind::kName: {
      if (Value* v = scope_->find(e.name)) return *v;
      return Value::undefined(fmt::format("'{}' is undefined", e.name));
    }
    case Expr::Kind::kList:
    case Expr::Kind::kTuple: {
      List items;
      for (const auto& a : e.args) items.push_back(eval(*a));
      return Value::list(std::move(items));
    }
    case Expr::Kind::kDict: {
      Value d = Dict::make();
      for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
        Value key = eval(*e.args[i]);
        if (!key.is_string()) throw EvalError("dict keys in templates must be strings");
        d.dict().set(key.text(), eval(*e.args[i + 1]));
      }
      return d;
    }
    case Expr::Kind::kAttribute:
      return attribute(eval(*e.args[0]), e.name);
    case Expr::Kind::kItem: {
      Value object = eval(*e.args[0]);
      return item(object, eval(*e.args[1]));
    }
    case Expr::Kind::kSlice: {
      Value object = eval(*e.args[0]);
      if (object.is_undefined()) undefined_error(object);
      std::optional<int64_t> bound[3];
      for (int k = 0; k < 3; ++k) {
        if (e.args[static_cast<size_t>(k) + 1])
          bound[k] = slice_bound(eval(*e.args[static_cast<size_t>(k) + 1]));
      }
      if (object.is_list()) {
        List out;
        for (size_t i : slice_indices(object.items().size(), bound[0], bound[1], bound[2])) {
          out.push_back(object.items()[i]);
        }
        return Value::list(std::move(out));
      }
      if (object.is_string()) {
        const std::vector<size_t> at = code_point_offsets(object.str());
        Text out;
        for (size_t i : slice_indices(at.size() - 1, bound[0], bound[1], bound[2])) {
          out.append(object.text().substr(at[i], at[i + 1] - at[i]));
        }
        return Value(std::move(out));
      }
      return Value::undefined(fmt::format("'{}' object is not subscriptable", type_name(object)));
    }
    case Expr::Kind::kCall: {
      Value callee = eval(*e.args[0]);
      CallArgs args;
      for (size_t i = 1; i < e.args.size(); ++i) args.positional.push_back(eval(*e.args[i]));
      for (const auto& [k, a] : e.kwargs) args.keyword.emplace_back(k, eval(*a));
      line_ = e.line;
      return call(callee, args);
    }
    case Expr::Kind::kFilter: {
      Value input = eval(*e.args[0]);
      CallArgs args;
      for (size_t i = 1; i < e.args.size(); ++i) args.positional.push_back(eval(*e.args[i]));
      for (const auto& [k, a] : e.kwargs) args.keyword.emplace_back(k, eval(*a));
      line_ = e.line;
      return filter(e.name, std::move(input), args);
    }
    case Expr::Kind::kTest: {
      Value v = eval(*e.args[0]);
      CallArgs args;
      for (size_t i = 1; i < e.args.size(); ++i) args.positional.push_back(eval(*e.args[i]));
      for (const auto& [k, a] : e.kwargs) args.keyword.emplace_back(k, eval(*a));
      line_ = e.line;
      return Value(test(e.name, v, args) != e.negated);
    }
    case Expr::Kind::kNegate:
    case Expr::Kind::kPlus: {
      Value v = eval(*e.args[0]);
      if (v.is_undefined()) undefined_error(v);
      if (!v.is_number())
        throw EvalError(fmt::format("bad operand type for unary -: '{}'", type_name(v)));
      if (e.kind == Expr::Kind::kPlus)
        return v.kind() == Value::Kind::kFloat ? v : Value(v.as_int());
      return v.kind() == Value::Kind::kFloat ? Value(-v.as_float()) : Value(-v.as_int());
    }
    case Expr::Kind::kNot:
      return Value(!truthy(eval(*e.args[0])));
    case Expr::Kind::kBinary: {
      Value a = eval(*e.args[0]);
      Value b = eval(*e.args[1]);
      line_ = e.line;
      if (e.name == "~") {
        Text t = to_text(a);
        const Text right = to_text(b);
        check_built_size(t.size() + right.size(), "~");
        t.append(right);
        return Value(std::move(t));
      }
      return binary_operator(e.name, a, b);
    }
    case Expr::Kind::kAnd: {
      Value a = eval(*e.args[0]);
      return truthy(a) ? eval(*e.args[1]) : a;
    }
    case Expr::Kind::kOr: {
      Value a = eval(*e.args[0]);
      return truthy(a) ? a : eval(*e.args[1]);
    }
    case Expr::Kind::kCompare: {
      Value left = eval(*e.args[0]);
      for (size_t i = 0; i < e.ops.size(); ++i) {
        Value right = eval(*e.args[i + 1]);
        line_ = e.line;
        if (!compare_values(e.ops[i], left, right)) return Value(false);
        left = std::move(right);
      }
      return Value(true);
    }
    case Expr::Kind::kCondition: {
      if (truthy(eval(*e.args[0]))) return eval(*e.args[1]);
      if (e.args[2]) return eval(*e.args[2]);
      return Value::undefined(
          "the inline if-expression evaluated to false and no else section was defined");
    }
  }
  return Value();
}

}  // namespace sluice::chat
