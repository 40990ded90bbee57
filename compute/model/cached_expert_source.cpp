// compute/model/cached_expert_source.cpp: the ExpertSource over shm::Client,
// embedded (hosting the worker) or attached (to a running sluice-io), and
// the move to a restarted daemon's segment when the attached one dies.
#include "compute/model/cached_expert_source.h"

#include <thread>

#include "proto/container.h"
#include "proto/error.h"
#include "proto/record_format.h"

namespace sluice {
namespace {

constexpr auto kRetryPause = std::chrono::milliseconds(50);

// Two working sets (top-k experts of every MoE layer, twice): never under
// the minimum of 2 × top-k slots, since a container has at least one MoE layer.
uint64_t default_cache_bytes(const Container& container, uint32_t max_clients, uint32_t mailbox_rows) {
  const auto slots = static_cast<uint32_t>(2ull * container.top_k() * container.moe_layers().size());
  return ioworker::cache_bytes_for_slots(container, slots, max_clients, mailbox_rows);
}

// A restarted daemon may die again between handing out its segment and our
// mapping it: try again until the deadline, then say why the last try failed.
// The attacher does its own waiting for a daemon to answer.
std::unique_ptr<shm::Segment> join(const Container& container, const DaemonAttacher& attach,
                                   std::chrono::steady_clock::time_point deadline) {
  for (;;) {
    const std::string name = attach(deadline);
    try {
      return shm::Segment::attach(name, container.identity());
    } catch (const Error&) {
      if (std::chrono::steady_clock::now() >= deadline) throw;
    }
    std::this_thread::sleep_for(kRetryPause);
  }
}

}  // namespace

std::unique_ptr<CachedExpertSource> CachedExpertSource::embedded(const Container& container,
                                                                 ioworker::WorkerOptions options) {
  options.instance.clear();
  if (options.cache_bytes == 0) options.cache_bytes = default_cache_bytes(container, options.max_clients, options.mailbox_rows);
  auto worker = std::make_unique<ioworker::Worker>(container, options);
  return std::unique_ptr<CachedExpertSource>(new CachedExpertSource(
      container, std::move(worker), nullptr, nullptr, shm::Client::kDefaultReadTimeout));
}

std::unique_ptr<CachedExpertSource> CachedExpertSource::attached(
    const Container& container, DaemonAttacher attach, std::chrono::milliseconds read_timeout) {
  auto segment = join(container, attach, std::chrono::steady_clock::now() + read_timeout);
  return std::unique_ptr<CachedExpertSource>(new CachedExpertSource(
      container, nullptr, std::move(segment), std::move(attach), read_timeout));
}

CachedExpertSource::CachedExpertSource(const Container& container,
                                       std::unique_ptr<ioworker::Worker> worker,
                                       std::unique_ptr<shm::Segment> attached,
                                       DaemonAttacher attach,
                                       std::chrono::milliseconds read_timeout)
    : container_(container),
      worker_(std::move(worker)),
      attached_(std::move(attached)),
      attach_(std::move(attach)),
      read_timeout_(read_timeout),
      segment_(worker_ ? &worker_->segment() : attached_.get()),
      client_(std::make_unique<shm::Client>(*segment_, read_timeout_)) {}

// The client goes first: it unpins while the segment (and worker) still exist.
CachedExpertSource::~CachedExpertSource() { client_.reset(); }

void CachedExpertSource::request(uint32_t layer, std::span<const uint32_t> experts) {
  const MoeLayerInfo& info = container_.moe_layer(layer);  // throws for a dense layer
  for (uint32_t expert : experts) {
    if (expert >= info.experts) fail("layer {} expert {}: no such expert (the layer has {})", layer, expert, info.experts);
  }
  // Every record of the last batch is released: a dead daemon's segment is
  // needed only by the lookahead publisher, which moves on at its next message.
  retiring_ = std::move(retired_);
  retired_.clear();
  layer_ = layer;
  experts_.assign(experts.begin(), experts.end());
  stages_.assign(experts.size(), Stage::kWaiting);
  handed_out_.assign(experts.size(), shm::LandedSlot{});
  from_current_.assign(experts.size(), true);
  posted_.resize(experts.size());
  for (uint32_t p = 0; p < posted_.size(); ++p) posted_[p] = p;
  stats_.requests += experts.size();
  post_batch();
}

void CachedExpertSource::hold(uint32_t layer, std::span<const uint32_t> experts) {
  const MoeLayerInfo& info = container_.moe_layer(layer);
  for (uint32_t expert : experts) {
    if (expert >= info.experts)
      fail("hold: layer {} expert {}: no such expert (the layer has {})", layer, expert,
           info.experts);
  }
  client_->hold(layer, experts);
}

void CachedExpertSource::post_batch() {
  std::vector<uint32_t> asked(posted_.size());
  for (size_t p = 0; p < posted_.size(); ++p) asked[p] = experts_[posted_[p]];
  const MoeLayerInfo& info = container_.moe_layer(layer_);
  const shm::ClientCounters before = client_->counters();
  client_->request(layer_, asked);
  const shm::ClientCounters after = client_->counters();
  stats_.hits += after.hits - before.hits;
  stats_.reads += after.misses - before.misses;
  stats_.bytes_read += (after.misses - before.misses) * info.record_stride;
}

void CachedExpertSource::reattach(const shm::OwnerGone& gone) {
  if (!attach_) throw gone;  // embedded: the worker is this process; nothing to come back
  const auto deadline = std::chrono::steady_clock::now() + read_timeout_;
  std::unique_ptr<shm::Segment> segment;
  std::unique_ptr<shm::Client> client;
  while (!client) {
    segment = join(container_, attach_, deadline);
    try {
      client = std::make_unique<shm::Client>(*segment, read_timeout_);
    } catch (const shm::OwnerGone&) {
      if (std::chrono::steady_clock::now() >= deadline) throw;
    }
  }
  // The dead daemon's client goes (its pins die with that segment); the
  // segment stays mapped while records handed out from it are in use.
  client_ = std::move(client);
  retired_.push_back(std::move(attached_));
  attached_ = std::move(segment);
  segment_ = attached_.get();
  ++reattachments_;
  std::vector<uint32_t> waiting;
  for (uint32_t p = 0; p < experts_.size(); ++p) {
    if (stages_[p] == Stage::kWaiting) waiting.push_back(p);
    from_current_[p] = false;
  }
  posted_ = std::move(waiting);
  if (!posted_.empty()) post_batch();
}

LandedExpert CachedExpertSource::next() {
  shm::LandedSlot landed;
  for (;;) {
    const double waited_before = client_->counters().wait_seconds;
    try {
      landed = client_->next();
      stats_.wait_seconds += client_->counters().wait_seconds - waited_before;
      break;
    } catch (const shm::OwnerGone& gone) {
      stats_.wait_seconds += client_->counters().wait_seconds - waited_before;
      reattach(gone);
    }
  }
  const uint32_t index = posted_.at(landed.index);
  const uint32_t expert = experts_.at(index);
  const MoeLayerInfo& info = container_.moe_layer(layer_);
  // The pinned slot must hold exactly the record asked for: recheck its header.
  const RecordHeader found = RecordHeader::decode(landed.data);
  if (auto problem = check_header(found, expected_header(info.layout, layer_, expert, info.codebook_base))) {
    client_->release(landed);
    fail("expert cache slot {}: {}", landed.slot, *problem);
  }
  stages_[index] = Stage::kInUse;
  handed_out_[index] = landed;
  from_current_[index] = true;
  return LandedExpert{index, landed.data};
}

void CachedExpertSource::release(const LandedExpert& expert) {
  if (expert.index >= handed_out_.size() || stages_[expert.index] != Stage::kInUse ||
      handed_out_[expert.index].data != expert.record) {
    fail("expert source: release of a record that was not handed out (layer {}, position {})", layer_, expert.index);
  }
  // A record of a dead daemon's segment has no pin left to drop.
  if (from_current_[expert.index]) client_->release(handed_out_[expert.index]);
  stages_[expert.index] = Stage::kReleased;
}

ExpertSourceStats CachedExpertSource::stats() const {
  ExpertSourceStats out = stats_;
  out.direct_io = segment_->header().direct_io != 0;
  return out;
}

shm::StatsSnapshot CachedExpertSource::cache_stats() const {
  return shm::read_stats(*segment_);
}

}  // namespace sluice
