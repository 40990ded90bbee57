// compute/serve/server.cpp: the server's setup and every route but the two
// that generate (generate.cpp): the key check, OpenAI-shaped errors for
// anything cpp-httplib refuses itself (404, 413), models, health, metrics and
// the page. Nothing here waits for the engine.
#include "compute/serve/server.h"

#include <httplib.h>

#include <ctime>
#include <thread>

#include "compute/serve/api_error.h"
#include "compute/serve/connection.h"
#include "compute/serve/page.h"
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

void send_error(httplib::Response& res, const ApiError& error) {
  res.status = error.status;
  res.set_content(error.body().dump(), "application/json");
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

// The endpoint a request counts under in /metrics: its route, not its path
// (model ids and stray paths would make unbounded label sets).
std::string endpoint_label(const std::string& path) {
  for (const char* route : {"/v1/chat/completions", "/v1/completions", "/v1/models", "/health",
                            "/metrics", "/sluice/stats"}) {
    if (path == route) return route;
  }
  if (path.starts_with("/v1/models/")) return "/v1/models/{id}";
  if (path == "/") return "/";
  return "other";
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
    const std::string header = req.get_header_value("Authorization");
    const std::string bearer = "Bearer ";
    if (header.starts_with(bearer) && same_key(header.substr(bearer.size()), options_.api_key))
      return httplib::Server::HandlerResponse::Unhandled;
    send_error(res, ApiError(401, "authentication_error",
                             header.empty() ? "no API key: send Authorization: Bearer KEY"
                                            : "the API key is not valid",
                             std::nullopt, "invalid_api_key"));
    return httplib::Server::HandlerResponse::Handled;
  });
  // Errors cpp-httplib answers itself arrive here without a body.
  http.set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    if (res.status == 404) {
      send_error(res, ApiError(404, "not_found_error",
                               fmt::format("no route {} {}", req.method, req.path)));
    } else if (res.status == 413) {
      // The body was not read: the connection cannot carry another request.
      discard_unread_body(req, kMaxDiscardedBody);
      res.set_header("Connection", "close");
      send_error(res, ApiError(413, "invalid_request_error",
                               fmt::format("the request body is larger than {} bytes",
                                           options_.max_body_bytes)));
    } else {
      send_error(res,
                 ApiError(res.status, "invalid_request_error", "the request could not be read"));
    }
  });
  http.set_exception_handler(
      [](const httplib::Request&, httplib::Response& res, std::exception_ptr e) {
        std::string message = "internal error";
        try {
          std::rethrow_exception(e);
        } catch (const ApiError& error) {
          send_error(res, error);
          return;
        } catch (const std::exception& error) {
          message = error.what();
        }
        send_error(res, ApiError(500, "server_error", message));
      });
  http.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    metrics_->count_request(endpoint_label(req.path), res.status);
  });

  http.Get("/health", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(R"({"status":"ok"})", "application/json");
  });
  http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics_->prometheus(), "text/plain; version=0.0.4");
  });
  http.Get("/sluice/stats", [this](const httplib::Request&, httplib::Response& res) {
    auto stats = metrics_->stats_json();
    stats["model"] = options_.model_id;
    stats["context"] = engine_.transformer().context();
    res.set_content(stats.dump(), "application/json");
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
  http.Get("/v1/models", [model_object](const httplib::Request&, httplib::Response& res) {
    res.set_content(json{{"object", "list"}, {"data", json::array({model_object()})}}.dump(),
                    "application/json");
  });
  http.Get(R"(/v1/models/(.+))", [this, model_object](const httplib::Request& req,
                                                      httplib::Response& res) {
    const std::string id = req.matches[1];
    if (id != options_.model_id)
      throw ApiError(404, "not_found_error", fmt::format("the model '{}' does not exist", id),
                     "model", "model_not_found");
    res.set_content(model_object().dump(), "application/json");
  });
  http.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
    chat_completions(req, res);
  });
  http.Post("/v1/completions",
            [this](const httplib::Request& req, httplib::Response& res) { completions(req, res); });
  http.Get("/", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(std::string(page_html()), "text/html; charset=utf-8");
  });
}

}  // namespace sluice::serve
