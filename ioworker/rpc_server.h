// ioworker/rpc_server.h: the Cap'n Proto side of sluice-io (proto/sluice_io.capnp):
// attach, detach, prefetch and stats over a Unix socket, served on the
// calling thread with a kj event loop. It never reads a record or touches a
// slot: everything it does goes through the Worker's public surface.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <string>

namespace sluice::ioworker {

class ListeningSocket;
class Worker;

// What the daemon tells stats callers about itself.
struct DaemonInfo {
  std::string instance;
  std::string model;  // the container directory
  uint64_t budget_bytes = 0;
  uint64_t cache_bytes = 0;
  uint32_t readers = 0;
  bool verifies_records = false;  // sluice-io --verify
};

class RpcServer {
 public:
  using Log = std::function<void(const std::string&)>;
  // `worker` must outlive the server; `log` gets one line per notable event
  // (connections, attaches, refusals, detaches).
  RpcServer(Worker& worker, DaemonInfo info, Log log);

  // Serves connections on `socket` until one of `stop_signals` arrives and
  // returns that signal's number. The signals must have been captured with
  // kj::UnixEventPort::captureSignal() before any thread was started (which
  // also keeps them blocked in every later thread). Throws Error when the
  // socket fails.
  int serve(ListeningSocket& socket, std::initializer_list<int> stop_signals);

 private:
  Worker& worker_;
  DaemonInfo info_;
  Log log_;
};

}  // namespace sluice::ioworker
