// router/router_main.cpp: sluice-router, the lookahead process of a sluice-io
// group: attach to the daemon, map its cache segment, read the hidden-state
// mailbox in it, and turn each published hidden state into a Cap'n Proto
// prefetch (origin router). It never pins a slot and never blocks a client.
#include <fmt/format.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <optional>

#include "ioworker/command_line.h"
#include "ioworker/rpc_client.h"
#include "ioworker/rpc_socket.h"
#include "proto/container.h"
#include "proto/error.h"
#include "router/lookahead.h"
#include "shm/process.h"
#include "shm/segment.h"

namespace {

std::atomic<bool> g_stop{false};

void on_signal(int) { g_stop = true; }

struct Options {
  std::string socket;
  std::string model;  // default: the container the daemon serves
  std::optional<uint32_t> lookahead;
};

// The supervisor's sign that this loop still runs (a stopped or stuck router ages).
void beat(const sluice::shm::Segment& segment) {
  segment.stats().lookahead.router_heartbeat_ns.store(sluice::shm::monotonic_ns(),
                                                      std::memory_order_relaxed);
}

void log_line(const std::string& text) { fmt::print(stderr, "sluice-router[{}]: {}\n", ::getpid(), text); }

int serve(const Options& options) {
  using namespace sluice;
  const std::string socket =
      ioworker::resolve_socket(options.socket.empty() ? std::string(ioworker::kDefaultInstance) : options.socket);
  ioworker::RpcClient rpc(socket);
  const std::string model = options.model.empty() ? rpc.stats().model : options.model;
  const Container container = Container::open(model);
  const ioworker::Attachment attachment = rpc.attach(container.identity());
  const auto segment = shm::Segment::attach(attachment.segment_name, container.identity());
  const uint32_t k = options.lookahead ? *options.lookahead : router::lookahead_from_environment();
  const uint32_t layers_ahead = router::layers_ahead_from_environment();
  // Said once the router reads the mailbox (clients publish from then on).
  const auto ready = [&] {
    log_line(fmt::format("lookahead {} over {} layers for {} via {}, mailbox in /dev/shm/{}", k, layers_ahead, model,
                         socket, attachment.segment_name));
  };

  if (k == 0) {
    ready();
    // Off: stay a quiet member of the group so the supervisor does not restart it.
    while (!g_stop && segment->owner_alive()) {
      beat(*segment);
      ::sleep(1);
    }
  } else {
    const router::Predictor predictor(container);
    router::Lookahead lookahead(
        predictor, *segment, k,
        [&](uint32_t layer, std::span<const uint32_t> experts) {
          rpc.prefetch(layer, experts, ioworker::RpcPrefetchOrigin::kRouter);
        },
        layers_ahead);
    ready();
    while (!g_stop && segment->owner_alive()) {
      beat(*segment);
      lookahead.poll(std::chrono::milliseconds(200));
    }
  }
  if (!g_stop) fail("sluice-io (pid {}) stopped serving /dev/shm/{}", segment->header().owner_pid, attachment.segment_name);
  rpc.detach(attachment.session);
  log_line("stopped");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"sluice-router: lookahead prefetch for a sluice-io group"};
  app.set_version_flag("--version", sluice::version_line("sluice-router"));
  Options options;
  app.add_option("--attach", options.socket, "control socket of sluice-io, or an instance name (default: 'default')");
  app.add_option("--model", options.model, "the container (default: the one the daemon serves)");
  app.add_option("--lookahead", options.lookahead, "experts guessed per token and layer (default SLUICE_LOOKAHEAD or 6; 0: off)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return sluice::exit_for_parse_error(app, e, "sluice-router");
  }
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
