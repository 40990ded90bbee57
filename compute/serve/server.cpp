// compute/serve/server.cpp: the server's setup and every route but those that
// generate (generate.cpp, messages.cpp): the key check, errors in the route's
// API shape for anything cpp-httplib refuses itself (404, 413), models,
// health, metrics and the page. Nothing here waits for the engine.
#include "compute/serve/server.h"

#include <httplib.h>

#include <ctime>
#include <thread>

#include "compute/serve/api_error.h"
#include "compute/serve/connection.h"
#include "compute/serve/page.h"
#include "compute/serve/routes.h"
#include "proto/error.h"

namespace sluice::serve {
namespace {

// Beyond this much of a refused body, the connection is dropped unread.
constexpr size_t kMaxDiscardedBody = size_t{256} << 20;

// Always compares every byte, so the time taken says nothing about how much
// of a wrong key was right.
bool same_key(const std::string& given, const std::string& expected) {
  unsigned char differ = given.size() == expected.size() ? 0 : 1;
  for (size_t i = 0; i < given.size(); ++i)
    differ |= static_cast<unsigned char>(given[i] ^ expected[i % expected.size()]);
  return differ == 0;
}

// In the shape of the API the request's path belongs to.
void send_error(const httplib::Request& req, httplib::Response& res, const ApiError& error) {
  res.status = error.status;
  res.set_content(error.body(api_of(req.path)).dump(), "application/json");
}

// The key a request carries: OpenAI's clients send Authorization: Bearer,
// Anthropic's x-api-key; either is accepted on every route.
std::optional<std::string> given_key(const httplib::Request& req) {
  const std::string bearer = "Bearer ";
  const std::string header = req.get_header_value("Authorization");
  if (header.starts_with(bearer)) return header.substr(bearer.size());
  if (req.has_header("x-api-key")) return req.get_header_value("x-api-key");
  return std::nullopt;
}

// End-of-turn tokens chat templates close an assistant turn with; the
// model's own eos ids stop generation anyway.
std::vector<int32_t> end_of_turn_ids(const tokenizer::Tokenizer& tokenizer) {
  std::vector<int32_t> ids;
  if (tokenizer.eos_id()) ids.push_back(*tokenizer.eos_id());
  for (const char* text :
       {"<|im_end|>", "<|eot_id|>", "<|end_of_text|>", "<|endoftext|>", "<|end_of_msg|>", "<|end|>",
        "<\xef\xbd\x9c"
        "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"}) {
    const auto id = tokenizer.token_to_id(text);
    if (id && tokenizer.is_special(*id)) ids.push_back(*id);
  }
  return ids;
}

}  // namespace

Server::Server(Engine& engine, const tokenizer::Tokenizer& tokenizer, const ServerOptions& options)
    : engine_(engine),
      tokenizer_(tokenizer),
      options_(options),
      created_(static_cast<int64_t>(std::time(nullptr))),
      random_(std::random_device{}()) {
  const Container& container = engine.container();
  chat_format_ = chat::chat_format_for(container, tokenizer);
  if (chat_format_) chat_stop_ids_ = end_of_turn_ids(tokenizer);
  metrics_ = std::make_unique<Metrics>(engine.config().moe_layers(), engine.config().experts);
  scheduler_ = std::make_unique<Scheduler>(engine, tokenizer, *metrics_, options.scheduler);
  http_ = std::make_unique<httplib::Server>();
  routes();
}

Server::~Server() {
  stop();
}

int Server::bind() {
  const int port = options_.port == 0 ? http_->bind_to_any_port(options_.host)
                   : http_->bind_to_port(options_.host, options_.port) ? options_.port
                                                                       : -1;
  if (port < 0)
    fail("--host {} --port {}: cannot listen there (in use, or not an address of this machine)",
         options_.host, options_.port);
  return port;
}

void Server::listen() {
  listen_entered_ = true;
  if (!stopping_) http_->listen_after_bind();
  listen_returned_ = true;
}

void Server::stop() {
  stopping_ = true;
  scheduler_->stop();
  // A listen() that missed stopping_ is about to run: stop it once it does
  // (a SIGTERM right after "listening on" was otherwise lost).
  while (listen_entered_ && !listen_returned_ && !http_->is_running()) std::this_thread::yield();
  http_->stop();
}

uint64_t Server::random_seed() {
  const std::lock_guard lock(random_mutex_);
  return random_() & ((uint64_t{1} << 53) - 1);  // exact in a JSON double
}

std::string Server::random_id(const char* prefix) {
  const std::lock_guard lock(random_mutex_);
  return fmt::format("{}{:016x}{:08x}", prefix, random_(), static_cast<uint32_t>(random_()));
}

void Server::routes() {
  httplib::Server& http = *http_;
  // Each streaming client holds a thread; the pool stays larger than the
  // queue so /health and /metrics always find one.
  const size_t threads = options_.scheduler.queue_limit + options_.scheduler.parallel + 8;
  http.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  http.set_payload_max_length(options_.max_body_bytes);
  http.set_keep_alive_max_count(1000);
  http.set_read_timeout(60);
  http.set_write_timeout(60);

  http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (options_.api_key.empty() || req.path == "/health" || req.path == "/")
      return httplib::Server::HandlerResponse::Unhandled;
    const std::optional<std::string> key = given_key(req);
    if (key && same_key(*key, options_.api_key)) return httplib::Server::HandlerResponse::Unhandled;
    send_error(req, res,
               ApiError(401, "authentication_error",
                        key ? "the API key is not valid"
                            : "no API key: send Authorization: Bearer KEY or x-api-key: KEY",
                        std::nullopt, "invalid_api_key"));
    return httplib::Server::HandlerResponse::Handled;
  });
  // Errors cpp-httplib answers itself arrive here without a body.
  http.set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    if (res.status == 404) {
      send_error(
          req, res,
          ApiError(404, "not_found_error", fmt::format("no route {} {}", req.method, req.path)));
    } else if (res.status == 413) {
      // The body was not read: the connection cannot carry another request.
      discard_unread_body(req, kMaxDiscardedBody);
      res.set_header("Connection", "close");
      send_error(req, res,
                 ApiError(413, "invalid_request_error",
                          fmt::format("the request body is larger than {} bytes",
                                      options_.max_body_bytes)));
    } else {
      send_error(req, res,
                 ApiError(res.status, "invalid_request_error", "the request could not be read"));
    }
  });
  http.set_exception_handler(
      [](const httplib::Request& req, httplib::Response& res, std::exception_ptr e) {
        std::string message = "internal error";
        try {
          std::rethrow_exception(e);
        } catch (const ApiError& error) {
          send_error(req, res, error);
          return;
        } catch (const std::exception& error) {
          message = error.what();
        }
        send_error(req, res, ApiError(500, "server_error", message));
      });
  http.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    metrics_->count_request(std::string(endpoint_label(req.path)), res.status);
  });

  const auto model_object = [this] {
    return json{{"id", options_.model_id},
                {"object", "model"},
                {"created", created_},
                {"owned_by", "sluice"},
                {"sluice",
                 {{"arch", engine_.config().arch},
                  {"context", engine_.transformer().context()},
                  {"layers", engine_.config().layers},
                  {"experts", engine_.config().experts},
                  {"top_k", engine_.config().top_k},
                  {"chat_template", chat_format_ != nullptr}}}};
  };
  using Handler = httplib::Server::Handler;
  using Req = httplib::Request;
  using Res = httplib::Response;
  install_routes(http, [this, model_object](const Route& route) -> Handler {
    switch (route.id) {
      case RouteId::kPage:
        return [](const Req&, Res& res) {
          res.set_content(std::string(page_html()), "text/html; charset=utf-8");
        };
      case RouteId::kHealth:
        return
            [](const Req&, Res& res) { res.set_content(R"({"status":"ok"})", "application/json"); };
      case RouteId::kMetrics:
        return [this](const Req&, Res& res) {
          res.set_content(metrics_->prometheus(), "text/plain; version=0.0.4");
        };
      case RouteId::kStats:
        return [this](const Req&, Res& res) {
          auto stats = metrics_->stats_json();
          stats["model"] = options_.model_id;
          stats["context"] = engine_.transformer().context();
          res.set_content(stats.dump(), "application/json");
        };
      case RouteId::kModels:
        return [model_object](const Req&, Res& res) {
          res.set_content(json{{"object", "list"}, {"data", json::array({model_object()})}}.dump(),
                          "application/json");
        };
      case RouteId::kModel:
        return [this, model_object](const Req& req, Res& res) {
          const std::string id = req.matches[1];
          if (id != options_.model_id)
            throw ApiError(404, "not_found_error", fmt::format("the model '{}' does not exist", id),
                           "model", "model_not_found");
          res.set_content(model_object().dump(), "application/json");
        };
      case RouteId::kChatCompletions:
        return [this](const Req& req, Res& res) { chat_completions(req, res); };
      case RouteId::kCompletions:
        return [this](const Req& req, Res& res) { completions(req, res); };
      case RouteId::kMessages:
        return [this](const Req& req, Res& res) { messages(req, res); };
      case RouteId::kCountTokens:
        return [this](const Req& req, Res& res) { count_tokens(req, res); };
    }
    fail("no handler for the route {} {}", route.method, route.pattern);
  });
}

}  // namespace sluice::serve
