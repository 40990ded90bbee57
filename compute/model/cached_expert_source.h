// compute/model/cached_expert_source.h: the expert source over the shared-
// memory cache: hits are pinned and computed in place, misses are posted in
// one batch per layer and consumed as they land. It hands out a slot only
// after checking the record header in it against the one it asked for. An
// attached source whose daemon dies reattaches to its successor and asks
// again for what it had not been handed yet; it never hands out a record twice.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "compute/model/expert_source.h"
#include "ioworker/worker.h"
#include "shm/client.h"
#include "shm/segment.h"
#include "shm/stats.h"

namespace sluice {

// Joins a running sluice-io and returns the name of the segment it serves;
// throws Error when no daemon takes us before `deadline` (or at once when
// there is no daemon to wait for).
using DaemonAttacher = std::function<std::string(std::chrono::steady_clock::time_point deadline)>;

class CachedExpertSource final : public ExpertSource {
 public:
  // Embedded mode: hosts an ioworker::Worker over an anonymous segment
  // (options.instance is ignored). A zero cache_bytes picks two working sets
  // (top-k × MoE layers × largest stride), at least the minimum cache.
  static std::unique_ptr<CachedExpertSource> embedded(const Container& container,
                                                      ioworker::WorkerOptions options);
  // Attached mode: maps the segment of a running sluice-io that `attach`
  // joins; refused when it serves another model. When that daemon is gone
  // (a supervisor restarts it), `attach` is called again, for at most
  // `read_timeout`, which also bounds every wait for a record.
  static std::unique_ptr<CachedExpertSource> attached(
      const Container& container, DaemonAttacher attach,
      std::chrono::milliseconds read_timeout = shm::Client::kDefaultReadTimeout);
  ~CachedExpertSource() override;

  void request(uint32_t layer, std::span<const uint32_t> experts) override;
  LandedExpert next() override;
  void release(const LandedExpert& expert) override;
  // Pins the guesses for the next request (shm::Client::hold).
  void hold(uint32_t layer, std::span<const uint32_t> experts) override;
  ExpertSourceStats stats() const override;
  // Every requested record has its own pinned slot.
  size_t records_held_at_once() const override { return SIZE_MAX; }

  // The whole cache's counters (all clients), for run summaries.
  shm::StatsSnapshot cache_stats() const;
  ioworker::Worker* worker() { return worker_.get(); }  // null when attached
  // The segment served now; it changes when the source reattaches.
  shm::Segment& segment() { return *segment_; }
  uint32_t client_id() const { return client_->id(); }  // its entry in the segment (and its mailbox)
  // Times this source moved to a new daemon's segment.
  uint32_t reattachments() const { return reattachments_; }

 private:
  CachedExpertSource(const Container& container, std::unique_ptr<ioworker::Worker> worker,
                     std::unique_ptr<shm::Segment> attached, DaemonAttacher attach,
                     std::chrono::milliseconds read_timeout);
  // The daemon is gone: maps its successor's segment and asks it for every
  // position of the batch not handed out yet.
  void reattach(const shm::OwnerGone& gone);
  void post_batch();

  const Container& container_;
  std::unique_ptr<ioworker::Worker> worker_;     // embedded mode
  std::unique_ptr<shm::Segment> attached_;       // attached mode
  DaemonAttacher attach_;                        // attached mode
  std::chrono::milliseconds read_timeout_;
  shm::Segment* segment_;
  std::unique_ptr<shm::Client> client_;
  // Segments of dead daemons: records handed out from them, and the
  // lookahead publisher, may still point into them until the next request.
  std::vector<std::unique_ptr<shm::Segment>> retired_, retiring_;
  uint32_t reattachments_ = 0;
  uint32_t layer_ = 0;
  std::vector<uint32_t> experts_;
  enum class Stage : uint8_t { kWaiting, kInUse, kReleased };
  std::vector<Stage> stages_;                // by LandedExpert::index
  std::vector<shm::LandedSlot> handed_out_;  // by LandedExpert::index
  std::vector<bool> from_current_;           // handed out by client_ (not a retired one)
  std::vector<uint32_t> posted_;             // the client's position → the request's position
  ExpertSourceStats stats_;
};

}  // namespace sluice
