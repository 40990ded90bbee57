// compute/chat/renderer.h: evaluates a parsed template against a context,
// writing Text with provenance. Private to compute/chat. It enforces the
// limits (output size, call depth, steps) and never lets an error escape
// without the line it happened on.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "compute/chat/template_ast.h"
#include "compute/chat/value.h"

namespace sluice::chat {

struct Scope {
  std::vector<std::pair<std::string, Value>> vars;
  std::shared_ptr<Scope> parent;

  Value* find(std::string_view name);
  void set(const std::string& name, Value value);
};

struct Limits {
  size_t max_output_bytes;
  int max_call_depth;
  uint64_t max_steps;
};

class Renderer {
 public:
  Renderer(std::shared_ptr<Scope> root, Limits limits) : scope_(std::move(root)), limits_(limits) {}

  // Renders `body` into `out`; throws EvalError, with line() telling where.
  void render(const Body& body, Text& out);
  int line() const { return line_; }

  Value eval(const Expr& e);
  Value call(const Value& callee, CallArgs& args);
  Value attribute(const Value& object, const std::string& name);
  Value item(const Value& object, const Value& key);
  Value filter(const std::string& name, Value input, CallArgs& args);
  bool test(const std::string& name, const Value& v, CallArgs& args);
  // The items a for loop over `v` visits (dict keys, characters of a string).
  List iterate(const Value& v);

 private:
  enum class Flow { kNormal, kBreak, kContinue };
  Flow render_body(const Body& body);
  Flow render_node(const Node& n);
  void render_for(const Node& n);
  void assign(const std::vector<std::string>& targets, const Value& v);
  Value define_macro(const Node& n, std::shared_ptr<Scope> scope, const std::string& name);
  Text capture(const Body& body);
  Value eval_filter_node(const Expr& f, Value input);
  void emit(const Text& t);
  void step();

  std::shared_ptr<Scope> scope_;
  Limits limits_;
  Text* out_ = nullptr;
  size_t emitted_ = 0;
  uint64_t steps_ = 0;
  int call_depth_ = 0;
  int line_ = 0;
};

// builtins.cpp: the globals every render starts with, and the Python
// methods of str, dict and list (undefined when there is no such method).
void add_globals(Scope& scope);
Value method(const Value& object, const std::string& name);
// filters.cpp: jinja2's filters and tests by name.
Value apply_filter(Renderer& r, const std::string& name, Value input, CallArgs& args);
bool apply_test(Renderer& r, const std::string& name, const Value& v, CallArgs& args);

}  // namespace sluice::chat
