// router/router_main.cpp: sluice-router, the lookahead process of a sluice-io
// group: attach to the daemon, open the mailbox next to its segment, and turn
// each published hidden state into a Cap'n Proto prefetch (origin router).
// It never touches the cache segment and never blocks a compute client.
#include <atomic>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <optional>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <unistd.h>

#include "ioworker/rpc_client.h"
#include "ioworker/rpc_socket.h"
#include "proto/container.h"
#include "proto/error.h"
#include "router/lookahead.h"

namespace {

std::atomic<bool> g_stop{false};

void on_signal(int) { g_stop = true; }

struct Options {
  std::string socket;
  std::string model;  // default: the container the daemon serves
  std::optional<uint32_t> lookahead;
  uint32_t max_rows = 64;
};

void log_line(const std::string& text) { fmt::print(stderr, "sluice-router[{}]: {}\n", ::getpid(), text); }

int serve(const Options& options) {
  using namespace sluice;
  const std::string socket =
      ioworker::resolve_socket(options.socket.empty() ? std::string(ioworker::kDefaultInstance) : options.socket);
  ioworker::RpcClient rpc(socket);
  const std::string model = options.model.empty() ? rpc.stats().model : options.model;
  const Container container = Container::open(model);
  const ioworker::Attachment attachment = rpc.attach(container.identity());
  const uint32_t k = options.lookahead ? *options.lookahead : router::lookahead_from_environment();
  const std::string path = router::mailbox_path(socket);
  const router::Predictor predictor(container);
  auto mailbox = router::Mailbox::create_shared(
      path, {predictor.hidden(), std::max<uint32_t>(options.max_rows, 1), predictor.top_k()}, container.identity());
  mailbox->set_router(::getpid(), k);
  log_line(fmt::format("lookahead {} for {} via {}, mailbox {}", k, model, socket, path));

  if (k == 0) {
    // Off: stay a quiet member of the group so the supervisor does not restart it.
    while (!g_stop) ::pause();
  } else {
    router::Lookahead lookahead(predictor, *mailbox, k, [&](uint32_t layer, std::span<const uint32_t> experts) {
      rpc.prefetch(layer, experts, ioworker::RpcPrefetchOrigin::kRouter);
    });
    while (!g_stop) lookahead.poll(std::chrono::milliseconds(200));
  }
  mailbox->set_router(0, k);
  // A clean stop takes the mailbox with it; after a crash it stays, so the
  // restarted router serves the clients that still write to it.
  std::filesystem::remove(path);
  rpc.detach(attachment.session);
  log_line("stopped");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"sluice-router: lookahead prefetch for a sluice-io group"};
  Options options;
  app.add_option("--attach", options.socket, "control socket of sluice-io, or an instance name (default: 'default')");
  app.add_option("--model", options.model, "the container (default: the one the daemon serves)");
  app.add_option("--lookahead", options.lookahead, "experts guessed per token and layer (default SLUICE_LOOKAHEAD or 6; 0: off)");
  app.add_option("--max-rows", options.max_rows, "tokens per published message (a prefill chunk)")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  struct sigaction action {};
  action.sa_handler = on_signal;
  ::sigaction(SIGINT, &action, nullptr);
  ::sigaction(SIGTERM, &action, nullptr);
  try {
    return serve(options);
  } catch (const sluice::Error& e) {
    fmt::print(stderr, "sluice-router: error: {}\n", e.what());
    return 1;
  }
}
