// compute/serve/job.cpp: a job's event queue and the reply stream. Content
// passes the stop filter; reasoning and tool calls are never cut by it.
#include "compute/serve/job.h"

#include <algorithm>

namespace sluice::serve {

Job::Event Job::next() {
  std::unique_lock lock(mutex_);
  ready_.wait(lock, [this] { return !events_.empty(); });
  Event event = std::move(events_.front());
  events_.pop_front();
  return event;
}

void Job::push(Event event) {
  {
    const std::lock_guard lock(mutex_);
    events_.push_back(std::move(event));
  }
  ready_.notify_one();
}

ReplyStream::ReplyStream(Job& job, const tokenizer::Tokenizer& tokenizer)
    : job_(job), decoder_(tokenizer, true), filter_(job.spec().settings.stop) {
  const JobSpec& spec = job.spec();
  if (spec.reply_format)
    parser_.emplace(tokenizer, *spec.reply_format, chat::ReplyOptions{spec.in_reasoning, 0});
}

void ReplyStream::push(int32_t token) {
  if (!parser_) {
    content(decoder_.push(token));
    return;
  }
  events_.clear();
  parser_->push(token, events_);
  if (std::any_of(events_.begin(), events_.end(), [](const chat::ReplyEvent& e) {
        return e.kind == chat::ReplyEvent::Kind::kReasoning;
      }))
    ++job_.result().reasoning_tokens;
  deliver();
}

void ReplyStream::finish() {
  if (parser_) {
    events_.clear();
    parser_->finish(events_);
    deliver();
  } else {
    content(decoder_.finish());
  }
  send(Job::Event::Kind::kText, filter_.finish());
}

void ReplyStream::content(const std::string& text) {
  send(Job::Event::Kind::kText, filter_.push(text));
}

void ReplyStream::send(Job::Event::Kind kind, const std::string& text) {
  if (!text.empty()) job_.push({kind, text});
}

void ReplyStream::deliver() {
  for (const auto& e : events_) {
    switch (e.kind) {
      case chat::ReplyEvent::Kind::kContent:
        content(e.text);
        break;
      case chat::ReplyEvent::Kind::kReasoning:
        send(Job::Event::Kind::kReasoning, e.text);
        break;
      case chat::ReplyEvent::Kind::kToolCall:
        job_.result().tool_calls = true;
        job_.push({Job::Event::Kind::kToolCall, {}, e.tool_index, e.id, e.name});
        break;
      case chat::ReplyEvent::Kind::kToolArguments:
        if (!e.text.empty())
          job_.push({Job::Event::Kind::kToolArguments, e.text, e.tool_index, {}, {}});
        break;
    }
  }
}

}  // namespace sluice::serve
