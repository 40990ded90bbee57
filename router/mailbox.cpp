// router/mailbox.cpp: the seqlock and the mailbox's memory (heap or a 0600
// file in /dev/shm). Payload words are relaxed atomics so a reader racing a
// writer is defined behaviour; the sequence check throws torn copies away.
#include "router/mailbox.h"

#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <new>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include "proto/error.h"
#include "shm/futex.h"

namespace sluice::router {

struct AccuracyWords {
  std::atomic<uint64_t> scored{0}, rank1_hits{0}, recalled{0}, real{0};
};

struct Mailbox::Header {
  std::atomic<uint64_t> magic{0};  // stored last, with release: the header is complete
  uint32_t version = 0;
  uint32_t header_bytes = 0;
  MailboxGeometry geometry;
  uint32_t reserved = 0;
  uint64_t identity = 0;
  alignas(64) std::atomic<uint32_t> seq{0};  // odd while a writer is mid-message; the futex word
  std::atomic<uint32_t> layer{0}, rows{0}, experts_per_row{0};
  std::atomic<uint64_t> step{0};
  alignas(64) std::atomic<uint64_t> messages{0}, skipped{0}, prefetches{0}, prefetched{0};
  std::atomic<uint32_t> lookahead{0};
  std::atomic<int32_t> pid{0};
  alignas(64) AccuracyWords accuracy[kMailboxLayers];
};

namespace {


size_t payload_words(const MailboxGeometry& g) {
  return size_t{g.max_rows} * g.hidden + size_t{g.max_rows} * g.max_experts;
}

void check_geometry(const MailboxGeometry& g) {
  if (g.hidden == 0 || g.max_rows == 0 || g.max_experts == 0 || g.hidden > (1u << 20) || g.max_rows > 4096 ||
      g.max_experts > 4096) {
    fail("router mailbox: geometry hidden={} rows={} experts={} is out of range", g.hidden, g.max_rows, g.max_experts);
  }
}

}  // namespace

size_t mailbox_bytes(const MailboxGeometry& geometry) {
  check_geometry(geometry);
  return sizeof(Mailbox::Header) + payload_words(geometry) * sizeof(std::atomic<uint32_t>);
}

std::string mailbox_path(const std::string& socket_path) {
  const std::string absolute = std::filesystem::absolute(socket_path).lexically_normal().string();
  uint64_t hash = 0xcbf29ce484222325;  // FNV-1a: stable across builds and processes
  for (unsigned char ch : absolute) hash = (hash ^ ch) * 0x100000001b3;
  return fmt::format("/dev/shm/sluice-router-{:016x}", hash);
}

Mailbox::Mailbox(void* base, size_t bytes, bool mapped) : base_(base), bytes_(bytes), mapped_(mapped) {}

Mailbox::~Mailbox() {
  if (mapped_) {
    ::munmap(base_, bytes_);
  } else {
    header().~Header();
    ::operator delete(base_, std::align_val_t{64});
  }
}

Mailbox::Header& Mailbox::header() const { return *static_cast<Header*>(base_); }

std::atomic<uint32_t>* Mailbox::words() const {
  return reinterpret_cast<std::atomic<uint32_t>*>(static_cast<char*>(base_) + sizeof(Header));
}

uint64_t Mailbox::identity() const { return header().identity; }

namespace {

void initialize(void* base, const MailboxGeometry& geometry, uint64_t identity) {
  auto* h = new (base) Mailbox::Header();
  h->version = kMailboxVersion;
  h->header_bytes = sizeof(Mailbox::Header);
  h->geometry = geometry;
  h->identity = identity;
  auto* words = reinterpret_cast<std::atomic<uint32_t>*>(static_cast<char*>(base) + sizeof(Mailbox::Header));
  for (size_t i = 0; i < payload_words(geometry); ++i) new (&words[i]) std::atomic<uint32_t>(0);
  h->magic.store(kMailboxMagic, std::memory_order_release);
}

}  // namespace

std::unique_ptr<Mailbox> Mailbox::in_process(const MailboxGeometry& geometry, uint64_t identity) {
  const size_t bytes = mailbox_bytes(geometry);
  void* base = ::operator new(bytes, std::align_val_t{64});
  initialize(base, geometry, identity);
  std::unique_ptr<Mailbox> box(new Mailbox(base, bytes, false));
  box->geometry_ = geometry;
  return box;
}

std::unique_ptr<Mailbox> Mailbox::create_shared(const std::string& path, const MailboxGeometry& geometry,
                                                uint64_t identity) {
  const size_t bytes = mailbox_bytes(geometry);
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) fail("router mailbox {}: cannot open: {}", path, std::strerror(errno));
  struct stat st {};
  if (::fchmod(fd, 0600) != 0 || ::fstat(fd, &st) != 0) {
    const int error = errno;
    ::close(fd);
    fail("router mailbox {}: cannot set mode 0600: {}", path, std::strerror(error));
  }
  // Reuse a mailbox left by an earlier router of the same model, so a client
  // that mapped it keeps publishing into the one the new router reads.
  bool reuse = false;
  if (static_cast<size_t>(st.st_size) == bytes) {
    void* probe = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (probe != MAP_FAILED) {
      const auto* h = static_cast<const Header*>(probe);
      reuse = h->magic.load(std::memory_order_acquire) == kMailboxMagic && h->version == kMailboxVersion &&
              h->header_bytes == sizeof(Header) && h->geometry == geometry && h->identity == identity;
      if (reuse) {
        ::close(fd);
        std::unique_ptr<Mailbox> box(new Mailbox(probe, bytes, true));
        box->geometry_ = geometry;
        return box;
      }
      ::munmap(probe, bytes);
    }
  }
  if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    const int error = errno;
    ::close(fd);
    fail("router mailbox {}: cannot size to {} bytes: {}", path, bytes, std::strerror(error));
  }
  void* base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int error = errno;
  ::close(fd);
  if (base == MAP_FAILED) fail("router mailbox {}: cannot map {} bytes: {}", path, bytes, std::strerror(error));
  static_cast<Header*>(base)->magic.store(0, std::memory_order_relaxed);
  initialize(base, geometry, identity);
  std::unique_ptr<Mailbox> box(new Mailbox(base, bytes, true));
  box->geometry_ = geometry;
  return box;
}

std::unique_ptr<Mailbox> Mailbox::open_shared(const std::string& path, std::optional<uint64_t> identity) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return nullptr;
  struct stat st {};
  if (::fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) < sizeof(Header)) {
    ::close(fd);
    return nullptr;
  }
  const auto bytes = static_cast<size_t>(st.st_size);
  void* base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (base == MAP_FAILED) return nullptr;
  const auto* h = static_cast<const Header*>(base);
  const bool valid = h->magic.load(std::memory_order_acquire) == kMailboxMagic && h->version == kMailboxVersion &&
                     h->header_bytes == sizeof(Header) && (!identity || h->identity == *identity);
  MailboxGeometry geometry = valid ? h->geometry : MailboxGeometry{};
  bool fits = false;
  if (valid) {
    try {
      fits = mailbox_bytes(geometry) == bytes;
    } catch (const Error&) {
      fits = false;
    }
  }
  if (!fits) {
    ::munmap(base, bytes);
    return nullptr;
  }
  std::unique_ptr<Mailbox> box(new Mailbox(base, bytes, true));
  box->geometry_ = geometry;
  return box;
}

bool Mailbox::publish(uint64_t step, uint32_t layer, uint32_t rows, std::span<const float> hidden,
                      uint32_t experts_per_row, std::span<const uint32_t> experts) {
  const MailboxGeometry& g = geometry_;
  if (rows == 0 || rows > g.max_rows || experts_per_row > g.max_experts || hidden.size() != size_t{rows} * g.hidden ||
      experts.size() != size_t{rows} * experts_per_row) {
    fail("router mailbox: message of {} rows, {} values, {}×{} experts does not fit hidden={} rows≤{} experts≤{}",
         rows, hidden.size(), rows, experts_per_row, g.hidden, g.max_rows, g.max_experts);
  }
  Header& h = header();
  uint32_t seq = h.seq.load(std::memory_order_relaxed);
  if ((seq & 1) != 0 || !h.seq.compare_exchange_strong(seq, seq + 1, std::memory_order_acquire)) return false;
  std::atomic_thread_fence(std::memory_order_release);
  h.step.store(step, std::memory_order_relaxed);
  h.layer.store(layer, std::memory_order_relaxed);
  h.rows.store(rows, std::memory_order_relaxed);
  h.experts_per_row.store(experts_per_row, std::memory_order_relaxed);
  std::atomic<uint32_t>* w = words();
  for (size_t i = 0; i < hidden.size(); ++i) w[i].store(std::bit_cast<uint32_t>(hidden[i]), std::memory_order_relaxed);
  std::atomic<uint32_t>* e = w + size_t{g.max_rows} * g.hidden;
  for (size_t i = 0; i < experts.size(); ++i) e[i].store(experts[i], std::memory_order_relaxed);
  h.seq.store(seq + 2, std::memory_order_release);
  shm::futex_wake_all(h.seq);
  return true;
}

uint32_t Mailbox::sequence() const { return header().seq.load(std::memory_order_acquire) & ~1u; }

std::optional<uint32_t> Mailbox::read(uint32_t seen, MailboxMessage& out) const {
  const MailboxGeometry& g = geometry_;
  Header& h = header();
  const std::atomic<uint32_t>* w = words();
  // A writer finishes a message in microseconds; one that stays odd for this
  // many tries has died mid-message (recover_dead_writer() fixes that).
  for (int spins = 0; spins < 100000; ++spins) {
    const uint32_t before = h.seq.load(std::memory_order_acquire);
    if (before == seen || before == 0) return std::nullopt;
    if ((before & 1) != 0) continue;
    out.step = h.step.load(std::memory_order_relaxed);
    out.layer = h.layer.load(std::memory_order_relaxed);
    const uint32_t rows = h.rows.load(std::memory_order_relaxed);
    const uint32_t per_row = h.experts_per_row.load(std::memory_order_relaxed);
    const bool sane = rows >= 1 && rows <= g.max_rows && per_row <= g.max_experts;
    if (sane) {
      out.rows = rows;
      out.experts_per_row = per_row;
      out.hidden.resize(size_t{rows} * g.hidden);
      for (size_t i = 0; i < out.hidden.size(); ++i) {
        out.hidden[i] = std::bit_cast<float>(w[i].load(std::memory_order_relaxed));
      }
      const std::atomic<uint32_t>* e = w + size_t{g.max_rows} * g.hidden;
      out.experts.resize(size_t{rows} * per_row);
      for (size_t i = 0; i < out.experts.size(); ++i) out.experts[i] = e[i].load(std::memory_order_relaxed);
    }
    std::atomic_thread_fence(std::memory_order_acquire);
    if (h.seq.load(std::memory_order_relaxed) == before) {
      if (!sane) return std::nullopt;  // a foreign writer's garbage: nothing usable
      return before;
    }
  }
  return std::nullopt;
}

bool Mailbox::recover_dead_writer(uint32_t odd) {
  Header& h = header();
  if ((odd & 1) == 0 || h.seq.load(std::memory_order_acquire) != odd) return false;
  h.rows.store(0, std::memory_order_relaxed);  // the half-written message reads as nothing
  uint32_t expected = odd;
  if (!h.seq.compare_exchange_strong(expected, odd + 1, std::memory_order_release)) return false;
  shm::futex_wake_all(h.seq);
  return true;
}

uint32_t Mailbox::raw_sequence() const { return header().seq.load(std::memory_order_acquire); }

void Mailbox::wait(uint32_t seen, std::chrono::nanoseconds timeout) const {
  const uint32_t now = header().seq.load(std::memory_order_acquire);
  if (now != seen && (now & 1) == 0) return;  // a new message is already there
  shm::futex_wait(header().seq, now, timeout);
}

void Mailbox::score(uint32_t layer, bool rank1_hit, uint64_t recalled, uint64_t real) {
  if (layer >= kMailboxLayers) return;
  AccuracyWords& a = header().accuracy[layer];
  a.scored.fetch_add(1, std::memory_order_relaxed);
  if (rank1_hit) a.rank1_hits.fetch_add(1, std::memory_order_relaxed);
  a.recalled.fetch_add(recalled, std::memory_order_relaxed);
  a.real.fetch_add(real, std::memory_order_relaxed);
}

void Mailbox::count_router(uint64_t messages, uint64_t skipped, uint64_t prefetches, uint64_t prefetched) {
  Header& h = header();
  h.messages.fetch_add(messages, std::memory_order_relaxed);
  h.skipped.fetch_add(skipped, std::memory_order_relaxed);
  h.prefetches.fetch_add(prefetches, std::memory_order_relaxed);
  h.prefetched.fetch_add(prefetched, std::memory_order_relaxed);
}

void Mailbox::set_router(int32_t pid, uint32_t lookahead) {
  header().pid.store(pid, std::memory_order_relaxed);
  header().lookahead.store(lookahead, std::memory_order_relaxed);
}

std::vector<LayerAccuracy> Mailbox::accuracy() const {
  std::vector<LayerAccuracy> out;
  for (uint32_t l = 0; l < kMailboxLayers; ++l) {
    const AccuracyWords& a = header().accuracy[l];
    LayerAccuracy row{l, a.scored.load(std::memory_order_relaxed), a.rank1_hits.load(std::memory_order_relaxed),
                      a.recalled.load(std::memory_order_relaxed), a.real.load(std::memory_order_relaxed)};
    if (row.scored > 0) out.push_back(row);
  }
  return out;
}

RouterCounters Mailbox::router_counters() const {
  const Header& h = header();
  return RouterCounters{h.messages.load(std::memory_order_relaxed), h.skipped.load(std::memory_order_relaxed),
                        h.prefetches.load(std::memory_order_relaxed), h.prefetched.load(std::memory_order_relaxed),
                        h.lookahead.load(std::memory_order_relaxed), h.pid.load(std::memory_order_relaxed)};
}

}  // namespace sluice::router
