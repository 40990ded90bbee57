// compute/cli/chat_session.cpp: a turn of the conversation — render, find
// what the engine's state already holds, prefill the rest, generate with the
// reply parser (and the JSON constraint) listening. The engine's default
// sequence is only ever extended: a prompt that does not extend it starts
// the sequence from zero.
#include "compute/cli/chat_session.h"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "compute/model/session_file.h"
#include "proto/error.h"

namespace sluice::cli {

using json = nlohmann::ordered_json;

namespace {

// The part of `rendered` after its first `offset` bytes, provenance kept.
chat::Rendered tail_of(const chat::Rendered& rendered, size_t offset) {
  chat::Rendered out;
  size_t at = 0;
  for (const chat::Segment& s : rendered.segments) {
    const size_t end = at + s.text.size();
    if (end > offset)
      out.segments.push_back({s.text.substr(offset > at ? offset - at : 0), s.content});
    at = end;
  }
  return out;
}

// `tokens` with each image's run of positions back to its one media pad.
std::vector<int32_t> one_pad_per_image(std::span<const int32_t> tokens,
                                       std::span<const MediaRun> media) {
  std::vector<int32_t> out;
  size_t next = 0;
  for (size_t at = 0; at < tokens.size(); ++at) {
    if (next < media.size() && at == media[next].first) {
      out.push_back(tokens[at]);
      at += media[next++].length - 1;
      continue;
    }
    out.push_back(tokens[at]);
  }
  return out;
}

void check_messages(const json& messages) {
  if (!messages.is_array()) fail("the conversation must be a JSON array of messages");
  for (size_t i = 0; i < messages.size(); ++i) {
    const json& m = messages[i];
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string()) {
      fail("messages[{}]: expected an object with a string \"role\"", i);
    }
  }
}

}  // namespace

ChatSession::ChatSession(Engine& engine, const tokenizer::Tokenizer& tokenizer,
                         const chat::ChatFormat& format, json extra)
    : engine_(engine),
      tokenizer_(tokenizer),
      chat_format_(format),
      extra_(std::move(extra)),
      format_(format.reply_format()) {
  auto add_stop = [&](std::optional<int32_t> id) {
    if (id && std::find(stop_ids_.begin(), stop_ids_.end(), *id) == stop_ids_.end())
      stop_ids_.push_back(*id);
  };
  for (int32_t id : engine.config().eos_ids) add_stop(id);
  add_stop(tokenizer.eos_id());
  for (const char* end_of_turn : {"<|im_end|>", "<|eot_id|>", "[EOT]", "<|end_of_msg|>"}) {
    const auto id = tokenizer.token_to_id(end_of_turn);
    if (id && tokenizer.is_added(*id)) add_stop(id);
  }
  if (engine.config().vision)
    encoder_ = std::make_unique<ImageEncoder>(engine.container(), engine.config(), engine.exec());
}

void ChatSession::attach_image(const std::string& path) {
  if (!encoder_) {
    fail(
        "{}: the model has no vision tower (its config has no vision_config), so it cannot take "
        "the image {}",
        engine_.container().dir(), path);
  }
  attached_.push_back(image_file_part(path));
}

const std::vector<float>& ChatSession::image_rows(const PromptImage& image) {
  auto found = encoded_.find(image.digest);
  if (found == encoded_.end())
    found = encoded_.emplace(image.digest, encoder_->encode(image)).first;
  return found->second;
}

void ChatSession::set_system(const std::string& text) {
  const json system = {{"role", "system"}, {"content", text}};
  if (!messages_.empty() && messages_[0]["role"] == "system") {
    messages_[0] = system;
  } else {
    messages_.insert(messages_.begin(), system);
  }
  seen_ids_.clear();
  seen_positions_.clear();
  seen_text_.clear();
}

void ChatSession::reset() {
  json kept = json::array();
  if (!messages_.empty() && messages_[0]["role"] == "system") kept.push_back(messages_[0]);
  messages_ = std::move(kept);
  attached_.clear();
  seen_ids_.clear();
  seen_positions_.clear();
  seen_text_.clear();
}

void ChatSession::save(const std::string& path) {
  // The state lacks the reply's last token (the engine never runs it): run
  // it, so the saved state holds what the next prompt begins with.
  SequenceState& sequence = engine_.sequence();
  const auto held = sequence.tokens();
  if (seen_positions_.size() == held.size() + 1 &&
      std::equal(held.begin(), held.end(), seen_positions_.begin()) &&
      sequence.position() < sequence.context()) {
    std::vector<float> logits(engine_.config().vocab);
    engine_.prefill(sequence, std::span<const int32_t>(&seen_positions_.back(), 1), logits);
  }
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << messages_.dump(2, ' ', false, json::error_handler_t::replace) << "\n";
  out.close();
  if (!out) fail("{}: cannot write the conversation", path);
  save_session(path + ".session", engine_.container().identity(), sequence);
}

bool ChatSession::load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot open the file", path);
  const json messages = json::parse(in, nullptr, false);
  if (messages.is_discarded()) fail("{}: not valid JSON", path);
  try {
    check_messages(messages);
  } catch (const Error& e) {
    fail("{}: {}", path, e.what());
  }
  const std::string state_path = path + ".session";
  const bool restore = std::filesystem::exists(state_path);
  if (restore) {
    try {
      load_session(state_path, engine_.container().identity(), engine_.sequence());
    } catch (const Error&) {
      engine_.sequence().reset();
      throw;
    }
  }
  messages_ = messages;
  attached_.clear();
  seen_ids_.clear();
  seen_positions_.clear();
  seen_text_.clear();
  // A restored state is the last prompt and the reply's own tokens: when
  // they spell the conversation as rendered (each image's positions as its
  // one pad), the next prompt extends them.
  if (restore && messages_.size() >= 2 && messages_.back()["role"] == "assistant" &&
      messages_.back()["content"].is_string() && !messages_.back().contains("tool_calls")) {
    json before = messages_;
    before.erase(before.size() - 1);
    PromptImageSet images(engine_.config().vision.value_or(VisionConfig{}));
    const std::string text =
        render(before, images).text() + messages_.back()["content"].get<std::string>();
    const auto held = engine_.sequence().tokens();
    const std::vector<int32_t> ids = one_pad_per_image(held, engine_.sequence().media());
    if (tokenizer_.decode(ids) == text) {
      seen_ids_ = ids;
      seen_positions_.assign(held.begin(), held.end());
      seen_text_ = text;
    }
  }
  return restore;
}

chat::Rendered ChatSession::render(const json& messages, PromptImageSet& images) const {
  chat::ChatInput input;
  input.messages = messages;
  input.add_generation_prompt = true;
  input.extra = extra_;
  if (encoder_) input.images = images.resolver();
  return chat_format_.render(input);
}

std::vector<int32_t> ChatSession::prompt_ids(const chat::Rendered& rendered) const {
  const std::string text = rendered.text();
  if (!seen_text_.empty() && text.size() > seen_text_.size() && text.starts_with(seen_text_)) {
    std::vector<int32_t> ids = seen_ids_;
    const auto rest = chat_format_.tokenize(tail_of(rendered, seen_text_.size()));
    ids.insert(ids.end(), rest.begin(), rest.end());
    return ids;
  }
  return chat_format_.tokenize(rendered);
}

bool ChatSession::prompt_opens_reasoning(const std::vector<int32_t>& ids) const {
  return chat_format_.opens_reasoning(ids);
}

json ChatSession::assistant_message(const chat::Reply& reply) const {
  json m = {{"role", "assistant"}, {"content", reply.content}};
  if (!reply.tool_calls.empty()) {
    if (reply.content.empty()) m["content"] = nullptr;
    json calls = json::array();
    for (const auto& c : reply.tool_calls) {
      calls.push_back({{"id", c.id},
                       {"type", "function"},
                       {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
    }
    m["tool_calls"] = std::move(calls);
  }
  if (!reply.reasoning.empty()) m["reasoning_content"] = reply.reasoning;
  return m;
}

TurnResult ChatSession::turn(const std::string& user_text, const TurnOptions& options,
                             const std::function<void(const chat::ReplyEvent&)>& on_event,
                             const std::function<bool()>& keep_going) {
  json conversation = messages_;
  json content = user_text;
  if (!attached_.empty()) {
    content = json::array();
    for (const json& part : attached_) content.push_back(part);
    content.push_back({{"type", "text"}, {"text", user_text}});
  }
  conversation.push_back({{"role", "user"}, {"content", content}});
  PromptImageSet images(engine_.config().vision.value_or(VisionConfig{}));
  const chat::Rendered rendered = render(conversation, images);
  const std::vector<int32_t> ids = prompt_ids(rendered);
  // Each image's one pad becomes its positions, as the engine runs them.
  ExpandedPrompt prompt{ids, {}};
  if (encoder_) {
    prompt = expand_media(ids, static_cast<int32_t>(engine_.config().vision->media_pad_id),
                          images.images());
  }

  SequenceState& sequence = engine_.sequence();
  const uint32_t context = sequence.context();
  if (prompt.tokens.size() >= context) {
    fail(
        "the conversation is {} tokens, which leaves no room in the context of {} (/reset, or "
        "--ctx)",
        prompt.tokens.size(), context);
  }
  TurnResult result;
  result.prompt_tokens = static_cast<uint32_t>(prompt.tokens.size());
  if (!sequence.is_prefix_of(prompt.tokens, prompt.media)) sequence.reset();
  result.reused = sequence.position();
  result.prefilled = result.prompt_tokens - result.reused;
  const std::vector<float> media_rows = media_rows_from(
      prompt, result.reused, engine_.config().hidden,
      [&](size_t i) -> const std::vector<float>& { return image_rows(images.images()[i]); });
  sequence.note_media(media_from(prompt.media, result.reused));

  const bool in_reasoning = prompt_opens_reasoning(ids);
  chat::ReplyParser parser(tokenizer_, format_, {in_reasoning, 0});
  std::unique_ptr<chat::JsonConstraint> constraint;
  SamplingParams sampling = options.sampling;
  if (options.grammar) {
    if (!trie_) trie_ = std::make_shared<const chat::TokenTrie>(tokenizer_);
    constraint = std::make_unique<chat::JsonConstraint>(
        options.grammar, trie_, chat_format_.constraint_frame(ids, stop_ids_));
    sampling.constraint = constraint.get();
  }

  std::vector<int32_t> generated;
  std::vector<chat::ReplyEvent> events;
  auto deliver = [&] {
    for (const auto& e : events) on_event(e);
    events.clear();
  };
  const std::span<const int32_t> delta(prompt.tokens.data() + result.reused,
                                       prompt.tokens.size() - result.reused);
  result.stats = engine_.generate(
      sequence, delta, options.max_tokens, sampling, stop_ids_, false,
      [&](int32_t token, std::span<const float>) {
        generated.push_back(token);
        parser.push(token, events);
        deliver();
        return keep_going();
      },
      media_rows);
  parser.finish(events);
  deliver();
  result.reply = parser.reply();
  if (options.grammar) result.json_valid = chat::matches(options.grammar, result.reply.content);

  // The sequence now holds the prompt and every generated token but the last
  // (the engine never runs it), or less when the prefill was stopped.
  if (generated.empty() && result.stats.finish == FinishReason::kCancelled) {
    return result;  // stopped in the prefill: the user's message is not kept
  }
  messages_ = std::move(conversation);
  messages_.push_back(assistant_message(result.reply));
  attached_.clear();
  // The next render writes the reply as its content (made valid UTF-8) and
  // then the template's own end of turn. When the reply is plain text, that
  // content is the generated tokens less the stop token: keep those ids.
  std::vector<int32_t> reply_ids = generated;
  if (!reply_ids.empty() && std::count(stop_ids_.begin(), stop_ids_.end(), reply_ids.back())) {
    reply_ids.pop_back();
  }
  const bool plain = std::none_of(reply_ids.begin(), reply_ids.end(), [&](int32_t id) {
    return tokenizer_.is_added(id) || tokenizer_.is_special(id);
  });
  seen_ids_ = ids;
  seen_ids_.insert(seen_ids_.end(), reply_ids.begin(), reply_ids.end());
  seen_positions_ = prompt.tokens;
  seen_positions_.insert(seen_positions_.end(), reply_ids.begin(), reply_ids.end());
  seen_text_ = plain ? rendered.text() + tokenizer_.decode(reply_ids) : "";
  return result;
}

}  // namespace sluice::cli
