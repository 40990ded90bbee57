// compute/chat/parser.cpp: tokens to statement and expression trees with
// jinja2's grammar and operator precedence. It only builds trees; it never
// looks at a conversation. Nesting is bounded so hostile templates cannot
// exhaust the stack.
#include <fmt/format.h>

#include "compute/chat/template_ast.h"

namespace sluice::chat {
namespace {

constexpr int kMaxNesting = 200;

using TK = Token::Kind;

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : t_(std::move(tokens)) {}

  Body parse_template() {
    std::string end;
    Body body = parse_body({}, end);
    return body;
  }

 private:
  [[noreturn]] void error(const std::string& what) const {
    throw EvalError(fmt::format("line {}: {}", peek().line, what));
  }
  const Token& peek(size_t ahead = 0) const { return t_[std::min(i_ + ahead, t_.size() - 1)]; }
  const Token& next() {
    const Token& t = t_[i_];
    if (i_ + 1 < t_.size()) ++i_;
    return t;
  }
  bool at_op(std::string_view op) const {
    return peek().kind == TK::kOperator && peek().text == op;
  }
  bool at_name(std::string_view name, size_t ahead = 0) const {
    return peek(ahead).kind == TK::kName && peek(ahead).text == name;
  }
  bool skip_op(std::string_view op) {
    if (!at_op(op)) return false;
    next();
    return true;
  }
  bool skip_name(std::string_view name) {
    if (!at_name(name)) return false;
    next();
    return true;
  }
  void expect_op(std::string_view op) {
    if (!skip_op(op)) error(fmt::format("expected '{}', found {}", op, describe(peek())));
  }
  std::string expect_name() {
    if (peek().kind != TK::kName) error(fmt::format("expected a name, found {}", describe(peek())));
    return next().text;
  }
  void expect_block_end() {
    if (peek().kind != TK::kBlockEnd)
      error(fmt::format("expected end of statement block, found {}", describe(peek())));
    next();
  }
  static std::string describe(const Token& t) {
    switch (t.kind) {
      case TK::kEnd:
        return "end of template";
      case TK::kBlockEnd:
        return "'%}'";
      case TK::kVariableEnd:
        return "'}}'";
      case TK::kString:
        return "a string";
      default:
        return "'" + t.text + "'";
    }
  }

  struct Depth {
    explicit Depth(Parser& p) : p(p) {
      if (++p.depth_ > kMaxNesting) p.error("template nested too deeply");
    }
    ~Depth() { --p.depth_; }
    Parser& p;
  };

  // Statements up to a block tag named in `ends`; its name goes to `found`.
  Body parse_body(const std::vector<std::string_view>& ends, std::string& found) {
    Depth guard(*this);
    Body body;
    for (;;) {
      const Token& t = peek();
      if (t.kind == TK::kEnd) {
        if (!ends.empty())
          error(fmt::format("unexpected end of template, expected '{}'", ends.back()));
        return body;
      }
      if (t.kind == TK::kData) {
        auto n = node(Node::Kind::kText);
        n->text = next().text;
        body.push_back(std::move(n));
      } else if (t.kind == TK::kVariableBegin) {
        next();
        auto n = node(Node::Kind::kOutput);
        n->expr = expression();
        if (peek().kind != TK::kVariableEnd)
          error(fmt::format("expected '}}}}', found {}", describe(peek())));
        next();
        body.push_back(std::move(n));
      } else {
        next();
        const std::string keyword = peek().kind == TK::kName ? peek().text : "";
        for (auto end : ends) {
          if (keyword == end) {
            next();
            found = keyword;
            return body;
          }
        }
        body.push_back(statement());
      }
    }
  }

  NodePtr node(Node::Kind kind) {
    auto n = std::make_unique<Node>();
    n->kind = kind;
    n->line = peek().line;
    return n;
  }

  NodePtr statement() {
    const std::string keyword = expect_name();
    --i_;  // node() takes the keyword's line
    auto line_node = [&](Node::Kind k) {
      auto n = node(k);
      next();
      return n;
    };
    std::string found;
    if (keyword == "if") {
      auto n = line_node(Node::Kind::kIf);
      ExprPtr condition = expression();
      expect_block_end();
      for (;;) {
        Body body = parse_body({"elif", "else", "endif"}, found);
        n->branches.emplace_back(std::move(condition), std::move(body));
        if (found == "endif") break;
        if (found == "else") {
          expect_block_end();
          n->branches.emplace_back(nullptr, parse_body({"endif"}, found));
          break;
        }
        condition = expression();
        expect_block_end();
      }
      expect_block_end();
      return n;
    }
    if (keyword == "for") {
      auto n = line_node(Node::Kind::kFor);
      do {
        n->targets.push_back(expect_name());
      } while (skip_op(","));
      if (!skip_name("in")) error("expected 'in' in a for loop");
      n->expr = condition_free_expression();
      if (skip_name("if")) n->condition = expression();
      if (skip_name("recursive")) error("recursive for loops are not supported");
      expect_block_end();
      n->body = parse_body({"else", "endfor"}, found);
      if (found == "else") {
        expect_block_end();
        n->else_body = parse_body({"endfor"}, found);
      }
      expect_block_end();
      return n;
    }
    if (keyword == "set") {
      auto n = line_node(Node::Kind::kSet);
      n->targets.push_back(expect_name());
      if (skip_op(".")) {
        n->attribute = expect_name();
      } else {
        while (skip_op(",")) n->targets.push_back(expect_name());
      }
      if (skip_op("=")) {
        n->expr = expression();
        expect_block_end();
        return n;
      }
      if (n->targets.size() != 1 || !n->attribute.empty()) error("a block set assigns one name");
      n->kind = Node::Kind::kSetBlock;
      while (at_op("|")) n->filter = filter_chain(std::move(n->filter));
      expect_block_end();
      n->body = parse_body({"endset"}, found);
      expect_block_end();
      return n;
    }
    if (keyword == "macro" || keyword == "call") {
      auto n = line_node(keyword == "macro" ? Node::Kind::kMacro : Node::Kind::kCallBlock);
      if (keyword == "macro") n->name = expect_name();
      if (keyword == "macro" || at_op("(")) {
        expect_op("(");
        while (!skip_op(")")) {
          if (!n->params.empty()) expect_op(",");
          if (skip_op(")")) break;
          std::string param = expect_name();
          ExprPtr dflt = skip_op("=") ? expression() : nullptr;
          n->params.emplace_back(std::move(param), std::move(dflt));
        }
      }
      if (keyword == "call") {
        n->expr = expression();
        if (n->expr->kind != Expr::Kind::kCall) error("expected a call after {% call %}");
      }
      expect_block_end();
      n->body = parse_body({keyword == "macro" ? "endmacro" : "endcall"}, found);
      expect_block_end();
      return n;
    }
    if (keyword == "filter") {
      auto n = line_node(Node::Kind::kFilterBlock);
      n->filter = filter_tail(nullptr);
      while (at_op("|")) n->filter = filter_chain(std::move(n->filter));
      expect_block_end();
      n->body = parse_body({"endfilter"}, found);
      expect_block_end();
      return n;
    }
    if (keyword == "with") {
      auto n = line_node(Node::Kind::kWith);
      while (peek().kind != TK::kBlockEnd) {
        if (!n->params.empty()) expect_op(",");
        std::string name = expect_name();
        expect_op("=");
        n->params.emplace_back(std::move(name), expression());
      }
      expect_block_end();
      n->body = parse_body({"endwith"}, found);
      expect_block_end();
      return n;
    }
    if (keyword == "generation") {
      auto n = line_node(Node::Kind::kScope);
      expect_block_end();
      n->body = parse_body({"endgeneration"}, found);
      expect_block_end();
      return n;
    }
    if (keyword == "break" || keyword == "continue") {
      auto n = line_node(keyword == "break" ? Node::Kind::kBreak : Node::Kind::kContinue);
      expect_block_end();
      return n;
    }
    error(fmt::format("unknown or unsupported tag '{}'", keyword));
  }

  ExprPtr expr(Expr::Kind kind, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = line;
    return e;
  }

  // A full expression, with a trailing "a, b" becoming a tuple (as in set).
  ExprPtr expression() {
    ExprPtr first = conditional();
    if (!at_op(",")) return first;
    auto tuple = expr(Expr::Kind::kTuple, first->line);
    tuple->args.push_back(std::move(first));
    while (skip_op(",")) {
      if (peek().kind == TK::kBlockEnd || peek().kind == TK::kVariableEnd) break;
      tuple->args.push_back(conditional());
    }
    return tuple;
  }

  // The iterable of a for loop: no conditional, so "if" filters the loop.
  ExprPtr condition_free_expression() { return or_expr(); }

  ExprPtr conditional() {
    Depth guard(*this);
    ExprPtr value = or_expr();
    while (skip_name("if")) {
      auto c = expr(Expr::Kind::kCondition, value->line);
      c->args.push_back(or_expr());
      c->args.push_back(std::move(value));
      c->args.push_back(skip_name("else") ? conditional() : nullptr);
      value = std::move(c);
    }
    return value;
  }

  ExprPtr binary_chain(Expr::Kind kind, ExprPtr left, ExprPtr right) {
    auto e = expr(kind, left->line);
    e->args.push_back(std::move(left));
    e->args.push_back(std::move(right));
    return e;
  }

  ExprPtr or_expr() {
    ExprPtr left = and_expr();
    while (skip_name("or")) left = binary_chain(Expr::Kind::kOr, std::move(left), and_expr());
    return left;
  }
  ExprPtr and_expr() {
    ExprPtr left = not_expr();
    while (skip_name("and")) left = binary_chain(Expr::Kind::kAnd, std::move(left), not_expr());
    return left;
  }
  ExprPtr not_expr() {
    if (at_name("not")) {
      Depth guard(*this);
      auto e = expr(Expr::Kind::kNot, next().line);
      e->args.push_back(not_expr());
      return e;
    }
    return compare();
  }
  ExprPtr compare() {
    ExprPtr left = math1();
    ExprPtr chain;
    for (;;) {
      std::string op;
      if (peek().kind == TK::kOperator &&
          (at_op("==") || at_op("!=") || at_op("<") || at_op(">") || at_op("<=") || at_op(">="))) {
        op = next().text;
      } else if (skip_name("in")) {
        op = "in";
      } else if (at_name("not") && at_name("in", 1)) {
        next();
        next();
        op = "not in";
      } else {
        break;
      }
      if (!chain) {
        chain = expr(Expr::Kind::kCompare, left->line);
        chain->args.push_back(std::move(left));
      }
      chain->ops.push_back(op);
      chain->args.push_back(math1());
    }
    return chain ? std::move(chain) : std::move(left);
  }
  ExprPtr binary_op(ExprPtr left, const std::string& op, ExprPtr right) {
    auto e = binary_chain(Expr::Kind::kBinary, std::move(left), std::move(right));
    e->name = op;
    return e;
  }
  ExprPtr math1() {
    ExprPtr left = concat();
    while (at_op("+") || at_op("-")) {
      const std::string op = next().text;
      left = binary_op(std::move(left), op, concat());
    }
    return left;
  }
  ExprPtr concat() {
    ExprPtr left = math2();
    while (skip_op("~")) left = binary_op(std::move(left), "~", math2());
    return left;
  }
  ExprPtr math2() {
    ExprPtr left = power();
    while (at_op("*") || at_op("/") || at_op("//") || at_op("%")) {
      const std::string op = next().text;
      left = binary_op(std::move(left), op, power());
    }
    return left;
  }
  ExprPtr power() {
    ExprPtr left = unary(true);
    while (skip_op("**")) left = binary_op(std::move(left), "**", unary(true));
    return left;
  }
  ExprPtr unary(bool with_filter) {
    Depth guard(*this);
    ExprPtr e;
    if (at_op("-") || at_op("+")) {
      const bool negate = next().text == "-";
      e = expr(negate ? Expr::Kind::kNegate : Expr::Kind::kPlus, peek().line);
      e->args.push_back(unary(false));
    } else {
      e = primary();
    }
    e = postfix(std::move(e));
    if (with_filter) e = filters_and_tests(std::move(e));
    return e;
  }

  ExprPtr primary() {
    const Token& t = peek();
    switch (t.kind) {
      case TK::kName: {
        next();
        auto e = expr(Expr::Kind::kLiteral, t.line);
        if (t.text == "true" || t.text == "True")
          e->value = Value(true);
        else if (t.text == "false" || t.text == "False")
          e->value = Value(false);
        else if (t.text == "none" || t.text == "None")
          e->value = Value::none();
        else {
          e->kind = Expr::Kind::kName;
          e->name = t.text;
        }
        return e;
      }
      case TK::kString: {
        auto e = expr(Expr::Kind::kLiteral, t.line);
        std::string s;
        while (peek().kind == TK::kString) s += next().text;  // adjacent literals concatenate
        e->value = Value::markup(s);
        return e;
      }
      case TK::kInteger: {
        auto e = expr(Expr::Kind::kLiteral, t.line);
        e->value = Value(next().integer);
        return e;
      }
      case TK::kFloat: {
        auto e = expr(Expr::Kind::kLiteral, t.line);
        e->value = Value(next().number);
        return e;
      }
      case TK::kOperator:
        if (t.text == "(") {
          next();
          if (skip_op(")")) return expr(Expr::Kind::kTuple, t.line);
          ExprPtr first = conditional();
          if (skip_op(")")) return first;
          auto tuple = expr(Expr::Kind::kTuple, t.line);
          tuple->args.push_back(std::move(first));
          while (skip_op(",")) {
            if (at_op(")")) break;
            tuple->args.push_back(conditional());
          }
          expect_op(")");
          return tuple;
        }
        if (t.text == "[") {
          next();
          auto list = expr(Expr::Kind::kList, t.line);
          while (!skip_op("]")) {
            if (!list->args.empty()) expect_op(",");
            if (skip_op("]")) break;
            list->args.push_back(conditional());
          }
          return list;
        }
        if (t.text == "{") {
          next();
          auto dict = expr(Expr::Kind::kDict, t.line);
          while (!skip_op("}")) {
            if (!dict->args.empty()) expect_op(",");
            if (skip_op("}")) break;
            dict->args.push_back(conditional());
            expect_op(":");
            dict->args.push_back(conditional());
          }
          return dict;
        }
        break;
      default:
        break;
    }
    error(fmt::format("unexpected {}", describe(t)));
  }

  ExprPtr postfix(ExprPtr e) {
    for (;;) {
      if (at_op(".")) {
        next();
        auto a = expr(Expr::Kind::kAttribute, e->line);
        if (peek().kind == TK::kInteger) {
          a->kind = Expr::Kind::kItem;
          a->args.push_back(std::move(e));
          auto index = expr(Expr::Kind::kLiteral, peek().line);
          index->value = Value(next().integer);
          a->args.push_back(std::move(index));
        } else {
          a->name = expect_name();
          a->args.push_back(std::move(e));
        }
        e = std::move(a);
      } else if (at_op("[")) {
        e = subscript(std::move(e));
      } else if (at_op("(")) {
        e = call(std::move(e));
      } else {
        return e;
      }
    }
  }

  ExprPtr subscript(ExprPtr target) {
    const int line = next().line;
    ExprPtr parts[3];
    int colons = 0;
    while (!at_op("]")) {
      if (skip_op(":")) {
        if (++colons > 2) error("too many ':' in a slice");
        continue;
      }
      if (parts[colons]) error("expected ':' or ']' in a subscript");
      parts[colons] = conditional();
    }
    next();
    if (colons == 0) {
      if (!parts[0]) error("empty subscript");
      auto e = expr(Expr::Kind::kItem, line);
      e->args.push_back(std::move(target));
      e->args.push_back(std::move(parts[0]));
      return e;
    }
    auto e = expr(Expr::Kind::kSlice, line);
    e->args.push_back(std::move(target));
    for (auto& p : parts) e->args.push_back(std::move(p));
    return e;
  }

  // Arguments of a call at '(' into e's args (after any already there) and kwargs.
  void call_args(Expr& e) {
    expect_op("(");
    bool first = true;
    while (!skip_op(")")) {
      if (!first) expect_op(",");
      first = false;
      if (skip_op(")")) break;
      if (at_op("*") || at_op("**")) error("*args and **kwargs in calls are not supported");
      if (peek().kind == TK::kName && peek(1).kind == TK::kOperator && peek(1).text == "=") {
        std::string name = next().text;
        next();
        e.kwargs.emplace_back(std::move(name), conditional());
      } else {
        if (!e.kwargs.empty()) error("positional argument after keyword argument");
        e.args.push_back(conditional());
      }
    }
  }

  ExprPtr call(ExprPtr callee) {
    auto e = expr(Expr::Kind::kCall, callee->line);
    e->args.push_back(std::move(callee));
    call_args(*e);
    return e;
  }

  // At a filter name (the '|' consumed): name[.name] [(args)].
  ExprPtr filter_tail(ExprPtr input) {
    auto f = expr(Expr::Kind::kFilter, peek().line);
    f->name = expect_name();
    while (skip_op(".")) f->name += "." + expect_name();
    f->args.push_back(std::move(input));
    if (at_op("(")) call_args(*f);
    return f;
  }
  ExprPtr filter_chain(ExprPtr input) {
    expect_op("|");
    return filter_tail(std::move(input));
  }

  ExprPtr filters_and_tests(ExprPtr e) {
    for (;;) {
      if (at_op("|")) {
        e = filter_chain(std::move(e));
      } else if (at_name("is")) {
        next();
        auto t = expr(Expr::Kind::kTest, e->line);
        t->negated = skip_name("not");
        t->name = expect_name();
        while (skip_op(".")) t->name += "." + expect_name();
        t->args.push_back(std::move(e));
        const Token& a = peek();
        if (at_op("(")) {
          call_args(*t);
        } else if ((a.kind == TK::kName || a.kind == TK::kString || a.kind == TK::kInteger ||
                    a.kind == TK::kFloat || at_op("[") || at_op("{")) &&
                   !at_name("else") && !at_name("or") && !at_name("and") && !at_name("if") &&
                   !at_name("in") && !at_name("is") && !at_name("not")) {
          t->args.push_back(postfix(primary()));
        }
        e = std::move(t);
      } else if (at_op("(")) {
        e = call(std::move(e));
      } else {
        return e;
      }
    }
  }

  std::vector<Token> t_;
  size_t i_ = 0;
  int depth_ = 0;
};

}  // namespace

Body parse(std::string_view source) {
  return Parser(lex(source)).parse_template();
}

}  // namespace sluice::chat
