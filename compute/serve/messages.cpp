// compute/serve/messages.cpp: the Anthropic routes. A Messages body becomes
// a chat request (anthropic.h), goes through the same chat_job and submit as
// chat completions, and its job's events come back as one message or as the
// API's named SSE events. Errors take the API's shape (api_error.h).
#include <httplib.h>

#include "compute/serve/anthropic.h"
#include "compute/serve/api_error.h"
#include "compute/serve/server.h"

namespace sluice::serve {
namespace {

void check_version(const httplib::Request& req) {
  const std::string version = req.get_header_value("anthropic-version");
  check_anthropic_version(req.has_header("anthropic-version") ? &version : nullptr);
}

}  // namespace

void Server::messages(const httplib::Request& req, httplib::Response& res) {
  check_version(req);
  const MessagesRequest request =
      parse_messages_request(parse_body(req.body), random_seed(), false);
  if (!chat_format_)
    throw ApiError(400, "invalid_request_error",
                   "the model has no chat template (tokenizer.chat_template is null in its "
                   "manifest); only /v1/completions generates");
  if (request.thinking && !chat_format_->thinks())
    bad_param("thinking", "this model has no thinking mode (its tokenizer has no think markers)");
  const bool stream = request.chat.settings.stream;
  const std::shared_ptr<Job> job = submit(req, res, chat_job(request.chat), true);
  auto builder = std::make_shared<MessageBuilder>(random_id("msg_"), options_.model_id,
                                                  [this] { return random_id("toolu_"); });

  if (!stream) {
    for (;;) {
      const Job::Event event = job->next();
      if (event.kind == Job::Event::Kind::kError)
        throw ApiError(500, "api_error", "the engine failed: " + event.text);
      if (event.kind == Job::Event::Kind::kDone) break;
      builder->push(event);
    }
    res.set_content(
        builder->message(job->result()).dump(-1, ' ', false, json::error_handler_t::replace),
        "application/json");
    return;
  }

  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider("text/event-stream", [job, builder](size_t,
                                                                       httplib::DataSink& sink) {
    bool open = true;
    auto write = [&](const std::string& text) {
      if (open && !text.empty() && !sink.write(text.data(), text.size())) {
        open = false;
        job->cancel();
      }
    };
    // message_start carries the prompt's usage, cached tokens included,
    // which the job knows once it has started: after its first event.
    bool started = false;
    for (;;) {
      const Job::Event event = job->next();
      if (!started && event.kind != Job::Event::Kind::kError) {
        write(builder->start(job->result()));
        started = true;
      }
      if (event.kind == Job::Event::Kind::kError) {
        write(sse_event(
            "error",
            ApiError(500, "api_error", "the engine failed: " + event.text).body(Api::kAnthropic)));
        break;
      }
      if (event.kind == Job::Event::Kind::kDone) {
        if (job->result().finish_reason != "cancelled") write(builder->finish(job->result()));
        break;
      }
      write(builder->push(event));
    }
    sink.done();
    return true;
  });
}

void Server::count_tokens(const httplib::Request& req, httplib::Response& res) {
  check_version(req);
  const MessagesRequest request = parse_messages_request(parse_body(req.body), random_seed(), true);
  if (!chat_format_)
    throw ApiError(400, "invalid_request_error",
                   "the model has no chat template (tokenizer.chat_template is null in its "
                   "manifest)");
  JobSpec spec;
  render_chat(request.chat, spec);
  res.set_content(json{{"input_tokens", spec.prompt.size()}}.dump(), "application/json");
}

}  // namespace sluice::serve
