// ioworker/worker.h: the I/O worker that owns a container's banks and the
// cache segment: it takes demand requests, clients' holds of their next
// batch (read behind demand, only while top-k slots stay unpinned, and
// taken back by a batch that finds no unpinned slot) and prefetch requests, evicts unpinned slots, reads records straight into
// slots, checks every header, and reaps dead clients. The public surface of ioworker/: sluice-io's
// main and RPC server, and compute's embedded mode, call only what is declared here.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "shm/layout.h"
#include "shm/populate.h"
#include "shm/segment.h"
#include "shm/stats.h"

namespace sluice {
class Container;
}

namespace sluice::ioworker {

// kDensity: hit_density.h, the default (bench replay on synthetic routing
// of three geometries: README "Cache policy"); kNextUse (eviction_score.h,
// the former default), kLfru and kLru for comparison.
enum class EvictionPolicy { kDensity, kNextUse, kLfru, kLru };
enum class IoBackend { kAuto, kUring, kThreads };

// Who asked for a prefetch (counted, otherwise opaque).
enum class PrefetchOrigin : uint32_t { kRpc = 1, kRouter = 2 };

struct WorkerOptions {
  std::string instance;        // names the segment; empty: anonymous (embedded mode)
  uint64_t cache_bytes = 0;    // the whole segment stays within this budget
  uint32_t readers = 4;        // reader threads, or reads in flight with io_uring
  IoBackend backend = IoBackend::kAuto;  // auto: io_uring, threads when it cannot start
  EvictionPolicy policy = EvictionPolicy::kDensity;
  bool verify_crc = false;     // check each record's payload crc32
  bool direct = true;          // O_DIRECT where the filesystem accepts it
  uint32_t max_clients = 16;   // ≤ shm::kMaxClients
  uint32_t mailbox_rows = 1;   // tokens per lookahead message: 1 (decode), or a prefill chunk
  uint64_t seed = 0x5eed;      // eviction sampling
  bool quiet = false;          // no "O_DIRECT refused" note on stderr
  // Show the cache being made resident (its start-up) on stderr, when stderr is a terminal.
  bool progress = false;
};

// What the worker's start-up did with its memory, for stats and bench.
struct Startup {
  shm::Residency residency;   // the slots made resident before the first read
  double register_seconds = 0;  // io_uring's registration of the slots (0: not registered)
  double seconds = 0;           // segment, residency, banks and backend, all of it
  uint64_t page_faults = 0;     // the process's, when start-up ended (shm::process_page_faults)
};

// What a cache segment's size depends on, from a container or (for a plan
// before any download) from a config.
struct CacheShape {
  uint32_t record_stride = 0;  // the largest record
  uint32_t experts = 0;        // of the widest MoE layer
  uint32_t hidden = 0;         // a mailbox row
  uint32_t top_k = 0;
};
CacheShape cache_shape(const Container& container);

// The bytes of a whole segment of `slots` slots for this container: slots
// of the largest record and every table.
uint64_t cache_bytes_for_slots(const CacheShape& shape, uint32_t slots, uint32_t max_clients,
                               uint32_t mailbox_rows = 1);
uint64_t cache_bytes_for_slots(const Container& container, uint32_t slots, uint32_t max_clients,
                               uint32_t mailbox_rows = 1);

// The smallest budget that holds the minimum cache (2 × top-k slots of the
// largest record) with its tables, for `max_clients` clients.
uint64_t min_cache_bytes(const Container& container, uint32_t max_clients, uint32_t mailbox_rows = 1);

// The segment geometry a budget buys for this container. Throws Error naming
// the budget and the minimum when it holds fewer than 2 × top-k slots.
shm::Geometry plan_cache_geometry(const CacheShape& shape, uint64_t cache_bytes,
                                  uint32_t max_clients, uint32_t mailbox_rows = 1);
shm::Geometry plan_cache_geometry(const Container& container, uint64_t cache_bytes, uint32_t max_clients,
                                  uint32_t mailbox_rows = 1);

class Worker {
 public:
  // Creates the segment (named or anonymous), makes its slots resident (huge
  // pages where shmem has them; no read or compute faults on them later),
  // opens the banks (probing O_DIRECT once per bank; a refusal is said once
  // on stderr and shown in stats) and starts the scheduler and the readers. `container` must
  // outlive the worker.
  Worker(const Container& container, const WorkerOptions& options);
  // Stops the readers (waiting for reads in flight), marks the segment
  // stopped so waiting clients fail fast, and removes a named segment.
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  shm::Segment& segment();
  // What an attaching client passes to shm::Segment::attach ("" when anonymous).
  const std::string& segment_name() const;
  const shm::Geometry& geometry() const;
  uint64_t identity() const;
  bool direct_io() const;
  const char* backend_name() const;  // "io_uring" or "threads"
  bool registered_buffers() const;   // io_uring reads into the slots registered once
  const Startup& startup() const;
  // The process's page faults since start-up ended (every thread's: in the
  // embedded mode the compute client's too).
  uint64_t page_faults_since_startup() const;

  // Queues reads of `experts` of `layer` that are not cached yet, behind every
  // demand read; dropped (and counted) when the queue is full or, when its
  // turn comes, no slot has gone cold (eviction.h choose_cold). Thread-safe; never blocks on I/O. Throws Error for a layer
  // without experts or an expert out of range.
  void prefetch(uint32_t layer, std::span<const uint32_t> experts, PrefetchOrigin origin);

  shm::StatsSnapshot stats() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace sluice::ioworker
