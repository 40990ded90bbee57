// ioworker/sluice_io_main.cpp: the sluice-io executable: plan the budget,
// create the segment and worker, serve the control socket until SIGINT or
// SIGTERM. Every resource is an RAII object, so no exit path (signal or
// error) leaves a socket or a segment behind.
#include <fmt/format.h>
#include <kj/async-unix.h>
#include <kj/exception.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <memory>
#include <optional>
#include <string>

#include "ioworker/command_line.h"
#include "ioworker/memory_plan.h"
#include "ioworker/rpc_server.h"
#include "ioworker/rpc_socket.h"
#include "ioworker/worker.h"
#include "proto/container.h"
#include "proto/error.h"
#include "shm/segment.h"

namespace {

void log_line(const std::string& message) {
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  ::localtime_r(&now, &local);
  char stamp[32];
  std::strftime(stamp, sizeof(stamp), "%H:%M:%S", &local);
  fmt::print(stderr, "sluice-io[{}] {} {}\n", ::getpid(), stamp, message);
  std::fflush(stderr);
}

struct Options {
  std::string model;
  std::string budget;
  std::string socket;
  std::string instance = sluice::ioworker::kDefaultInstance;
  uint32_t readers = 4;
  uint32_t context = 0;
  uint32_t max_clients = 16;
  uint32_t parallel = 1;  // sequences a client decodes together: rows of its lookahead mailbox
  bool verify = false;
  bool force = false;
};

int run(const Options& options) {
  using namespace sluice;
  // Validate names before anything is created.
  const std::string segment = shm::segment_name(options.instance);
  const std::string socket_path =
      options.socket.empty() ? ioworker::default_socket_path(options.instance) : options.socket;
  if (options.readers == 0 || options.readers > 64) fail("--readers {}: must be 1 to 64", options.readers);

  const Container container = Container::open(options.model);
  // The floor of one client of one compute thread (`sluice plan --threads 1`).
  PlanRequest shape;
  shape.max_clients = options.max_clients;
  shape.mailbox_rows = options.parallel;
  shape.force = options.force;
  const MemoryPlan plan = plan_for(container, options.budget, options.context, shape);
  const uint64_t cache_bytes = plan.cache_bytes;

  ioworker::check_socket_free(socket_path);  // a second daemon is refused before it builds anything
  ioworker::WorkerOptions worker_options;
  worker_options.instance = options.instance;
  worker_options.cache_bytes = cache_bytes;
  worker_options.readers = options.readers;
  worker_options.verify_crc = options.verify;
  worker_options.max_clients = options.max_clients;
  worker_options.mailbox_rows = options.parallel;
  worker_options.progress = true;
  ioworker::Worker worker(container, worker_options);
  // Bound once the worker serves: a client that finds the socket is answered
  // at once, however long the segment took to build.
  ioworker::ListeningSocket socket(socket_path);
  const shm::Geometry& geometry = worker.geometry();
  log_line(fmt::format("serving {} (identity {:016x}) on {}", options.model, container.identity(), socket_path));
  log_line(fmt::format(
      "segment {}: {} slots of {}, {} mapped; budget {} ({}), cache {}; {} readers via {}, {}",
      worker.segment_name(), geometry.slot_count, format_bytes(geometry.slot_bytes),
      format_bytes(worker.segment().mapped_bytes()), format_bytes(plan.budget_bytes),
      plan.budget_given  ? "as given"
      : plan.all_experts ? "floor + every expert"
                         : fmt::format("floor + {} working sets", plan.working_sets),
      format_bytes(cache_bytes), options.readers, worker.backend_name(),
      worker.direct_io() ? "O_DIRECT" : "buffered reads (O_DIRECT refused)"));
  const ioworker::Startup& startup = worker.startup();
  log_line(fmt::format("start-up {:.2f} s: slots resident in {:.2f} s ({}), {}; {}", startup.seconds,
                       startup.residency.seconds, startup.residency.populate, startup.residency.huge_pages(),
                       worker.registered_buffers()
                           ? fmt::format("registered with io_uring in {:.2f} s", startup.register_seconds)
                           : std::string("slots not registered")));

  ioworker::DaemonInfo info;
  info.instance = options.instance;
  info.model = options.model;
  info.budget_bytes = plan.budget_bytes;
  info.cache_bytes = cache_bytes;
  info.readers = options.readers;
  info.verifies_records = options.verify;
  ioworker::RpcServer server(worker, info, log_line);
  const int signal = server.serve(socket, {SIGINT, SIGTERM});
  log_line(fmt::format("stopping on {}: removing {} and {}", signal == SIGINT ? "SIGINT" : "SIGTERM", socket_path,
                       worker.segment_name()));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"sluice-io: the I/O daemon; reads expert records into a shared-memory cache for sluice clients"};
  app.set_version_flag("--version", sluice::version_line("sluice-io"));
  Options options;
  app.add_option("MODEL", options.model, "Container directory (NAME.sluice)")->required();
  app.add_option("--budget", options.budget,
                 "Memory budget (K/M/G/T, 1024-based); default: the plan's choice")
      ->check(CLI::Validator(
          [](std::string& text) -> std::string {
            if (text.empty()) return "an empty size";
            try {
              sluice::parse_size(text, "--budget");
            } catch (const sluice::Error&) {
              return fmt::format(
                  "bad size '{}' (expected a number with an optional K, M, G or T suffix, "
                  "1024-based)",
                  text);
            }
            return "";
          },
          "SIZE"));
  app.add_option("--socket", options.socket, "Control socket path; default $XDG_RUNTIME_DIR/sluice/INSTANCE.sock");
  app.add_option("--readers", options.readers, "Reader threads (or io_uring reads in flight)")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  app.add_flag("--verify", options.verify, "Check every record's payload crc32");
  app.add_flag("--force", options.force, "Take a --budget above the usable memory");
  app.add_option("--instance", options.instance,
                 "Instance name: names the segment and the default socket")
      ->capture_default_str()
      ->check(CLI::Validator(
          [](std::string& text) -> std::string {
            try {
              sluice::shm::segment_name(text);
            } catch (const sluice::Error& e) {
              return e.what();
            }
            return "";
          },
          "NAME"));
  app.add_option(
         "--ctx", options.context,
         "Context length the plan reserves KV cache for (default: the model's, at most 4096)")
      ->check(CLI::Range(1u, UINT32_MAX));
  app.add_option("--max-clients", options.max_clients, "Compute clients that may attach at once")
      ->capture_default_str()
      ->check(CLI::Range(1u, sluice::shm::kMaxClients));
  app.add_option("--parallel", options.parallel,
                 "Sequences a client decodes together (`sluice serve --parallel N`): each client's "
                 "lookahead mailbox holds N rows, so the router guesses for every sequence")
      ->capture_default_str()
      ->check(CLI::Range(1u, 64u));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return sluice::exit_for_parse_error(app, e, "sluice-io");
  }
  // Before any thread exists: the signals stay blocked in every thread the
  // worker starts and are delivered only to the event loop.
  kj::UnixEventPort::captureSignal(SIGINT);
  kj::UnixEventPort::captureSignal(SIGTERM);
  std::signal(SIGPIPE, SIG_IGN);
  try {
    return run(options);
  } catch (const sluice::Error& e) {
    fmt::print(stderr, "sluice-io: error: {}\n", e.what());
  } catch (const kj::Exception& e) {
    fmt::print(stderr, "sluice-io: error: {}\n", e.getDescription().cStr());
  } catch (const std::exception& e) {
    fmt::print(stderr, "sluice-io: error: {}\n", e.what());
  }
  return 1;
}
