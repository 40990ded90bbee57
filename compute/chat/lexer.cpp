// compute/chat/lexer.cpp: template source to tokens, reproducing jinja2's
// lexer under Hugging Face's settings (trim_blocks, lstrip_blocks, `-`/`+`
// whitespace control, raw blocks, Python string escapes). It decides where
// whitespace goes; it never evaluates anything.
#include <fmt/format.h>

#include "compute/chat/pystr.h"
#include "compute/chat/template_ast.h"
#include "compute/tokenizer/unicode.h"

namespace sluice::chat {
namespace {

[[noreturn]] void lex_error(int line, const std::string& what) {
  throw EvalError(fmt::format("line {}: {}", line, what));
}

// \r\n and \r become \n; one final newline is dropped (keep_trailing_newline=False).
std::string normalise_newlines(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out += source[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

bool is_space_at(const std::string& s, size_t i) {
  return tokenizer::is_python_space(decode_at(s, i));
}

size_t skip_spaces(const std::string& s, size_t i) {
  while (i < s.size() && is_space_at(s, i)) i += utf8_length_at(s, i);
  return i;
}

// Python's str.rstrip() on the byte range [begin, end).
size_t rstrip_end(const std::string& s, size_t begin, size_t end) {
  const std::vector<size_t> at = code_point_offsets(std::string_view(s).substr(begin, end - begin));
  size_t k = at.size() - 1;
  while (k > 0 && tokenizer::is_python_space(decode_at(s, begin + at[k - 1]))) --k;
  return begin + at[k];
}

// Python "unicode-escape" decoding of a string literal's body.
std::string unescape(std::string_view body, int line) {
  std::string out;
  for (size_t i = 0; i < body.size(); ++i) {
    if (body[i] != '\\' || i + 1 == body.size()) {
      out += body[i];
      continue;
    }
    const char c = body[++i];
    auto hex = [&](size_t digits) {
      uint32_t v = 0;
      for (size_t k = 1; k <= digits; ++k) {
        if (i + k >= body.size() || !isxdigit(static_cast<unsigned char>(body[i + k]))) {
          lex_error(line, "truncated escape in a string literal");
        }
        v = v * 16 + static_cast<uint32_t>(std::stoi(std::string(1, body[i + k]), nullptr, 16));
      }
      i += digits;
      if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
        lex_error(line, "escape out of the Unicode range");
      tokenizer::append_utf8(out, static_cast<char32_t>(v));
    };
    switch (c) {
      case '\n':
        break;
      case '\\':
        out += '\\';
        break;
      case '\'':
        out += '\'';
        break;
      case '"':
        out += '"';
        break;
      case 'a':
        out += '\a';
        break;
      case 'b':
        out += '\b';
        break;
      case 'f':
        out += '\f';
        break;
      case 'n':
        out += '\n';
        break;
      case 'r':
        out += '\r';
        break;
      case 't':
        out += '\t';
        break;
      case 'v':
        out += '\v';
        break;
      case 'x':
        hex(2);
        break;
      case 'u':
        hex(4);
        break;
      case 'U':
        hex(8);
        break;
      default:
        if (c >= '0' && c <= '7') {
          uint32_t v = static_cast<uint32_t>(c - '0');
          for (int k = 0; k < 2 && i + 1 < body.size() && body[i + 1] >= '0' && body[i + 1] <= '7';
               ++k) {
            v = v * 8 + static_cast<uint32_t>(body[++i] - '0');
          }
          tokenizer::append_utf8(out, static_cast<char32_t>(v));
        } else {
          out += '\\';
          out += c;
        }
    }
  }
  return out;
}

class Lexer {
 public:
  explicit Lexer(std::string source) : s_(std::move(source)) {}

  std::vector<Token> run() {
    while (pos_ < s_.size()) root_step();
    tokens_.push_back({Token::Kind::kEnd, "", line_});
    return std::move(tokens_);
  }

 private:
  void advance_to(size_t to) {
    for (size_t i = pos_; i < to; ++i) line_ += s_[i] == '\n';
    pos_ = to;
  }

  // The text before a tag, with `-`, `+` and lstrip_blocks applied.
  void emit_data(size_t begin, size_t end, char sign, bool is_variable) {
    if (sign == '-') {
      end = rstrip_end(s_, begin, end);
    } else if (sign != '+' && !is_variable) {
      const size_t newline = s_.rfind('\n', end == 0 ? 0 : end - 1);
      const size_t line_begin =
          (newline == std::string::npos || newline < begin) ? begin : newline + 1;
      if ((line_begin > begin || line_starting_) && line_begin < end) {
        bool blank = true;
        for (size_t i = line_begin; i < end; i += utf8_length_at(s_, i))
          blank = blank && is_space_at(s_, i);
        if (blank) end = line_begin;
      }
    }
    if (end > begin) tokens_.push_back({Token::Kind::kData, s_.substr(begin, end - begin), line_});
  }

  // A block end at pos_ ("+%}", "-%}" plus whitespace, "%}" plus one newline);
  // returns its length or 0.
  size_t block_end_at(size_t at) const {
    if (s_.compare(at, 3, "+%}") == 0) return 3;
    if (s_.compare(at, 3, "-%}") == 0) return skip_spaces(s_, at + 3) - at;
    if (s_.compare(at, 2, "%}") == 0) return (at + 2 < s_.size() && s_[at + 2] == '\n') ? 3 : 2;
    return 0;
  }

  bool raw_begin_at(size_t at, size_t& end) const {
    size_t i = at + 2;
    if (i < s_.size() && (s_[i] == '-' || s_[i] == '+')) ++i;
    i = skip_spaces(s_, i);
    if (s_.compare(i, 3, "raw") != 0) return false;
    i = skip_spaces(s_, i + 3);
    if (s_.compare(i, 3, "-%}") == 0) {
      end = skip_spaces(s_, i + 3);
      return true;
    }
    if (s_.compare(i, 2, "%}") == 0) {
      end = i + 2;
      return true;
    }
    return false;
  }

  void root_step() {
    size_t tag = pos_;
    for (;;) {
      tag = s_.find('{', tag);
      if (tag == std::string::npos || tag + 1 >= s_.size()) {
        emit_data(pos_, s_.size(), 0, true);
        advance_to(s_.size());
        return;
      }
      const char kind = s_[tag + 1];
      if (kind == '{' || kind == '%' || kind == '#') break;
      ++tag;
    }
    const char kind = s_[tag + 1];
    const char sign =
        (tag + 2 < s_.size() && (s_[tag + 2] == '-' || s_[tag + 2] == '+')) ? s_[tag + 2] : 0;
    size_t raw_end = 0;
    if (kind == '%' && raw_begin_at(tag, raw_end)) {
      emit_data(pos_, tag, sign, false);
      advance_to(raw_end);
      raw_body();
      return;
    }
    emit_data(pos_, tag, sign, kind == '{');
    advance_to(tag + 2 + (sign ? 1 : 0));
    if (kind == '#') {
      comment();
    } else {
      tag_body(kind == '{');
    }
  }

  void comment() {
    const int start_line = line_;
    const size_t close = s_.find("#}", pos_);
    if (close == std::string::npos) lex_error(start_line, "missing end of comment tag");
    size_t end = close + 2;
    if (close > pos_ && s_[close - 1] == '-') {
      end = skip_spaces(s_, end);
    } else if (!(close > pos_ && s_[close - 1] == '+') && end < s_.size() && s_[end] == '\n') {
      ++end;
    }
    line_starting_ = s_[end - 1] == '\n';
    advance_to(end);
  }

  void raw_body() {
    const int start_line = line_;
    for (size_t at = s_.find("{%", pos_); at != std::string::npos; at = s_.find("{%", at + 1)) {
      size_t i = at + 2;
      const char sign = (i < s_.size() && (s_[i] == '-' || s_[i] == '+')) ? s_[i] : 0;
      if (sign) ++i;
      i = skip_spaces(s_, i);
      if (s_.compare(i, 6, "endraw") != 0) continue;
      i = skip_spaces(s_, i + 6);
      const size_t close = block_end_at(i);
      if (!close) continue;
      emit_data(pos_, at, sign, false);
      line_starting_ = s_[i + close - 1] == '\n';
      advance_to(i + close);
      return;
    }
    lex_error(start_line, "missing end of raw directive");
  }

  void tag_body(bool is_variable) {
    const int start_line = line_;
    tokens_.push_back(
        {is_variable ? Token::Kind::kVariableBegin : Token::Kind::kBlockBegin, "", line_});
    int depth = 0;
    for (;;) {
      if (pos_ >= s_.size())
        lex_error(start_line, is_variable ? "unexpected end of template, expected '}}'"
                                          : "unexpected end of template, expected '%}'");
      if (depth == 0) {
        size_t close = 0;
        if (is_variable) {
          if (s_.compare(pos_, 3, "-}}") == 0)
            close = skip_spaces(s_, pos_ + 3) - pos_;
          else if (s_.compare(pos_, 2, "}}") == 0)
            close = 2;
        } else {
          close = block_end_at(pos_);
        }
        if (close) {
          tokens_.push_back(
              {is_variable ? Token::Kind::kVariableEnd : Token::Kind::kBlockEnd, "", line_});
          line_starting_ = s_[pos_ + close - 1] == '\n';
          advance_to(pos_ + close);
          return;
        }
      }
      if (is_space_at(s_, pos_)) {
        advance_to(skip_spaces(s_, pos_));
        continue;
      }
      const char c = s_[pos_];
      if (isdigit(static_cast<unsigned char>(c))) {
        number();
      } else if (isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t end = pos_;
        while (end < s_.size() && (isalnum(static_cast<unsigned char>(s_[end])) || s_[end] == '_'))
          ++end;
        tokens_.push_back({Token::Kind::kName, s_.substr(pos_, end - pos_), line_});
        advance_to(end);
      } else if (c == '\'' || c == '"') {
        string_literal();
      } else {
        static const char* const kOperators[] = {"//", "**", "==", "!=", ">=", "<=", "+", "-", "/",
                                                 "*",  "%",  "~",  "[",  "]",  "(",  ")", "{", "}",
                                                 ">",  "<",  "=",  ".",  ":",  "|",  ",", ";"};
        std::string op;
        for (const char* candidate : kOperators) {
          if (s_.compare(pos_, std::char_traits<char>::length(candidate), candidate) == 0) {
            op = candidate;
            break;
          }
        }
        if (op.empty()) lex_error(line_, fmt::format("unexpected char '{}'", c));
        if (op == "(" || op == "[" || op == "{") ++depth;
        if ((op == ")" || op == "]" || op == "}") && depth > 0) --depth;
        tokens_.push_back({Token::Kind::kOperator, op, line_});
        advance_to(pos_ + op.size());
      }
    }
  }

  void number() {
    auto digits = [&](size_t i) {
      const size_t begin = i;
      while (i < s_.size() &&
             (isdigit(static_cast<unsigned char>(s_[i])) || (s_[i] == '_' && i > begin)))
        ++i;
      return i;
    };
    size_t end = digits(pos_);
    bool is_float = false;
    const bool after_dot = pos_ > 0 && s_[pos_ - 1] == '.';
    if (!after_dot && end + 1 < s_.size() && s_[end] == '.' &&
        isdigit(static_cast<unsigned char>(s_[end + 1]))) {
      end = digits(end + 1);
      is_float = true;
    }
    if (!after_dot && end < s_.size() && (s_[end] == 'e' || s_[end] == 'E')) {
      size_t e = end + 1;
      if (e < s_.size() && (s_[e] == '+' || s_[e] == '-')) ++e;
      if (e < s_.size() && isdigit(static_cast<unsigned char>(s_[e]))) {
        end = digits(e);
        is_float = true;
      }
    }
    std::string text = s_.substr(pos_, end - pos_);
    std::erase(text, '_');
    Token t{is_float ? Token::Kind::kFloat : Token::Kind::kInteger, text, line_};
    try {
      if (is_float)
        t.number = std::stod(text);
      else
        t.integer = std::stoll(text);
    } catch (const std::exception&) {
      lex_error(line_, fmt::format("number {} is out of range", text));
    }
    tokens_.push_back(std::move(t));
    advance_to(end);
  }

  void string_literal() {
    const char quote = s_[pos_];
    size_t i = pos_ + 1;
    while (i < s_.size() && s_[i] != quote) i += s_[i] == '\\' ? 2 : 1;
    if (i >= s_.size()) lex_error(line_, "unterminated string literal");
    tokens_.push_back({Token::Kind::kString,
                       unescape(std::string_view(s_).substr(pos_ + 1, i - pos_ - 1), line_),
                       line_});
    advance_to(i + 1);
  }

  std::string s_;
  size_t pos_ = 0;
  int line_ = 1;
  bool line_starting_ = true;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> lex(std::string_view source) {
  return Lexer(normalise_newlines(source)).run();
}

}  // namespace sluice::chat
