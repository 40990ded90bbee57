// compute/cli/cmd_serve.cpp: `sluice serve`, the OpenAI-compatible server
// (compute/serve/) over one model. Prints "listening on http://HOST:PORT" on
// stdout once bound (with --port 0, the port chosen); SIGINT or SIGTERM stop
// it cleanly: the running generation ends, queued requests get 503.
#include <fmt/format.h>
#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <thread>

#include "compute/cli/commands.h"
#include "compute/cli/run_options.h"
#include "compute/model/engine.h"
#include "compute/serve/server.h"
#include "compute/tokenizer/tokenizer.h"
#include "ioworker/memory_plan.h"
#include "proto/error.h"
#include "router/lookahead.h"

namespace sluice::cli {
namespace {

struct ServeArgs {
  std::string model;
  std::string host = "127.0.0.1";
  int port = 8080;
  std::string api_key;
  uint32_t parallel = 1;
  size_t queue = 16;
  std::string max_body = "8M";
  std::string model_id;
  std::optional<uint32_t> lookahead;
  EngineFlags engine;
};

// SIGINT and SIGTERM are blocked in every thread (the mask is inherited) and
// taken by one thread with sigwait, which stops the server.
class SignalWatch {
 public:
  SignalWatch() {
    sigemptyset(&set_);
    sigaddset(&set_, SIGINT);
    sigaddset(&set_, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set_, &previous_);
  }
  void start(serve::Server& server) {
    thread_ = std::thread([this, &server] {
      int signal = 0;
      sigwait(&set_, &signal);
      woken_ = true;
      if (!ending_) fmt::print(stderr, "sluice serve: {}, stopping\n", strsignal(signal));
      server.stop();
    });
  }
  // Wakes the watcher when the server ended on its own.
  ~SignalWatch() {
    if (thread_.joinable()) {
      ending_ = true;
      if (!woken_) pthread_kill(thread_.native_handle(), SIGTERM);
      thread_.join();
    }
    pthread_sigmask(SIG_SETMASK, &previous_, nullptr);
  }

 private:
  sigset_t set_{}, previous_{};
  std::thread thread_;
  std::atomic<bool> ending_ = false;  // the server ended without a signal
  std::atomic<bool> woken_ = false;
};

void run(const ServeArgs& args) {
  if (args.port < 0 || args.port > 65535) usage_error("--port {}: not a TCP port", args.port);
  serve::ServerOptions options;
  options.host = args.host;
  options.port = args.port;
  options.api_key = args.api_key;
  options.max_body_bytes = static_cast<size_t>(parse_size(args.max_body, "--max-body"));
  options.model_id = args.model_id;
  if (options.model_id.empty())
    options.model_id = std::filesystem::path(args.model).lexically_normal().filename().string();
  if (options.model_id.empty())
    options.model_id =
        std::filesystem::path(args.model).lexically_normal().parent_path().filename().string();
  options.scheduler.queue_limit = args.queue;
  options.scheduler.parallel = args.parallel;
  options.scheduler.prefill_chunk = args.engine.chunk;
  options.scheduler.routing.lookahead =
      args.lookahead ? *args.lookahead : router::lookahead_from_environment();

  SignalWatch signals;  // before any thread starts, so all inherit the mask
  EngineFlags flags = args.engine;
  flags.sequences = args.parallel;
  flags.saved_states = args.parallel;  // each slot keeps its prompt's state for the next request
  // Any request may bring images, and the tower loaded for the first stays.
  flags.images = has_vision_tower(args.model);
  Engine engine(args.model, flags.options());
  const tokenizer::Tokenizer tokenizer = tokenizer::Tokenizer::load_from_container(args.model);
  engine.set_tokenizer_ids(tokenizer.vocab_size());
  serve::Server server(engine, tokenizer, options);
  const int port = server.bind();
  signals.start(server);
  fmt::print("sluice serve: listening on http://{}:{} (model {})\n", args.host, port,
             options.model_id);
  std::fflush(stdout);
  server.listen();
}

}  // namespace

void add_serve_command(CLI::App& app) {
  auto args = std::make_shared<ServeArgs>();
  CLI::App* cmd = app.add_subcommand(
      "serve", "Serve the model over HTTP with the OpenAI API (chat and completions, streaming)");
  cmd->add_option("MODEL", args->model, "the .sluice container")->required();
  cmd->add_option("--host", args->host, "address to listen on (loopback unless you mean otherwise)")
      ->capture_default_str();
  cmd->add_option("--port", args->port, "TCP port; 0 picks a free one (printed on stdout)")
      ->capture_default_str();
  cmd->add_option("--api-key", args->api_key,
                  "require Authorization: Bearer KEY on every route but /health and /");
  cmd->add_option("--parallel", args->parallel,
                  "requests decoded together, each in its own sequence (memory: one context each)")
      ->capture_default_str()
      ->check(CLI::Range(1u, 64u));
  cmd->add_option("--queue", args->queue,
                  "requests that may wait for the engine; more get 429 with Retry-After")
      ->capture_default_str()
      ->check(CLI::Range(size_t{1}, size_t{1024}));
  cmd->add_option("--max-body", args->max_body, "largest request body (K/M/G); larger gets 413")
      ->capture_default_str()
      ->check(memory_size());
  cmd->add_option(
      "--model-id", args->model_id,
      "the model's name in /v1/models and replies (default: the container's directory name)");
  cmd->add_option(
      "--lookahead", args->lookahead,
      "experts of the next layer to prefetch per token (default SLUICE_LOOKAHEAD or 6; 0: off)");
  add_engine_flags(*cmd, args->engine);
  cmd->callback([args] { run(*args); });
}

}  // namespace sluice::cli
