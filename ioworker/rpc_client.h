// ioworker/rpc_client.h: the client side of sluice-io's control socket, for
// `sluice run --attach`, `sluice stats` and the router: attach (what
// shm::Segment::attach and shm::Client need), detach, prefetch, stats. It
// never maps the segment itself; a hung or vanished daemon is an Error, never
// a hang.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "proto/error.h"
#include "shm/layout.h"
#include "shm/stats.h"

namespace sluice::ioworker {

enum class RpcPrefetchOrigin { kRouter, kClient };

// Nothing listens on the socket, or the daemon went away mid-call: unlike a
// refusal, trying again may work once a supervisor has restarted it.
class DaemonUnreachable : public Error {
 public:
  using Error::Error;
};

// What a successful attach hands back.
struct Attachment {
  std::string segment_name;  // for shm::Segment::attach
  shm::Geometry geometry;    // must equal the mapped segment's
  uint64_t segment_bytes = 0;
  uint64_t identity = 0;
  uint32_t session = 0;      // for detach
  bool direct_io = false;
  bool verifies_records = false;  // the daemon checks each record's crc32
};

// The daemon's stats: the segment's counters plus the daemon itself.
struct DaemonStats {
  shm::StatsSnapshot cache;
  int32_t pid = 0;
  std::string instance;
  std::string model;
  std::string segment_name;
  uint64_t budget_bytes = 0;
  uint64_t cache_bytes = 0;
  std::string backend;
  uint32_t readers = 0;
  double uptime_seconds = 0;
  uint32_t sessions = 0;
  // Start-up and page faults since (the Stats message's fields of those names).
  double startup_seconds = 0, resident_seconds = 0, register_seconds = 0;
  std::string populate, huge_pages;
  uint64_t huge_bytes = 0;
  bool registered = false;
  uint64_t page_faults = 0;
};

// Not thread-safe: one kj event loop runs on the thread that created the
// client, and every call must come from that thread (which must not run
// another kj event loop).
class RpcClient {
 public:
  // Connects to `socket_path`; throws DaemonUnreachable naming the path when
  // nothing answers there (and when the daemon goes away during a call). Every later call fails
  // with an Error after `timeout`.
  explicit RpcClient(const std::string& socket_path,
                     std::chrono::milliseconds timeout = std::chrono::milliseconds(10000));
  ~RpcClient();
  RpcClient(const RpcClient&) = delete;
  RpcClient& operator=(const RpcClient&) = delete;

  // Attaches this process (its pid) for the container `identity`. Throws
  // Error with the daemon's reason when it serves another container or, with
  // `verify`, when it does not check record crc32s.
  Attachment attach(uint64_t identity, bool verify = false);
  void detach(uint32_t session);
  // Returns how many distinct experts the daemon queued.
  uint32_t prefetch(uint32_t layer, std::span<const uint32_t> experts, RpcPrefetchOrigin origin);
  DaemonStats stats();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace sluice::ioworker
