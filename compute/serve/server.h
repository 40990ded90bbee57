// compute/serve/server.h: the public face of the serve room — an HTTP server
// (cpp-httplib) over one loaded engine speaking OpenAI's API
// (/v1/chat/completions, /v1/completions, /v1/models) and Anthropic's
// (/v1/messages, /v1/messages/count_tokens), with /health, /metrics,
// /sluice/stats and the web page at / (the route table is routes.h). It
// renders and tokenizes on the HTTP threads; only the scheduler's worker
// touches the engine.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "compute/chat/chat_format.h"
#include "compute/chat/token_grammar.h"
#include "compute/model/engine.h"
#include "compute/serve/metrics.h"
#include "compute/serve/scheduler.h"
#include "compute/tokenizer/tokenizer.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace sluice::serve {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;      // 0: any free port (bind() says which)
  std::string api_key;  // empty: no key asked for
  size_t max_body_bytes = size_t{8} << 20;
  std::string model_id;  // the name /v1/models lists
  SchedulerOptions scheduler;
};

class Server {
 public:
  // `engine` and `tokenizer` must outlive the server. The chat format is the
  // one the container's family names (chat_format.h); without one (no chat
  // template), only /v1/completions generates.
  Server(Engine& engine, const tokenizer::Tokenizer& tokenizer, const ServerOptions& options);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds the listening socket; returns the port. Throws Error naming the
  // address when it cannot.
  int bind();
  // Serves until stop(); returns when every connection is done, or at once
  // when stop() came first.
  void listen();
  // Safe from any thread (a signal-watching one), before or during listen().
  void stop();

 private:
  void routes();
  void chat_completions(const httplib::Request& req, httplib::Response& res);
  void completions(const httplib::Request& req, httplib::Response& res);
  // Anthropic's Messages API over the same chat_job and submit (messages.cpp).
  void messages(const httplib::Request& req, httplib::Response& res);
  void count_tokens(const httplib::Request& req, httplib::Response& res);
  // A chat request rendered and constrained as its tools, tool_choice and
  // response_format ask.
  JobSpec chat_job(const ChatRequest& request) const;
  // Checks the prompt against the vocabulary and the context, caps
  // max_tokens by the room left, and queues the job (429 with Retry-After
  // when the queue is full). `chat`: the prompt came from messages.
  std::shared_ptr<Job> submit(const httplib::Request& req, httplib::Response& res, JobSpec spec,
                              bool chat);
  // The OpenAI routes' reply: SSE or one body. `chat` picks the response
  // shapes; `echo` is prepended to the text.
  void generate(const httplib::Request& req, httplib::Response& res, JobSpec spec, bool chat,
                const std::string& echo);
  // The prompt ids, each image's pad expanded, into `spec`.
  void render_chat(const ChatRequest& request, JobSpec& spec) const;
  // tool_choice "required" or a named function: the reply is a call of an
  // offered tool (that one) whose arguments validate. ApiError 400 naming
  // the field when it cannot be enforced.
  std::shared_ptr<const chat::TokenGrammar> tool_call_grammar(
      const ChatRequest& request, const chat::ConstraintOptions& frame) const;
  // tool_choice "auto" with tools: a call the model opens is held to the
  // family's syntax and its tool's schema; null when nothing can be called.
  std::shared_ptr<const chat::TokenGrammar> lazy_tool_call_grammar(
      const ChatRequest& request, const chat::ConstraintOptions& frame) const;
  uint64_t random_seed();
  std::string random_id(const char* prefix);

  Engine& engine_;
  const tokenizer::Tokenizer& tokenizer_;
  ServerOptions options_;
  std::unique_ptr<chat::ChatFormat> chat_format_;  // null: no chat template
  std::vector<int32_t> chat_stop_ids_;             // end-of-turn tokens of the chat template
  int64_t created_;
  std::unique_ptr<Metrics> metrics_;
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<httplib::Server> http_;
  // httplib drops a stop() that comes before listen_after_bind() runs; these
  // let stop() and listen() see each other whichever comes first.
  std::atomic<bool> stopping_ = false, listen_entered_ = false, listen_returned_ = false;
  std::mutex random_mutex_;
  std::mt19937_64 random_;
};

}  // namespace sluice::serve
