// compute/model/cached_expert_source.h: the expert source over the shared-
// memory cache: hits are pinned and computed in place, misses are posted in
// one batch per layer and consumed as they land. It hands out a slot only
// after checking the record header in it against the one it asked for.
#pragma once

#include <cstdint>
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

class CachedExpertSource final : public ExpertSource {
 public:
  // Embedded mode: hosts an ioworker::Worker over an anonymous segment
  // (options.instance is ignored). A zero cache_bytes picks two working sets
  // (top-k × MoE layers × largest stride), at least the minimum cache.
  static std::unique_ptr<CachedExpertSource> embedded(const Container& container,
                                                      ioworker::WorkerOptions options);
  // Attached mode: maps the segment `segment_name` of a running sluice-io
  // (its attach RPC hands the name out); refused when it serves another model.
  static std::unique_ptr<CachedExpertSource> attached(const Container& container,
                                                      const std::string& segment_name);
  ~CachedExpertSource() override;

  void request(uint32_t layer, std::span<const uint32_t> experts) override;
  LandedExpert next() override;
  void release(const LandedExpert& expert) override;
  ExpertSourceStats stats() const override;
  // Every requested record has its own pinned slot.
  size_t records_held_at_once() const override { return SIZE_MAX; }

  // The whole cache's counters (all clients), for run summaries.
  shm::StatsSnapshot cache_stats() const;
  ioworker::Worker* worker() { return worker_.get(); }  // null when attached
  shm::Segment& segment() { return segment_; }
  uint32_t client_id() const { return client_->id(); }  // its entry in the segment (and its mailbox)

 private:
  CachedExpertSource(const Container& container, std::unique_ptr<ioworker::Worker> worker,
                     std::unique_ptr<shm::Segment> attached);

  const Container& container_;
  std::unique_ptr<ioworker::Worker> worker_;     // embedded mode
  std::unique_ptr<shm::Segment> attached_;       // attached mode
  shm::Segment& segment_;
  std::unique_ptr<shm::Client> client_;
  uint32_t layer_ = 0;
  std::vector<uint32_t> experts_;
  std::vector<shm::LandedSlot> handed_out_;  // by LandedExpert::index
  ExpertSourceStats stats_;
};

}  // namespace sluice
