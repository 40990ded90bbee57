// compute/chat/template_ast.h: the parsed form of a chat template — tokens
// from the lexer, expression and statement trees from the parser. Private to
// compute/chat; the tree never holds values computed from a conversation.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "compute/chat/value.h"

namespace sluice::chat {

struct Token {
  enum class Kind {
    kData,
    kVariableBegin,
    kVariableEnd,
    kBlockBegin,
    kBlockEnd,
    kName,
    kString,
    kInteger,
    kFloat,
    kOperator,
    kEnd
  };
  Kind kind;
  std::string text;  // data, name, operator, or the decoded string literal
  int line;
  int64_t integer = 0;
  double number = 0.0;
};

// Splits `source` as jinja2 does with trim_blocks and lstrip_blocks on:
// newlines normalised to \n, one trailing newline dropped, comments gone.
// Throws EvalError "line N: ..." on an unterminated tag, string or comment.
std::vector<Token> lex(std::string_view source);

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    kLiteral,    // value
    kName,       // name
    kList,       // args
    kTuple,      // args
    kDict,       // args: key, value, key, value...
    kAttribute,  // args[0].name
    kItem,       // args[0][args[1]]
    kSlice,      // args[0][args[1]:args[2]:args[3]] (null where absent)
    kCall,       // args[0](args[1:], kwargs)
    kFilter,     // name(args[0], args[1:], kwargs); args[0] null in a filter block
    kTest,       // args[0] is name(args[1:]); negated for "is not"
    kNegate,     // -args[0]
    kPlus,       // +args[0]
    kNot,        // not args[0]
    kBinary,     // args[0] name args[1]: + - * / // % ** ~
    kAnd,
    kOr,
    kCompare,    // args[0] ops[0] args[1] ops[1] args[2] ...
    kCondition,  // args[1] if args[0] else args[2] (args[2] may be null)
  };
  Kind kind;
  int line;
  std::string name;
  Value value;
  bool negated = false;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;
};

struct Node;
using NodePtr = std::unique_ptr<Node>;
using Body = std::vector<NodePtr>;

struct Node {
  enum class Kind {
    kText,         // text
    kOutput,       // {{ expr }}
    kIf,           // branches (condition null for else)
    kFor,          // targets in expr [if condition] body [else else_body]
    kSet,          // targets = expr, or targets[0].attribute = expr
    kSetBlock,     // targets[0] = rendered body, through filter if set
    kMacro,        // name(params) body
    kCallBlock,    // expr (a call) with caller(params) = body
    kFilterBlock,  // filter (args[0] null) applied to rendered body
    kWith,         // params assigned in a new scope, then body
    kScope,        // body rendered as is ({% generation %})
    kBreak,
    kContinue,
  };
  Kind kind;
  int line;
  std::string text;
  ExprPtr expr;
  ExprPtr condition;
  ExprPtr filter;
  std::vector<std::string> targets;
  std::string attribute;
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body body;
  Body else_body;
  std::string name;
  std::vector<std::pair<std::string, ExprPtr>> params;
};

// Parses a whole template; throws EvalError "line N: ..." on a syntax error.
Body parse(std::string_view source);

}  // namespace sluice::chat
