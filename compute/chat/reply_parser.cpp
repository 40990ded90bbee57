// compute/chat/reply_parser.cpp: the per-family state machine behind
// reply_parser.h. Markers switch the state only as token ids; bytes of any
// other token are text in whatever channel is open. It never throws on
// what the model writes, and never emits bytes it may have to take back.
#include "compute/chat/reply_parser.h"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <random>

#include "compute/tokenizer/unicode.h"
#include "proto/error.h"

namespace sluice::chat {
namespace {

bool is_space(char c) {
  return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}

std::string_view trim_right(std::string_view s) {
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  return trim_right(s);
}

std::optional<TokenId> added(const tokenizer::Tokenizer& tok, const char* text) {
  const auto id = tok.token_to_id(text);
  if (id && tok.is_added(*id)) return id;
  return std::nullopt;
}

}  // namespace

ReplyFormat reply_format_for(const tokenizer::Tokenizer& tok) {
  ReplyFormat f;
  f.think_open = added(tok, "<think>");
  f.think_close = added(tok, "</think>");
  if (auto open = added(tok, "<|tool_calls_section_begin|>")) {
    f.tools = ToolSyntax::kKimi;
    f.section_open = open;
    f.section_close = added(tok, "<|tool_calls_section_end|>");
    f.call_open = added(tok, "<|tool_call_begin|>");
    f.call_close = added(tok, "<|tool_call_end|>");
    f.separator = added(tok, "<|tool_call_argument_begin|>");
  } else if (auto begin = added(tok, "<｜tool▁calls▁begin｜>")) {
    f.tools = ToolSyntax::kDeepSeekV3;
    f.section_open = begin;
    f.section_close = added(tok, "<｜tool▁calls▁end｜>");
    f.call_open = added(tok, "<｜tool▁call▁begin｜>");
    f.call_close = added(tok, "<｜tool▁call▁end｜>");
    f.separator = added(tok, "<｜tool▁sep｜>");
  } else if (auto call = added(tok, "<tool_call>")) {
    f.tools = ToolSyntax::kQwen3;
    f.call_open = call;
    f.call_close = added(tok, "</tool_call>");
  }
  // A syntax missing any of its markers cannot be parsed by id: none.
  const bool whole = f.tools == ToolSyntax::kQwen3
                         ? f.call_close.has_value()
                         : f.section_close && f.call_open && f.call_close && f.separator;
  if (!whole) f.tools = ToolSyntax::kNone;
  return f;
}

struct ReplyParser::State {
  const tokenizer::Tokenizer& tok;
  ReplyFormat format;
  std::mt19937_64 ids;
  Reply reply;

  // kSection: between calls. kHeader: Qwen3's JSON until "arguments":,
  // DeepSeek's type (or V3.1's name), Kimi's id. kName: DeepSeek-V3's name
  // line. kArguments: the arguments, streamed.
  enum class Mode { kContent, kReasoning, kSection, kHeader, kName, kArguments } mode;
  std::string pending;     // content or reasoning bytes of an unfinished character
  std::string held_space;  // trailing whitespace of the content so far
  std::string header;
  std::string args;  // the current call's argument text so far
  size_t args_sent = 0;
  bool fence_open = false;  // DeepSeek-V3: the ```json line may still be coming
  bool fenced = false;      // DeepSeek-V3: the arguments end with a closing fence
  bool in_call = false;     // the current call was announced

  State(const tokenizer::Tokenizer& t, ReplyFormat f, const ReplyOptions& o)
      : tok(t), format(std::move(f)), ids(o.id_seed ? o.id_seed : std::random_device{}()) {
    mode = o.in_reasoning ? Mode::kReasoning : Mode::kContent;
    // XTML's generation prompt opened the message and its think (or response).
    if (format.tools == ToolSyntax::kXtml)
      elements = {"message", o.in_reasoning ? "think" : "response"};
  }

  std::string make_id() {
    static constexpr char kAlphabet[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    std::string id = "call_";
    for (int i = 0; i < 24; ++i) id += kAlphabet[ids() % (sizeof(kAlphabet) - 1)];
    return id;
  }

  void text(std::string_view bytes, std::vector<ReplyEvent>& out, bool flush) {
    pending.append(bytes);
    const size_t ready = flush ? pending.size() : tokenizer::complete_utf8_prefix(pending);
    if (ready == 0) return;
    std::string piece = tokenizer::repair_utf8(std::string_view(pending).substr(0, ready));
    pending.erase(0, ready);
    const bool reasoning = mode == Mode::kReasoning;
    if (!reasoning) {
      // Trailing whitespace waits for more text: around tool calls (Qwen3's
      // newline between them) it is no content at all.
      held_space += piece;
      const size_t text_end = trim_right(held_space).size();
      if (text_end == 0) return;
      piece = held_space.substr(0, text_end);
      held_space.erase(0, text_end);
    }
    (reasoning ? reply.reasoning : reply.content) += piece;
    out.push_back({reasoning ? ReplyEvent::Kind::kReasoning : ReplyEvent::Kind::kContent,
                   std::move(piece),
                   0,
                   {},
                   {}});
  }

  void announce(std::string id, std::string name, std::vector<ReplyEvent>& out) {
    reply.tool_calls.push_back({id, name, ""});
    out.push_back({ReplyEvent::Kind::kToolCall, "", reply.tool_calls.size() - 1, std::move(id),
                   std::move(name)});
    in_call = true;
    args.clear();
    args_sent = 0;
  }

  // The end of the arguments that is certain now: not a tail that the call's
  // closing syntax (or more of a character) may still claim.
  size_t certain_end() const {
    size_t end = args.size();
    auto held = [&](char c) {
      if (is_space(c)) return true;
      if (format.tools == ToolSyntax::kQwen3) return c == '}';
      return fenced && c == '`';
    };
    while (end > args_sent && held(args[end - 1])) --end;
    return std::min(end, args_sent + tokenizer::complete_utf8_prefix(std::string_view(args).substr(
                                         args_sent, end - args_sent)));
  }

  void send_arguments(size_t end, std::vector<ReplyEvent>& out) {
    if (end <= args_sent) return;
    std::string piece =
        tokenizer::repair_utf8(std::string_view(args).substr(args_sent, end - args_sent));
    args_sent = end;
    reply.tool_calls.back().arguments += piece;
    out.push_back(
        {ReplyEvent::Kind::kToolArguments, std::move(piece), reply.tool_calls.size() - 1, {}, {}});
  }

  void arguments(std::string_view bytes, std::vector<ReplyEvent>& out) {
    args.append(bytes);
    if (fence_open) {
      for (std::string_view opener : {"```json\n", "```\n"}) {
        if (args.rfind(opener, 0) == 0) {
          args.erase(0, opener.size());
          fence_open = false;
          fenced = true;
          break;
        }
      }
      if (fence_open) {
        const bool may_open = std::string_view("```json\n").starts_with(args) ||
                              std::string_view("```\n").starts_with(args);
        if (may_open) return;
        fence_open = false;
      }
    }
    send_arguments(certain_end(), out);
  }

  // The call's syntax ended (its close marker, or the reply).
  void close_call(std::vector<ReplyEvent>& out) {
    if (mode == Mode::kHeader || mode == Mode::kName) {
      // Never got as far as the arguments: what arrived is the call's name.
      if (format.tools == ToolSyntax::kQwen3) {
        qwen_whole_body(out);
      } else if (!header.empty() || mode == Mode::kName) {
        announce_named(out);
      }
    }
    if (in_call) {
      std::string_view all = trim_right(args);
      if (format.tools == ToolSyntax::kQwen3 && all.ends_with('}')) all.remove_suffix(1);
      if (fenced && all.ends_with("```")) all.remove_suffix(3);
      send_arguments(trim_right(all).size(), out);
    }
    in_call = fence_open = fenced = false;
    header.clear();
    args.clear();
    args_sent = 0;
  }

  // Qwen3's body seen whole (the incremental header scan did not match):
  // a call if it is an object with a name, else its text is content.
  void qwen_whole_body(std::vector<ReplyEvent>& out) {
    const auto body = nlohmann::ordered_json::parse(header, nullptr, false);
    if (body.is_object() && body.contains("name") && body["name"].is_string()) {
      announce(make_id(), body["name"].get<std::string>(), out);
      const auto& a =
          body.contains("arguments") ? body["arguments"] : nlohmann::ordered_json::object();
      args = a.is_string() ? a.get<std::string>()
                           : a.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
      send_arguments(args.size(), out);
    } else {
      mode = Mode::kContent;
      text(header, out, false);
    }
    header.clear();
  }

  void announce_named(std::vector<ReplyEvent>& out) {
    const std::string spelled(trim(header));
    if (format.tools == ToolSyntax::kKimi) {
      // functions.NAME:IDX is the id; the name sits between.
      std::string_view name = spelled;
      if (name.starts_with("functions.")) name.remove_prefix(10);
      if (const size_t colon = name.rfind(':'); colon != std::string_view::npos)
        name = name.substr(0, colon);
      announce(spelled, std::string(name), out);
    } else {
      announce(make_id(), spelled, out);
    }
    header.clear();
  }

  // Qwen3: {"name": "NAME", "arguments": — the name once its string closes.
  void qwen_header(std::vector<ReplyEvent>& out) {
    size_t at = 0;
    auto skip = [&] {
      while (at < header.size() && is_space(header[at])) ++at;
    };
    auto expect = [&](std::string_view s) {
      skip();
      if (header.compare(at, s.size(), s) != 0) return false;
      at += s.size();
      return true;
    };
    if (!expect("{") || !expect("\"name\"") || !expect(":")) return;
    skip();
    if (at >= header.size() || header[at] != '"') return;
    size_t end = at + 1;
    while (end < header.size() && header[end] != '"') end += header[end] == '\\' ? 2 : 1;
    if (end >= header.size()) return;
    const auto name = nlohmann::json::parse(header.substr(at, end + 1 - at), nullptr, false);
    at = end + 1;
    if (!name.is_string() || !expect(",") || !expect("\"arguments\"") || !expect(":")) return;
    skip();
    if (at >= header.size()) return;  // the arguments have not begun
    const std::string rest = header.substr(at);
    header.clear();
    announce(make_id(), name.get<std::string>(), out);
    mode = Mode::kArguments;
    arguments(rest, out);
  }

  void bytes(std::string_view b, std::vector<ReplyEvent>& out) {
    switch (mode) {
      case Mode::kContent:
      case Mode::kReasoning:
        return text(b, out, false);
      case Mode::kSection:
        return;  // between calls: only markers matter
      case Mode::kHeader:
        header.append(b);
        if (format.tools == ToolSyntax::kQwen3) qwen_header(out);
        return;
      case Mode::kName: {
        header.append(b);
        const size_t newline = header.find('\n');
        if (newline == std::string::npos) return;
        const std::string rest = header.substr(newline + 1);
        header.resize(newline);
        announce_named(out);
        mode = Mode::kArguments;
        fence_open = true;
        return arguments(rest, out);
      }
      case Mode::kArguments:
        return arguments(b, out);
    }
  }

  void flush_text(std::vector<ReplyEvent>& out) {
    if ((mode == Mode::kContent || mode == Mode::kReasoning) && !pending.empty())
      text("", out, true);
  }

  void push(TokenId id, std::vector<ReplyEvent>& out) {
    if (format.tools == ToolSyntax::kXtml) return xtml_push(id, out);
    const bool texting = mode == Mode::kContent || mode == Mode::kReasoning;
    if (format.thinks() && texting) {
      if (id == *format.think_open || id == *format.think_close) {
        flush_text(out);
        mode = id == *format.think_open ? Mode::kReasoning : Mode::kContent;
        return;
      }
    }
    if (format.tools != ToolSyntax::kNone && mode != Mode::kReasoning && marker(id, out)) return;
    if (tok.is_special(id)) return;
    std::string piece;
    try {
      piece = tok.token_bytes(id);
    } catch (const Error&) {
      return;  // an id the vocabulary lacks carries no text
    }
    bytes(piece, out);
  }

  // Handles `id` when it is a tool marker; false when it is not one.
  bool marker(TokenId id, std::vector<ReplyEvent>& out) {
    const auto is = [&](const std::optional<TokenId>& m) { return m && *m == id; };
    const bool qwen = format.tools == ToolSyntax::kQwen3;
    if (is(format.section_open) && mode == Mode::kContent) {
      flush_text(out);
      mode = Mode::kSection;
      return true;
    }
    if (is(format.call_open) && (mode == Mode::kContent || mode == Mode::kSection)) {
      flush_text(out);
      mode = Mode::kHeader;
      header.clear();
      return true;
    }
    if (is(format.separator) && mode == Mode::kHeader) {
      const bool v3 = format.tools == ToolSyntax::kDeepSeekV3 && trim(header) == "function";
      if (v3) {
        header.clear();
        mode = Mode::kName;
      } else {
        announce_named(out);
        mode = Mode::kArguments;
      }
      return true;
    }
    if (is(format.call_close) && mode != Mode::kContent && mode != Mode::kSection) {
      close_call(out);
      mode = qwen ? Mode::kContent : Mode::kSection;
      return true;
    }
    if (is(format.section_close) && mode != Mode::kContent) {
      close_call(out);
      mode = Mode::kContent;
      return true;
    }
    return false;
  }

  // Kimi K3: the element stack, driven by <|open|>, <|close|> and <|sep|>
  // ids only; the bytes between an opener (closer) and <|sep|> are its tag.
  enum class XtmlTag { kNone, kOpening, kClosing } xtml_tag = XtmlTag::kNone;
  std::vector<std::string> elements;
  std::string value;  // the open argument's (or raw json's) bytes
  std::string argument_key, argument_type;
  bool arguments_begun = false, raw_arguments = false;

  void xtml_push(TokenId id, std::vector<ReplyEvent>& out) {
    if (id == *format.section_open || id == *format.section_close) {
      flush_text(out);
      xtml_tag = id == *format.section_open ? XtmlTag::kOpening : XtmlTag::kClosing;
      header.clear();
      return;
    }
    if (id == *format.separator) {
      if (xtml_tag == XtmlTag::kOpening) xtml_opened(out);
      if (xtml_tag == XtmlTag::kClosing) xtml_closed(out);
      xtml_tag = XtmlTag::kNone;
      return;
    }
    if (tok.is_special(id)) return;
    std::string piece;
    try {
      piece = tok.token_bytes(id);
    } catch (const Error&) {
      return;
    }
    if (xtml_tag != XtmlTag::kNone) {
      header += piece;
    } else if (mode == Mode::kArguments) {
      value += piece;
    } else {
      bytes(piece, out);
    }
  }

  // key="value" pairs of an opening tag, &quot; and &amp; undone.
  static std::string attribute(std::string_view tag, std::string_view key) {
    const std::string needle = fmt::format(" {}=\"", key);
    const size_t at = tag.find(needle);
    if (at == std::string_view::npos) return "";
    const size_t begin = at + needle.size();
    const size_t end = tag.find('"', begin);
    std::string raw(tag.substr(begin, end == std::string_view::npos ? end : end - begin));
    std::string out;
    for (size_t i = 0; i < raw.size(); ++i) {
      if (raw.compare(i, 6, "&quot;") == 0) {
        out += '"';
        i += 5;
      } else if (raw.compare(i, 5, "&amp;") == 0) {
        out += '&';
        i += 4;
      } else {
        out += raw[i];
      }
    }
    return out;
  }

  void xtml_mode() {
    const std::string inner = elements.empty() ? "" : elements.back();
    if (inner == "think")
      mode = Mode::kReasoning;
    else if (inner == "argument" || inner == "json")
      mode = in_call ? Mode::kArguments : Mode::kSection;
    else if (inner == "tools" || inner == "call")
      mode = Mode::kSection;
    else
      mode = Mode::kContent;
  }

  void xtml_opened(std::vector<ReplyEvent>& out) {
    const std::string_view tag = trim(header);
    const std::string name(tag.substr(0, tag.find(' ')));
    if (name == "call") {
      announce(make_id(), attribute(tag, "tool"), out);
      arguments_begun = raw_arguments = false;
    } else if (name == "argument" || name == "json") {
      argument_key = attribute(tag, "key");
      argument_type = attribute(tag, "type");
      raw_arguments = name == "json";
      value.clear();
    }
    elements.push_back(name);
    xtml_mode();
    header.clear();
  }

  void xtml_closed(std::vector<ReplyEvent>& out) {
    const std::string name(trim(header));
    header.clear();
    const auto it = std::find(elements.rbegin(), elements.rend(), name);
    if (it == elements.rend()) return;  // closes nothing that is open
    elements.erase(std::prev(it.base()), elements.end());
    if (in_call && (name == "argument" || name == "json")) end_argument(out);
    if (in_call && name == "call") end_call(out);
    xtml_mode();
  }

  void end_argument(std::vector<ReplyEvent>& out) {
    const std::string text = tokenizer::repair_utf8(value);
    value.clear();
    if (raw_arguments) {
      args = text;
    } else {
      const std::string_view typed = trim(text);
      const bool literal =
          argument_type != "string" && !nlohmann::json::parse(typed, nullptr, false).is_discarded();
      args =
          fmt::format("{}{}:{}", arguments_begun ? "," : "{", nlohmann::json(argument_key).dump(),
                      literal ? std::string(typed) : nlohmann::json(text).dump());
    }
    arguments_begun = true;
    args_sent = 0;
    send_arguments(args.size(), out);
  }

  void end_call(std::vector<ReplyEvent>& out) {
    if (mode == Mode::kArguments) end_argument(out);
    args = raw_arguments ? "" : arguments_begun ? "}" : "{}";
    args_sent = 0;
    send_arguments(args.size(), out);
    in_call = false;
  }

  void finish(std::vector<ReplyEvent>& out) {
    flush_text(out);
    if (format.tools == ToolSyntax::kXtml) {
      if (in_call) end_call(out);
    } else if (mode != Mode::kContent && mode != Mode::kReasoning && mode != Mode::kSection) {
      close_call(out);
    }
    // Whitespace left at the end is content only in a reply without calls.
    if (!held_space.empty() && reply.tool_calls.empty()) {
      reply.content += held_space;
      out.push_back({ReplyEvent::Kind::kContent, std::move(held_space), 0, {}, {}});
    }
    held_space.clear();
  }
};

ReplyParser::ReplyParser(const tokenizer::Tokenizer& tokenizer, ReplyFormat format,
                         ReplyOptions options)
    : state_(std::make_unique<State>(tokenizer, std::move(format), options)) {}
ReplyParser::~ReplyParser() = default;
ReplyParser::ReplyParser(ReplyParser&&) noexcept = default;

void ReplyParser::push(TokenId id, std::vector<ReplyEvent>& events) {
  state_->push(id, events);
}
void ReplyParser::finish(std::vector<ReplyEvent>& events) {
  state_->finish(events);
}
const Reply& ReplyParser::reply() const {
  return state_->reply;
}

Reply parse_reply(const tokenizer::Tokenizer& tokenizer, const ReplyFormat& format,
                  const std::vector<TokenId>& ids, ReplyOptions options) {
  ReplyParser parser(tokenizer, format, options);
  std::vector<ReplyEvent> events;
  for (TokenId id : ids) parser.push(id, events);
  parser.finish(events);
  return parser.reply();
}

}  // namespace sluice::chat
