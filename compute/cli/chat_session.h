// compute/cli/chat_session.h: one conversation with a loaded engine — its
// messages, the prompt ids the model has seen, and the tokens the engine's
// state holds, so that a turn prefills only what is new. It prints nothing;
// the chat command (cmd_chat.cpp) shows what it reports.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "compute/chat/chat_format.h"
#include "compute/chat/reply_parser.h"
#include "compute/chat/token_grammar.h"
#include "compute/model/engine.h"
#include "compute/tokenizer/tokenizer.h"
#include "compute/vision/prompt_images.h"

namespace sluice::cli {

struct TurnOptions {
  uint32_t max_tokens = 512;
  SamplingParams sampling;
  std::shared_ptr<const chat::JsonGrammar> grammar;  // null: free text
};

struct TurnResult {
  uint32_t prompt_tokens = 0;
  uint32_t reused = 0;     // prompt tokens already in the engine's state
  uint32_t prefilled = 0;  // prompt tokens run through the model this turn
  GenerationStats stats;
  chat::Reply reply;
  bool json_valid = false;  // with a grammar: the content is one value of it
};

class ChatSession {
 public:
  // `extra` goes to the chat format as keyword arguments (enable_thinking).
  // `format` and `tokenizer` must outlive the session.
  ChatSession(Engine& engine, const tokenizer::Tokenizer& tokenizer, const chat::ChatFormat& format,
              nlohmann::ordered_json extra);

  // Attaches the image file to the next user message (its content becomes
  // the images, then the text). Throws Error naming the file when it is not
  // an image, or the model when it has no vision tower.
  void attach_image(const std::string& path);
  size_t attached_images() const { return attached_.size(); }
  // Images the vision tower has encoded in this conversation: each image
  // once, however many turns (or resets) later it is prefilled again.
  uint64_t tower_runs() const { return encoder_ ? encoder_->tower_runs() : 0; }

  // Adds the user's message (with the attached images), renders, prefills what the state lacks and
  // generates the reply, which is added to the conversation. `on_event`
  // sees the reply as it streams; `keep_going` is asked before each prefill
  // chunk and after each token (false stops the reply; what came of it is
  // kept). A prompt that no longer fits the context is refused (Error) and
  // leaves the conversation as it was.
  TurnResult turn(const std::string& user_text, const TurnOptions& options,
                  const std::function<void(const chat::ReplyEvent&)>& on_event,
                  const std::function<bool()>& keep_going);

  // The messages so far (the system message first, when set).
  const nlohmann::ordered_json& messages() const { return messages_; }
  // Writes the messages to `path` (a JSON array, what `sluice template
  // --messages` reads) and the engine's state to `path`.session
  // (compute/model/session_file.h), after running the reply's last token.
  void save(const std::string& path);
  // Starts again from the messages in `path` (checked: Error naming the file
  // and index). With `path`.session from this container, the engine's state
  // is restored too, so the next turn prefills only its new tokens; without
  // it the state is kept and a prefix it shares is not prefilled again.
  // Returns whether a state was restored.
  bool load(const std::string& path);
  void set_system(const std::string& text);
  // Only the system message remains.
  void reset();

  // The stop ids: the config's end-of-sequence ids, the tokenizer's eos and
  // the end of turn (<|im_end|>, <|eot_id|>, [EOT]) when they are added tokens.
  const std::vector<int32_t>& stop_ids() const { return stop_ids_; }
  const chat::ReplyFormat& format() const { return format_; }

 private:
  std::vector<int32_t> prompt_ids(const chat::Rendered& rendered) const;
  nlohmann::ordered_json assistant_message(const chat::Reply& reply) const;
  bool prompt_opens_reasoning(const std::vector<int32_t>& ids) const;
  // Renders `messages`; their image parts are decoded into `images` (not encoded).
  chat::Rendered render(const nlohmann::ordered_json& messages, PromptImageSet& images) const;
  // The projector rows of `image`, encoded at its first use only.
  const std::vector<float>& image_rows(const PromptImage& image);

  Engine& engine_;
  const tokenizer::Tokenizer& tokenizer_;
  const chat::ChatFormat& chat_format_;
  nlohmann::ordered_json extra_;
  nlohmann::ordered_json messages_ = nlohmann::ordered_json::array();
  chat::ReplyFormat format_;
  std::vector<int32_t> stop_ids_;
  std::shared_ptr<const chat::TokenTrie> trie_;  // built on the first constrained turn
  std::unique_ptr<ImageEncoder> encoder_;        // null: the model has no vision tower
  std::vector<nlohmann::ordered_json> attached_;  // image parts for the next user message
  std::map<ImageDigest, std::vector<float>> encoded_;

  // What the model saw last turn and wrote: its prompt ids plus the reply's
  // (without the stop token), and the same as text. A next prompt whose text extends it reuses
  // these ids (the reply's own tokens, not a re-tokenization of its text).
  // One media pad stands for each image; seen_positions_ has them expanded,
  // as the engine's state holds them.
  std::vector<int32_t> seen_ids_;
  std::vector<int32_t> seen_positions_;
  std::string seen_text_;
};

}  // namespace sluice::cli
