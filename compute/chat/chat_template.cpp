// compute/chat/chat_template.cpp: parsing and rendering behind
// chat_template.h, the Hugging Face context, and the provenance-respecting
// tokenization of a rendered prompt. Content text is only ever passed to
// Tokenizer::encode, never to encode_with_specials.
#include "compute/chat/chat_template.h"

#include <fmt/format.h>

#include <unordered_map>

#include "compute/chat/renderer.h"
#include "compute/chat/template_ast.h"

namespace sluice::chat {

struct Program {
  Body body;
};

namespace {

// "line N: what" from the lexer and parser, split back into its parts.
std::pair<int, std::string> split_line(const std::string& message) {
  int line = 0;
  if (message.rfind("line ", 0) == 0) {
    const size_t colon = message.find(": ");
    if (colon != std::string::npos) {
      try {
        line = std::stoi(message.substr(5, colon - 5));
        return {line, message.substr(colon + 2)};
      } catch (const std::exception&) {
      }
    }
  }
  return {line, message};
}

void visit(const Expr* e, const std::function<void(const Expr&)>& fn) {
  if (!e) return;
  fn(*e);
  for (const auto& a : e->args) visit(a.get(), fn);
  for (const auto& [k, a] : e->kwargs) visit(a.get(), fn);
}

void visit(const Body& body, const std::function<void(const Expr&)>& fn) {
  for (const NodePtr& n : body) {
    visit(n->expr.get(), fn);
    visit(n->condition.get(), fn);
    visit(n->filter.get(), fn);
    for (const auto& [c, b] : n->branches) {
      visit(c.get(), fn);
      visit(b, fn);
    }
    for (const auto& [k, e] : n->params) visit(e.get(), fn);
    visit(n->body, fn);
    visit(n->else_body, fn);
  }
}

// Whether `e` reads a field named `attribute`: x.attribute or x['attribute'].
bool reads_field(const Expr* e, std::string_view attribute) {
  if (!e) return false;
  if (e->kind == Expr::Kind::kAttribute) return e->name == attribute;
  if (e->kind == Expr::Kind::kItem && e->args[1]->kind == Expr::Kind::kLiteral &&
      e->args[1]->value.is_string()) {
    return e->args[1]->value.str() == attribute;
  }
  return false;
}

bool any_expr(const Program& p, const std::function<bool(const Expr&)>& pred) {
  bool found = false;
  visit(p.body, [&](const Expr& e) { found = found || pred(e); });
  return found;
}

}  // namespace

std::string Rendered::text() const {
  std::string out;
  for (const Segment& s : segments) out += s.text;
  return out;
}

ChatTemplate ChatTemplate::parse(std::string_view source, std::string name) {
  ChatTemplate t;
  t.name_ = std::move(name);
  auto program = std::make_shared<Program>();
  try {
    program->body = chat::parse(source);
  } catch (const EvalError& e) {
    auto [line, what] = split_line(e.what());
    throw ChatTemplateError(fmt::format("chat template {} line {}: {}", t.name_, line, what), line,
                            false, what);
  }
  t.program_ = std::move(program);
  return t;
}

Rendered ChatTemplate::render(const ChatInput& input, const RenderLimits& limits) const {
  auto root = std::make_shared<Scope>();
  add_globals(*root);
  if (!input.messages.is_array()) throw Error("chat: messages must be a JSON array");
  try {
    root->set("messages", from_json(input.messages, true));
    root->set("tools", from_json(input.tools, true));
    for (const auto& [k, v] : input.special_tokens.items()) root->set(k, from_json(v, false));
    for (const auto& [k, v] : input.extra.items()) root->set(k, from_json(v, true));
  } catch (const EvalError& e) {
    fail("chat: the messages, tools or template arguments: {}", e.what());
  }
  root->set("documents", Value::none());
  root->set("add_generation_prompt", Value(input.add_generation_prompt));
  auto top = std::make_shared<Scope>();
  top->parent = root;

  Renderer renderer(top, Limits{limits.max_output_bytes, limits.max_call_depth, limits.max_steps});
  Text out;
  try {
    renderer.render(program_->body, out);
  } catch (const EvalError& e) {
    throw ChatTemplateError(
        fmt::format("chat template {} line {}: {}", name_, renderer.line(), e.what()),
        renderer.line(), e.raised, e.what());
  }
  Rendered rendered;
  const std::string& s = out.str();
  for (size_t i = 0; i < s.size();) {
    const bool content = out.tainted_at(i);
    size_t j = i + 1;
    while (j < s.size() && out.tainted_at(j) == content) ++j;
    rendered.segments.push_back({s.substr(i, j - i), content});
    i = j;
  }
  return rendered;
}

bool ChatTemplate::tests_none_on(std::string_view attribute) const {
  return any_expr(*program_, [&](const Expr& e) {
    return e.kind == Expr::Kind::kTest && e.name == "none" &&
           reads_field(e.args[0].get(), attribute);
  });
}

bool ChatTemplate::filters_attribute(std::string_view attribute, std::string_view filter) const {
  return any_expr(*program_, [&](const Expr& e) {
    return e.kind == Expr::Kind::kFilter && e.name == filter &&
           reads_field(e.args[0].get(), attribute);
  });
}

bool ChatTemplate::tests_string_on(std::string_view attribute) const {
  return any_expr(*program_, [&](const Expr& e) {
    return e.kind == Expr::Kind::kTest && e.name == "string" &&
           reads_field(e.args[0].get(), attribute);
  });
}

nlohmann::ordered_json special_tokens_from_config(const nlohmann::ordered_json& config) {
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  if (!config.is_object()) return out;
  for (const char* key : {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token",
                          "cls_token", "mask_token"}) {
    auto it = config.find(key);
    if (it == config.end()) continue;
    if (it->is_string()) out[key] = *it;
    if (it->is_object() && it->contains("content") && (*it)["content"].is_string())
      out[key] = (*it)["content"];
  }
  if (auto it = config.find("additional_special_tokens"); it != config.end() && it->is_array()) {
    nlohmann::ordered_json list = nlohmann::ordered_json::array();
    for (const auto& t : *it) {
      if (t.is_string())
        list.push_back(t);
      else if (t.is_object() && t.contains("content") && t["content"].is_string())
        list.push_back(t["content"]);
    }
    out["additional_special_tokens"] = list;
  }
  return out;
}

std::vector<tokenizer::TokenId> tokenize(const tokenizer::Tokenizer& tok,
                                         const Rendered& rendered) {
  using tokenizer::TokenId;
  // An id is a control token when its text, read as markup, is that one id
  // but read as content is not: an added token, whatever its special flag.
  std::unordered_map<TokenId, bool> control_cache;
  auto is_control = [&](TokenId id) {
    auto [it, fresh] = control_cache.try_emplace(id, false);
    if (fresh) {
      const std::string& bytes = tok.token_bytes(id);
      const auto plain = tok.encode(bytes);
      const auto marked = tok.encode_with_specials(bytes);
      it->second = marked.size() == 1 && marked[0] == id && !(plain.size() == 1 && plain[0] == id);
    }
    return it->second;
  };
  std::vector<TokenId> ids;
  std::string pending;  // ordinary text since the last control token
  auto flush = [&] {
    if (pending.empty()) return;
    const auto part = tok.encode(pending);
    ids.insert(ids.end(), part.begin(), part.end());
    pending.clear();
  };
  for (const Segment& seg : rendered.segments) {
    if (seg.content) {
      pending += seg.text;
      continue;
    }
    size_t pos = 0;
    for (TokenId id : tok.encode_with_specials(seg.text)) {
      if (!is_control(id)) continue;
      const std::string& bytes = tok.token_bytes(id);
      const size_t at = seg.text.find(bytes, pos);
      if (at == std::string::npos) {
        fail("chat template: control token {} ({}) matched in markup but not found in it", id,
             bytes);
      }
      pending.append(seg.text, pos, at - pos);
      flush();
      ids.push_back(id);
      pos = at + bytes.size();
    }
    pending.append(seg.text, pos, std::string::npos);
  }
  flush();
  return ids;
}

}  // namespace sluice::chat
