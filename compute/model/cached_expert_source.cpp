// compute/model/cached_expert_source.cpp: the ExpertSource over shm::Client,
// embedded (hosting the worker) or attached (to a running sluice-io).
#include "compute/model/cached_expert_source.h"

#include "proto/container.h"
#include "proto/error.h"
#include "proto/record_format.h"

namespace sluice {
namespace {

// Two working sets (top-k experts of every MoE layer, twice): never under
// the minimum of 2 × top-k slots, since a container has at least one MoE layer.
uint64_t default_cache_bytes(const Container& container, uint32_t max_clients, uint32_t mailbox_rows) {
  const auto slots = static_cast<uint32_t>(2ull * container.top_k() * container.moe_layers().size());
  return ioworker::cache_bytes_for_slots(container, slots, max_clients, mailbox_rows);
}

}  // namespace

std::unique_ptr<CachedExpertSource> CachedExpertSource::embedded(const Container& container,
                                                                 ioworker::WorkerOptions options) {
  options.instance.clear();
  if (options.cache_bytes == 0) options.cache_bytes = default_cache_bytes(container, options.max_clients, options.mailbox_rows);
  auto worker = std::make_unique<ioworker::Worker>(container, options);
  return std::unique_ptr<CachedExpertSource>(new CachedExpertSource(container, std::move(worker), nullptr));
}

std::unique_ptr<CachedExpertSource> CachedExpertSource::attached(const Container& container,
                                                                 const std::string& segment_name) {
  auto segment = shm::Segment::attach(segment_name, container.identity());
  return std::unique_ptr<CachedExpertSource>(new CachedExpertSource(container, nullptr, std::move(segment)));
}

CachedExpertSource::CachedExpertSource(const Container& container, std::unique_ptr<ioworker::Worker> worker,
                                       std::unique_ptr<shm::Segment> attached)
    : container_(container),
      worker_(std::move(worker)),
      attached_(std::move(attached)),
      segment_(worker_ ? worker_->segment() : *attached_),
      client_(std::make_unique<shm::Client>(segment_)) {}

// The client goes first: it unpins while the segment (and worker) still exist.
CachedExpertSource::~CachedExpertSource() { client_.reset(); }

void CachedExpertSource::request(uint32_t layer, std::span<const uint32_t> experts) {
  const MoeLayerInfo& info = container_.moe_layer(layer);  // throws for a dense layer
  for (uint32_t expert : experts) {
    if (expert >= info.experts) fail("layer {} expert {}: no such expert (the layer has {})", layer, expert, info.experts);
  }
  const shm::ClientCounters before = client_->counters();
  client_->request(layer, experts);
  const shm::ClientCounters after = client_->counters();
  layer_ = layer;
  experts_.assign(experts.begin(), experts.end());
  handed_out_.assign(experts.size(), shm::LandedSlot{});
  stats_.requests += experts.size();
  stats_.hits += after.hits - before.hits;
  stats_.reads += after.misses - before.misses;
  stats_.bytes_read += (after.misses - before.misses) * info.record_stride;
}

LandedExpert CachedExpertSource::next() {
  const double waited_before = client_->counters().wait_seconds;
  const shm::LandedSlot landed = client_->next();
  stats_.wait_seconds += client_->counters().wait_seconds - waited_before;
  const uint32_t expert = experts_.at(landed.index);
  const MoeLayerInfo& info = container_.moe_layer(layer_);
  // The pinned slot must hold exactly the record asked for: recheck its header.
  const RecordHeader found = RecordHeader::decode(landed.data);
  if (auto problem = check_header(found, expected_header(info.layout, layer_, expert, info.codebook_base))) {
    client_->release(landed);
    fail("expert cache slot {}: {}", landed.slot, *problem);
  }
  handed_out_[landed.index] = landed;
  return LandedExpert{landed.index, landed.data};
}

void CachedExpertSource::release(const LandedExpert& expert) {
  if (expert.index >= handed_out_.size() || handed_out_[expert.index].data != expert.record) {
    fail("expert source: release of a record that was not handed out (layer {}, position {})", layer_, expert.index);
  }
  client_->release(handed_out_[expert.index]);
  handed_out_[expert.index] = shm::LandedSlot{};
}

ExpertSourceStats CachedExpertSource::stats() const {
  ExpertSourceStats out = stats_;
  out.direct_io = segment_.header().direct_io != 0;
  return out;
}

shm::StatsSnapshot CachedExpertSource::cache_stats() const { return shm::read_stats(segment_); }

}  // namespace sluice
