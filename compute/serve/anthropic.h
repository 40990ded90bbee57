// compute/serve/anthropic.h: the Anthropic Messages API at the edges of the
// chat-completions path. A /v1/messages body is checked field by field (each
// refusal names the Messages field) and turned into the ChatRequest it means;
// the reply, one message or its named SSE events, is built from the same job
// events a chat completion streams. Nothing here renders or generates.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "compute/serve/job.h"
#include "compute/serve/request.h"

namespace sluice::serve {

// The anthropic-version this server speaks.
inline constexpr const char* kAnthropicVersion = "2023-06-01";

struct MessagesRequest {
  ChatRequest chat;       // what chat completions generates from
  bool thinking = false;  // thinking {"type": "enabled"}
};

// Throws ApiError 400 naming the field. `count_only` is the body of
// /v1/messages/count_tokens, which has no max_tokens.
MessagesRequest parse_messages_request(const json& body, uint64_t default_seed, bool count_only);

// Refuses (ApiError 400 naming the header) a version other than the ones
// this server speaks; an absent header is taken as kAnthropicVersion.
void check_anthropic_version(const std::string* version);

// A message as the Messages API sends it, built from a job's events in
// order: each change between thinking, text and a tool call closes one
// content block and opens the next.
class MessageBuilder {
 public:
  // `tool_id` makes a fresh tool_use id.
  MessageBuilder(std::string id, std::string model, std::function<std::string()> tool_id);

  // Streaming: message_start (the prompt's usage is known once the job has
  // produced its first event) and a ping.
  std::string start(const JobResult& result) const;
  // Adds the event; returns the SSE events it makes (possibly none).
  std::string push(const Job::Event& event);
  // Closes the open block; message_delta and message_stop.
  std::string finish(const JobResult& result);
  // The whole message, for a blocking reply.
  json message(const JobResult& result) const;

 private:
  enum class Block { kNone, kThinking, kText, kToolUse };
  std::string open(Block kind, json content_block);
  std::string close();
  json usage(const JobResult& result) const;
  std::string stop_reason(const JobResult& result) const;

  std::string id_, model_;
  std::function<std::string()> tool_id_;
  json blocks_ = json::array();           // as sent so far
  std::vector<std::string> tool_inputs_;  // each tool_use block's JSON text
  Block open_ = Block::kNone;
};

// One named SSE event.
std::string sse_event(const char* name, const json& data);

}  // namespace sluice::serve
