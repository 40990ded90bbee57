// shm/segment.cpp: creating, reclaiming, attaching and unmapping segments
// through Boost.Interprocess, and the checked table accessors.
#include "shm/segment.h"

#include <cerrno>
#include <cstring>
#include <new>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/interprocess/anonymous_shared_memory.hpp>
#include <boost/interprocess/mapped_region.hpp>
#include <boost/interprocess/shared_memory_object.hpp>

#include "proto/error.h"
#include "shm/futex.h"
#include "shm/process.h"
#include "shm/segment_lock.h"

namespace bip = boost::interprocess;

namespace sluice::shm {

struct Segment::Mapping {
  std::unique_ptr<bip::shared_memory_object> object;  // null when anonymous
  bip::mapped_region region;
};

namespace {

std::string strip_slash(const std::string& name) { return !name.empty() && name[0] == '/' ? name.substr(1) : name; }

// Who holds the flock of an existing segment, for the refusal message.
std::string describe_owner(bip::shared_memory_object& object) {
  bip::offset_t size = 0;
  if (!object.get_size(size) || static_cast<uint64_t>(size) < sizeof(SegmentHeader)) return "a starting daemon";
  bip::mapped_region region(object, bip::read_only, 0, sizeof(SegmentHeader));
  const auto* header = static_cast<const SegmentHeader*>(region.get_address());
  if (header->magic != kSegmentMagic) return "a starting daemon";
  return fmt::format("pid {}", header->owner_pid);
}

}  // namespace

std::string segment_name(const std::string& instance) {
  if (instance.empty() || instance.size() > 48) fail("instance name \"{}\" must be 1 to 48 characters", instance);
  for (char c : instance) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
                    c == '.' || c == '-';
    if (!ok) fail("instance name \"{}\" may hold only letters, digits, '_', '.' and '-'", instance);
  }
  // The user id keeps one user's instance names out of another's way in
  // the /dev/shm every user shares.
  return fmt::format("sluice-{}-{}", ::geteuid(), instance);
}

Segment::Segment() = default;

Segment::~Segment() {
  if (owner_ && header_ != nullptr) {
    set_owner_state(OwnerState::kStopped);
    // Wake every sleeper so it sees the owner is gone now, not at its next timeout.
    futex_bump(header_->work);
    for (uint32_t i = 0; i < geometry_.max_clients; ++i) futex_bump(client(i).notify);
  }
  if (owner_ && !name_.empty()) bip::shared_memory_object::remove(name_.c_str());
  // The flock goes with the descriptor, which the mapping's object owns.
}

void Segment::adopt(std::unique_ptr<Mapping> mapping) {
  mapping_ = std::move(mapping);
  base_ = static_cast<uint8_t*>(mapping_->region.get_address());
  bytes_ = mapping_->region.get_size();
  header_ = reinterpret_cast<SegmentHeader*>(base_);
  if (mapping_->object) fd_ = mapping_->object->get_mapping_handle().handle;
}

void Segment::initialize(const Geometry& geometry, uint64_t identity, const std::string& instance) {
  geometry_ = geometry;
  layout_ = compute_layout(geometry);
  auto* header = new (base_) SegmentHeader();
  header->layout_version = kLayoutVersion;
  header->header_bytes = sizeof(SegmentHeader);
  header->geometry = geometry;
  header->layout = layout_;
  header->identity = identity;
  header->owner_pid = ::getpid();
  header->owner_start_time = process_start_time(::getpid());
  std::snprintf(header->instance, sizeof(header->instance), "%s", instance.c_str());
  header->owner_heartbeat_ns = monotonic_ns();
  init_segment_mutex(header->lock);
  new (base_ + layout_.stats) StatsBlock();
  for (uint32_t i = 0; i < geometry.max_clients; ++i) {
    new (base_ + layout_.clients + i * layout_.client_stride) ClientEntry();
    for (uint32_t& pin : client_pins(i)) pin = kNoSlot;
  }
  for (uint32_t i = 0; i < geometry.slot_count; ++i) new (&slot(i)) SlotEntry();
  IndexEntry* table = index_table();
  for (uint32_t i = 0; i < geometry.index_capacity; ++i) new (&table[i]) IndexEntry();
  new (&demand_ring()) RingHeader{0, 0, geometry.demand_ring_capacity, 0};
  new (&prefetch_ring()) RingHeader{0, 0, geometry.prefetch_ring_capacity, 0};
  if (geometry.mailbox_width != 0) {
    for (uint32_t c = 0; c < geometry.max_clients; ++c) {
      new (base_ + layout_.mailbox + c * layout_.mailbox_stride) MailboxHeader();
      std::atomic<uint32_t>* words = mailbox_words(c);
      for (uint64_t i = 0; i < mailbox_word_count(geometry); ++i) new (&words[i]) std::atomic<uint32_t>(0);
    }
  }
  // The magic goes last: an attacher that sees it sees a complete segment.
  std::atomic_thread_fence(std::memory_order_release);
  header->magic = kSegmentMagic;
}

std::unique_ptr<Segment> Segment::create(const std::string& instance, const Geometry& geometry, uint64_t identity) {
  const std::string name = segment_name(instance);
  const Layout layout = compute_layout(geometry);
  try {
    bip::shared_memory_object existing(bip::open_only, name.c_str(), bip::read_write);
    const int fd = existing.get_mapping_handle().handle;
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      fail("cache segment /dev/shm/{} is in use by a live sluice-io ({}); stop it or pick another instance",
           name, describe_owner(existing));
    }
    // Its owner died without cleaning up: the segment is ours to reclaim.
    bip::shared_memory_object::remove(name.c_str());
  } catch (const bip::interprocess_exception&) {
    // No such segment: the common case.
  }
  auto segment = std::unique_ptr<Segment>(new Segment());
  auto mapping = std::make_unique<Mapping>();
  try {
    mapping->object = std::make_unique<bip::shared_memory_object>(bip::create_only, name.c_str(), bip::read_write,
                                                                  bip::permissions(0600));
  } catch (const bip::interprocess_exception& e) {
    fail("cache segment /dev/shm/{}: cannot create: {}", name, e.what());
  }
  segment->name_ = name;
  segment->owner_ = true;  // from here on the destructor removes the name
  const int fd = mapping->object->get_mapping_handle().handle;
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    bip::shared_memory_object::remove(name.c_str());
    fail("cache segment /dev/shm/{}: another daemon took it while it was being created", name);
  }
  // Boost applies the permissions, but a umask must never widen or narrow them.
  struct stat st {};
  if (::fstat(fd, &st) != 0 || (st.st_mode & 07777) != 0600) {
    if (::fchmod(fd, 0600) != 0) {
      bip::shared_memory_object::remove(name.c_str());
      fail("cache segment /dev/shm/{}: cannot set mode 0600: {}", name, std::strerror(errno));
    }
  }
  try {
    mapping->object->truncate(static_cast<bip::offset_t>(layout.total));
    mapping->region = bip::mapped_region(*mapping->object, bip::read_write);
  } catch (const bip::interprocess_exception& e) {
    bip::shared_memory_object::remove(name.c_str());
    fail("cache segment /dev/shm/{}: cannot size or map {} bytes: {}", name, layout.total, e.what());
  }
  segment->adopt(std::move(mapping));
  segment->initialize(geometry, identity, instance);
  return segment;
}

std::unique_ptr<Segment> Segment::create_anonymous(const Geometry& geometry, uint64_t identity) {
  const Layout layout = compute_layout(geometry);
  auto segment = std::unique_ptr<Segment>(new Segment());
  auto mapping = std::make_unique<Mapping>();
  try {
    mapping->region = bip::anonymous_shared_memory(layout.total);
  } catch (const bip::interprocess_exception& e) {
    fail("anonymous cache segment of {} bytes: cannot map: {}", layout.total, e.what());
  }
  segment->owner_ = true;
  segment->adopt(std::move(mapping));
  segment->initialize(geometry, identity, "");
  return segment;
}

std::unique_ptr<Segment> Segment::attach(const std::string& requested, uint64_t expected_identity) {
  const std::string name = strip_slash(requested);
  auto segment = std::unique_ptr<Segment>(new Segment());
  auto mapping = std::make_unique<Mapping>();
  try {
    mapping->object = std::make_unique<bip::shared_memory_object>(bip::open_only, name.c_str(), bip::read_write);
    bip::offset_t size = 0;
    if (!mapping->object->get_size(size) || static_cast<uint64_t>(size) < sizeof(SegmentHeader)) {
      fail("cache segment /dev/shm/{}: too small to be a sluice cache ({} bytes)", name, size);
    }
    mapping->region = bip::mapped_region(*mapping->object, bip::read_write);
  } catch (const bip::interprocess_exception& e) {
    fail("cache segment /dev/shm/{}: cannot attach: {}", name, e.what());
  }
  segment->name_ = name;
  segment->adopt(std::move(mapping));
  const SegmentHeader& h = *segment->header_;
  if (h.magic != kSegmentMagic) fail("cache segment /dev/shm/{}: not a sluice cache (or not ready yet)", name);
  std::atomic_thread_fence(std::memory_order_acquire);
  if (h.layout_version != kLayoutVersion || h.header_bytes != sizeof(SegmentHeader)) {
    fail("cache segment /dev/shm/{}: layout version {} (header {} bytes), this build speaks {} ({} bytes)", name,
         h.layout_version, h.header_bytes, kLayoutVersion, sizeof(SegmentHeader));
  }
  const Layout layout = compute_layout(h.geometry);
  if (!(layout == h.layout) || layout.total > segment->bytes_) {
    fail("cache segment /dev/shm/{}: its table offsets disagree with its geometry", name);
  }
  if (h.identity != expected_identity) {
    fail("cache segment /dev/shm/{} serves another model (identity {:016x}, this container is {:016x})", name,
         h.identity, expected_identity);
  }
  segment->geometry_ = h.geometry;
  segment->layout_ = layout;
  if (!segment->owner_alive()) fail("cache segment /dev/shm/{}: its sluice-io (pid {}) is gone", name, h.owner_pid);
  return segment;
}

StatsBlock& Segment::stats() const { return *reinterpret_cast<StatsBlock*>(base_ + layout_.stats); }

ClientEntry& Segment::client(uint32_t index) const {
  if (index >= geometry_.max_clients) fail("cache segment: client {} out of range ({} clients)", index, geometry_.max_clients);
  return *reinterpret_cast<ClientEntry*>(base_ + layout_.clients + uint64_t{index} * layout_.client_stride);
}

std::span<uint32_t> Segment::client_pins(uint32_t index) const {
  auto* pins = reinterpret_cast<uint32_t*>(reinterpret_cast<uint8_t*>(&client(index)) + sizeof(ClientEntry));
  return {pins, 2 * size_t{geometry_.pins_per_client}};
}

SlotEntry& Segment::slot(uint32_t index) const {
  if (index >= geometry_.slot_count) fail("cache segment: slot {} out of range ({} slots)", index, geometry_.slot_count);
  return reinterpret_cast<SlotEntry*>(base_ + layout_.slots)[index];
}

uint8_t* Segment::slot_data(uint32_t index) const {
  if (index >= geometry_.slot_count) fail("cache segment: slot {} out of range ({} slots)", index, geometry_.slot_count);
  return base_ + layout_.data + uint64_t{index} * geometry_.slot_bytes;
}

IndexEntry* Segment::index_table() const { return reinterpret_cast<IndexEntry*>(base_ + layout_.index); }
RingHeader& Segment::demand_ring() const { return *reinterpret_cast<RingHeader*>(base_ + layout_.demand_ring); }
RingHeader& Segment::prefetch_ring() const { return *reinterpret_cast<RingHeader*>(base_ + layout_.prefetch_ring); }

MailboxHeader& Segment::mailbox_header(uint32_t client) const {
  if (geometry_.mailbox_width == 0) fail("cache segment {}: it has no hidden-state mailbox", name_.empty() ? "(embedded)" : name_);
  if (client >= geometry_.max_clients) {
    fail("cache segment {}: mailbox {} out of range ({} clients)", name_.empty() ? "(embedded)" : name_, client,
         geometry_.max_clients);
  }
  return *reinterpret_cast<MailboxHeader*>(base_ + layout_.mailbox + client * layout_.mailbox_stride);
}

std::atomic<uint32_t>* Segment::mailbox_words(uint32_t client) const {
  return reinterpret_cast<std::atomic<uint32_t>*>(reinterpret_cast<uint8_t*>(&mailbox_header(client)) +
                                                  sizeof(MailboxHeader));
}

bool Segment::owner_alive() const {
  const auto state = static_cast<OwnerState>(header_->owner_state.load(std::memory_order_acquire));
  if (state == OwnerState::kStopped || state == OwnerState::kFailed) return false;
  if (owner_ || fd_ < 0) return true;
  // The owner holds LOCK_EX for its whole life; getting a shared lock means it is gone.
  if (::flock(fd_, LOCK_SH | LOCK_NB) == 0) {
    ::flock(fd_, LOCK_UN);
    return false;
  }
  return true;
}

void Segment::set_owner_state(OwnerState state) {
  header_->owner_state.store(static_cast<uint32_t>(state), std::memory_order_release);
}

}  // namespace sluice::shm
