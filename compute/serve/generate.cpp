// compute/serve/generate.cpp: the OpenAI routes that generate, and what every
// generating route shares: a chat request rendered, tokenized and given its
// constraint (chat_job), then checked against the context and handed to the
// scheduler (submit). The reply here is one JSON body or an SSE stream shaped
// as OpenAI sends it (role first, one finish_reason, usage when asked, [DONE]).
#include <httplib.h>

#include <ctime>

#include "compute/chat/reply_parser.h"
#include "compute/chat/token_grammar.h"
#include "compute/serve/api_error.h"
#include "compute/serve/connection.h"
#include "compute/serve/server.h"
#include "proto/error.h"

namespace sluice::serve {
namespace {

// The field a normalisation error names ("messages[2].content[1]: ...").
std::string param_of(const std::string& message) {
  const size_t colon = message.find(": ");
  const std::string head = colon == std::string::npos ? "" : message.substr(0, colon);
  return head.starts_with("messages") && head.find(' ') == std::string::npos ? head : "messages";
}

json usage_json(const JobResult& r) {
  return {{"prompt_tokens", r.prompt_tokens},
          {"completion_tokens", r.completion_tokens},
          {"total_tokens", r.prompt_tokens + r.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", r.cached_tokens}}},
          {"completion_tokens_details", {{"reasoning_tokens", r.reasoning_tokens}}}};
}

// Engine figures of one request, beside OpenAI's fields.
json sluice_json(const JobResult& r) {
  const auto& e = r.experts;
  return {
      {"cached_tokens", r.cached_tokens},
      {"prefill_seconds", r.prefill_seconds},
      {"decode_seconds", r.decode_seconds},
      {"tokens_per_second", r.decode_seconds > 0 ? r.completion_tokens / r.decode_seconds : 0.0},
      {"experts",
       {{"requested", e.requests},
        {"hits", e.hits},
        {"hit_rate", e.requests ? double(e.hits) / double(e.requests) : 0.0},
        {"reads", e.reads},
        {"bytes_read", e.bytes_read}}}};
}

std::string dump(const json& value) {
  return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string sse(const json& value) {
  return "data: " + dump(value) + "\n\n";
}

// What the stream and the body share: the id, the names, and how a chunk or
// the final object looks for chat or legacy completions.
struct ReplyShape {
  std::string id;
  std::string model;
  int64_t created;
  bool chat;

  json chunk(json delta_or_text, json finish_reason, bool with_usage_field) const {
    json choice = {{"index", 0}};
    if (chat) {
      choice["delta"] = std::move(delta_or_text);
    } else {
      choice["text"] = std::move(delta_or_text);
    }
    choice["logprobs"] = nullptr;
    choice["finish_reason"] = std::move(finish_reason);
    json out = {{"id", id},
                {"object", chat ? "chat.completion.chunk" : "text_completion"},
                {"created", created},
                {"model", model},
                {"choices", json::array({choice})}};
    if (with_usage_field) out["usage"] = nullptr;
    return out;
  }

  json whole(const chat::Reply& reply, const JobResult& r) const {
    json choice = {{"index", 0}};
    if (chat) {
      json message = {
          {"role", "assistant"},
          {"content", reply.content.empty() && !reply.tool_calls.empty() ? json(nullptr)
                                                                         : json(reply.content)},
          {"refusal", nullptr}};
      if (!reply.reasoning.empty()) message["reasoning_content"] = reply.reasoning;
      if (!reply.tool_calls.empty()) {
        json calls = json::array();
        for (const auto& call : reply.tool_calls)
          calls.push_back({{"id", call.id},
                           {"type", "function"},
                           {"function", {{"name", call.name}, {"arguments", call.arguments}}}});
        message["tool_calls"] = calls;
      }
      choice["message"] = message;
    } else {
      choice["text"] = reply.content;
    }
    choice["logprobs"] = nullptr;
    choice["finish_reason"] = r.finish_reason;
    return {{"id", id},
            {"object", chat ? "chat.completion" : "text_completion"},
            {"created", created},
            {"model", model},
            {"choices", json::array({choice})},
            {"usage", usage_json(r)},
            {"sluice", sluice_json(r)}};
  }
};

ApiError engine_error(const std::string& message) {
  return ApiError(500, "server_error", "the engine failed: " + message, std::nullopt,
                  "engine_error");
}

}  // namespace

void Server::render_chat(const ChatRequest& request, JobSpec& spec) const {
  if (!chat_format_) {
    throw ApiError(400, "invalid_request_error",
                   "the model has no chat template (tokenizer.chat_template is null in its "
                   "manifest); use /v1/completions",
                   "messages");
  }
  chat::ChatInput input;
  input.messages = request.messages;
  input.tools = request.tools;
  input.tool_choice = request.tool_choice;
  input.response_format = request.response_format;
  input.add_generation_prompt = true;
  input.extra = request.template_kwargs;
  // Without a vision tower the resolver stays null and an image part is a
  // 400 naming it; with one, each part is decoded from its data: URL here,
  // on the HTTP thread, and encoded later by the engine's worker.
  const std::optional<VisionConfig>& vision = engine_.config().vision;
  PromptImageSet images(vision.value_or(VisionConfig{}));
  if (vision) input.images = images.resolver();
  try {
    const std::vector<int32_t> ids = chat_format_->tokenize(chat_format_->render(input));
    if (!vision) {
      spec.prompt = ids;
      return;
    }
    ExpandedPrompt expanded =
        expand_media(ids, static_cast<int32_t>(vision->media_pad_id), images.images());
    spec.prompt = std::move(expanded.tokens);
    spec.media = std::move(expanded.media);
    spec.images = std::move(images.images());
  } catch (const chat::ChatTemplateError& e) {
    // A template that raises says why in its own words (a role it does not
    // know, turns out of order): the client's request is at fault.
    throw ApiError(400, "invalid_request_error",
                   e.raised ? "the chat template refused the messages: " + e.reason : e.what(),
                   "messages");
  } catch (const Error& e) {
    throw ApiError(400, "invalid_request_error", e.what(), param_of(e.what()));
  }
}

std::shared_ptr<const chat::TokenGrammar> Server::tool_call_grammar(
    const ChatRequest& request, const chat::ConstraintOptions& frame) const {
  const json& choice = request.tool_choice;
  if (request.tools.is_null())
    bad_param("tool_choice", "a tool call is required but the request has no tools");
  const chat::ReplyFormat& format = chat_format_->reply_format();
  if (format.tools == chat::ToolSyntax::kNone)
    bad_param("tool_choice",
              "this model's tokenizer has no tool-call markers, so a tool call cannot be enforced");
  if (!request.response_format.is_null() && request.response_format.value("type", "") != "text")
    bad_param("response_format", "a required tool call (tool_choice) leaves no content to format");
  std::vector<chat::ToolSpec> tools;
  try {
    tools = chat::tool_specs(request.tools);
  } catch (const Error& e) {
    const std::string message = e.what();
    throw ApiError(400, "invalid_request_error", message, message.substr(0, message.find(": ")));
  }
  if (choice.is_object()) {
    const std::string name = choice["function"]["name"].get<std::string>();
    std::erase_if(tools, [&](const chat::ToolSpec& tool) { return tool.name != name; });
    if (tools.empty())
      bad_param("tool_choice.function.name", "no tool named '{}' among the request's tools", name);
  }
  return chat::tool_call_grammar(format, tools, request.parallel_tool_calls, frame);
}

std::shared_ptr<const chat::TokenGrammar> Server::lazy_tool_call_grammar(
    const ChatRequest& request, const chat::ConstraintOptions& frame) const {
  const chat::ReplyFormat& format = chat_format_->reply_format();
  if (!request.tools.is_array() || request.tools.empty() || format.tools == chat::ToolSyntax::kNone)
    return nullptr;
  std::vector<chat::ToolSpec> tools;
  try {
    // The model may never call a tool: one whose parameters are beyond the
    // schema subset only has its arguments held to a JSON object.
    tools = chat::tool_specs(request.tools, true);
  } catch (const Error& e) {
    const std::string message = e.what();
    throw ApiError(400, "invalid_request_error", message, message.substr(0, message.find(": ")));
  }
  return chat::lazy_tool_call_grammar(format, tools, request.parallel_tool_calls, frame);
}

JobSpec Server::chat_job(const ChatRequest& request) const {
  JobSpec spec;
  render_chat(request, spec);
  spec.settings = request.settings;
  spec.stop_ids = chat_stop_ids_;
  spec.reply_format = chat_format_->reply_format();
  spec.in_reasoning = chat_format_->opens_reasoning(spec.prompt);
  std::vector<int32_t> end_ids = engine_.config().eos_ids;
  end_ids.insert(end_ids.end(), chat_stop_ids_.begin(), chat_stop_ids_.end());
  // What surrounds a constrained reply.
  const chat::ConstraintOptions frame = chat_format_->constraint_frame(spec.prompt, end_ids);
  const json& choice = request.tool_choice;
  if (choice == "none") spec.reply_format->tools = chat::ToolSyntax::kNone;  // nothing is a call
  std::shared_ptr<const chat::JsonGrammar> value;  // response_format's, unless "text"
  try {
    if (!request.response_format.is_null())
      value = chat::JsonGrammar::from_response_format(request.response_format);
  } catch (const Error& e) {
    throw ApiError(400, "invalid_request_error", e.what(), "response_format");
  }
  if (choice == "required" || choice.is_object()) {
    spec.grammar = tool_call_grammar(request, frame);
  } else if (value) {
    spec.grammar = chat::json_reply_grammar(std::move(value), frame);
  } else if (choice != "none") {
    spec.grammar = lazy_tool_call_grammar(request, frame);
  }
  return spec;
}

void Server::chat_completions(const httplib::Request& req, httplib::Response& res) {
  const ChatRequest request = parse_chat_request(parse_body(req.body), random_seed());
  generate(req, res, chat_job(request), true, "");
}

void Server::completions(const httplib::Request& req, httplib::Response& res) {
  const CompletionRequest request = parse_completion_request(parse_body(req.body), random_seed());
  JobSpec spec;
  spec.prompt = request.prompt_ids;
  if (request.prompt_text) {
    spec.prompt = tokenizer_.encode(*request.prompt_text);
    if (tokenizer_.add_bos() && tokenizer_.bos_id())
      spec.prompt.insert(spec.prompt.begin(), *tokenizer_.bos_id());
  }
  for (size_t i = 0; i < spec.prompt.size(); ++i) {
    if (static_cast<uint32_t>(spec.prompt[i]) >= engine_.config().vocab)
      bad_param(fmt::format("prompt[{}]", i), "token id {} is outside the vocabulary of {}",
                spec.prompt[i], engine_.config().vocab);
    if (engine_.config().vision &&
        static_cast<uint32_t>(spec.prompt[i]) == engine_.config().vision->media_pad_id)
      bad_param(fmt::format("prompt[{}]", i),
                "token id {} is the media pad, which only an image part of /v1/chat/completions "
                "fills",
                spec.prompt[i]);
  }
  std::string echo;
  if (request.echo)
    echo = request.prompt_text ? *request.prompt_text : tokenizer_.decode(spec.prompt, true);
  spec.settings = request.settings;
  generate(req, res, std::move(spec), false, echo);
}

namespace {

// The delta of one stream event of a chat reply.
json chat_delta(const Job::Event& event) {
  switch (event.kind) {
    case Job::Event::Kind::kReasoning:
      return {{"reasoning_content", event.text}};
    case Job::Event::Kind::kToolCall:
      return {
          {"tool_calls", json::array({{{"index", event.tool_index},
                                       {"id", event.id},
                                       {"type", "function"},
                                       {"function", {{"name", event.name}, {"arguments", ""}}}}})}};
    case Job::Event::Kind::kToolArguments:
      return {{"tool_calls", json::array({{{"index", event.tool_index},
                                           {"function", {{"arguments", event.text}}}}})}};
    default:
      return {{"content", event.text}};
  }
}

// Adds a blocking reply's event to what it has so far.
void gather(chat::Reply& reply, const Job::Event& event) {
  switch (event.kind) {
    case Job::Event::Kind::kReasoning:
      reply.reasoning += event.text;
      break;
    case Job::Event::Kind::kToolCall:
      reply.tool_calls.push_back({event.id, event.name, ""});
      break;
    case Job::Event::Kind::kToolArguments:
      if (event.tool_index < reply.tool_calls.size())
        reply.tool_calls[event.tool_index].arguments += event.text;
      break;
    default:
      reply.content += event.text;
  }
}

}  // namespace

std::shared_ptr<Job> Server::submit(const httplib::Request& req, httplib::Response& res,
                                    JobSpec spec, bool chat) {
  const GenerationSettings& settings = spec.settings;
  for (const auto& [token, bias] : settings.logit_bias) {
    if (static_cast<uint32_t>(token) >= engine_.config().vocab)
      bad_param(fmt::format("logit_bias.{}", token), "token id {} is outside the vocabulary of {}",
                token, engine_.config().vocab);
  }
  const uint32_t context = engine_.transformer().context();
  if (spec.prompt.empty()) bad_param(chat ? "messages" : "prompt", "the prompt has no tokens");
  if (spec.prompt.size() > context) {
    throw ApiError(400, "invalid_request_error",
                   fmt::format("This model's maximum context length is {} tokens. However, your {} "
                               "resulted in {} tokens.",
                               context, chat ? "messages" : "prompt", spec.prompt.size()),
                   chat ? "messages" : "prompt", "context_length_exceeded");
  }
  // One token can be sampled from the prompt's logits; each further one
  // needs a free position.
  const uint32_t room = context - static_cast<uint32_t>(spec.prompt.size()) + 1;
  spec.max_tokens = std::min(settings.max_tokens.value_or(room), room);
  spec.client_gone = peer_gone_check(req);
  try {
    return scheduler_->submit(std::move(spec));
  } catch (const ApiError& e) {
    if (e.status == 429)
      res.set_header("Retry-After", std::to_string(scheduler_->retry_after_seconds()));
    throw;
  }
}

void Server::generate(const httplib::Request& req, httplib::Response& res, JobSpec spec, bool chat,
                      const std::string& echo) {
  const GenerationSettings settings = spec.settings;
  const std::shared_ptr<Job> job = submit(req, res, std::move(spec), chat);
  const ReplyShape shape{random_id(chat ? "chatcmpl-" : "cmpl-"), options_.model_id,
                         static_cast<int64_t>(std::time(nullptr)), chat};

  if (!settings.stream) {
    chat::Reply reply;
    reply.content = echo;
    for (;;) {
      Job::Event event = job->next();
      if (event.kind == Job::Event::Kind::kError) throw engine_error(event.text);
      if (event.kind == Job::Event::Kind::kDone) break;
      gather(reply, event);
    }
    res.set_content(dump(shape.whole(reply, job->result())), "application/json");
    return;
  }

  const bool include_usage = settings.include_usage;
  res.set_header("Cache-Control", "no-cache");
  // The type must be exactly text/event-stream: anything after it would let
  // compression buffer the stream.
  res.set_chunked_content_provider("text/event-stream", [job, shape, include_usage, echo](
                                                            size_t, httplib::DataSink& sink) {
    bool open = true;
    auto write = [&](const std::string& event) {
      if (open && !sink.write(event.data(), event.size())) {
        open = false;
        job->cancel();
      }
    };
    write(sse(shape.chunk(shape.chat ? json{{"role", "assistant"}, {"content", ""}} : json(echo),
                          nullptr, include_usage)));
    // Drained to the end even after the client went: the job's connection
    // check must not outlive this connection.
    for (;;) {
      Job::Event event = job->next();
      if (event.kind == Job::Event::Kind::kError) {
        write(sse(engine_error(event.text).body()));
        break;
      }
      if (event.kind != Job::Event::Kind::kDone) {
        write(sse(shape.chunk(shape.chat ? chat_delta(event) : json(event.text), nullptr,
                              include_usage)));
        continue;
      }
      const JobResult& r = job->result();
      if (r.finish_reason == "cancelled") break;
      json last =
          shape.chunk(shape.chat ? json::object() : json(""), r.finish_reason, include_usage);
      last["sluice"] = sluice_json(r);
      write(sse(last));
      if (include_usage) {
        json usage = shape.chunk(nullptr, nullptr, true);
        usage["choices"] = json::array();
        usage["usage"] = usage_json(r);
        write(sse(usage));
      }
      write("data: [DONE]\n\n");
      break;
    }
    sink.done();
    return true;
  });
}

}  // namespace sluice::serve
