// router/mailbox.h: the hidden-state mailbox between a compute client and the
// router: the client publishes (step, layer, MoE input rows, real routing) under
// a seqlock, the router takes consistent snapshots and writes its accuracy
// counters back. Publishing never blocks the client and a reader never
// returns a half-written message.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace sluice::router {

inline constexpr uint64_t kMailboxMagic = 0x584F424C49414D52;  // "RMAILBOX"
inline constexpr uint32_t kMailboxVersion = 1;
inline constexpr uint32_t kMailboxLayers = 256;  // FORMAT.md: layers ≤ 256

struct MailboxGeometry {
  uint32_t hidden = 0;
  uint32_t max_rows = 0;     // tokens per message (1 in decode; the chunk in prefill)
  uint32_t max_experts = 0;  // real routed experts per row (the model's top-k)
  bool operator==(const MailboxGeometry&) const = default;
};

// One message: the MoE input of `layer` for `rows` tokens of forward call
// `step`, and the experts the real router chose for each row.
struct MailboxMessage {
  uint64_t step = 0;  // Publisher: the writer's pid << 40 | its forward-call count
  uint32_t layer = 0;
  uint32_t rows = 0;
  uint32_t experts_per_row = 0;
  std::vector<float> hidden;      // rows × geometry.hidden
  std::vector<uint32_t> experts;  // rows × experts_per_row
};

// Per layer, what the router's guesses scored against the real routing.
struct LayerAccuracy {
  uint32_t layer = 0;
  uint64_t scored = 0;       // guesses compared with a real routing
  uint64_t rank1_hits = 0;   // the guess at rank 1 was among the real experts
  uint64_t recalled = 0;     // real experts that were among the guess
  uint64_t real = 0;         // real experts compared
  double precision_at_1() const { return scored ? double(rank1_hits) / double(scored) : 0.0; }
  double recall() const { return real ? double(recalled) / double(real) : 0.0; }
};

struct RouterCounters {
  uint64_t messages = 0;     // snapshots taken
  uint64_t skipped = 0;      // messages overwritten before the router read them
  uint64_t prefetches = 0;   // prefetch calls sent
  uint64_t prefetched = 0;   // experts asked for in them
  uint32_t lookahead = 0;    // K
  int32_t pid = 0;           // the router serving this mailbox (0: none yet)
};

class Mailbox {
 public:
  // A mailbox in this process's memory (embedded mode).
  static std::unique_ptr<Mailbox> in_process(const MailboxGeometry& geometry, uint64_t identity);
  // Opens the shared mailbox at `path` (under /dev/shm), creating it (mode
  // 0600) or re-initializing one of another geometry or identity; the router
  // process calls this. A client mapping of an older incarnation stays valid.
  static std::unique_ptr<Mailbox> create_shared(const std::string& path, const MailboxGeometry& geometry,
                                                uint64_t identity);
  // Maps an existing shared mailbox; nullptr when there is none or it serves
  // another container than `identity` (the client then runs without
  // lookahead). No identity: any container (`sluice stats` reading accuracy).
  static std::unique_ptr<Mailbox> open_shared(const std::string& path, std::optional<uint64_t> identity);
  ~Mailbox();
  Mailbox(const Mailbox&) = delete;
  Mailbox& operator=(const Mailbox&) = delete;

  const MailboxGeometry& geometry() const { return geometry_; }
  uint64_t identity() const;

  // Writes a message; returns false without waiting when another writer holds
  // the mailbox. Throws Error when the message exceeds the geometry.
  bool publish(uint64_t step, uint32_t layer, uint32_t rows, std::span<const float> hidden,
               uint32_t experts_per_row, std::span<const uint32_t> experts);

  // The sequence number: even, and advanced by 2 per message.
  uint32_t sequence() const;
  // Copies the latest message if the sequence differs from `seen`; returns the
  // sequence it copied at (retrying while a writer is mid-message), or nullopt
  // when nothing new has been published.
  std::optional<uint32_t> read(uint32_t seen, MailboxMessage& out) const;
  // Sleeps until a message other than `seen` is complete or the timeout passes.
  void wait(uint32_t seen, std::chrono::nanoseconds timeout) const;
  // The sequence as stored: odd while a writer is mid-message.
  uint32_t raw_sequence() const;
  // A writer killed mid-message leaves the sequence odd and every later
  // publish refused; the reader, having seen `odd` for long enough, ends that
  // message as empty. False when the sequence has moved on.
  bool recover_dead_writer(uint32_t odd);

  // The router's side: counters readable by anyone mapping the mailbox.
  void score(uint32_t layer, bool rank1_hit, uint64_t recalled, uint64_t real);
  void count_router(uint64_t messages, uint64_t skipped, uint64_t prefetches, uint64_t prefetched);
  void set_router(int32_t pid, uint32_t lookahead);
  std::vector<LayerAccuracy> accuracy() const;  // layers with any score
  RouterCounters router_counters() const;

  struct Header;  // the shared layout, defined in mailbox.cpp

 private:
  Mailbox(void* base, size_t bytes, bool mapped);
  Header& header() const;
  std::atomic<uint32_t>* words() const;

  void* base_;
  size_t bytes_;
  bool mapped_;
  MailboxGeometry geometry_;
};

// Bytes of a mailbox of this geometry.
size_t mailbox_bytes(const MailboxGeometry& geometry);
// Where the router of the sluice-io answering on `socket_path` keeps its
// mailbox: /dev/shm/sluice-router-<hash of the absolute socket path>. The
// router, attached clients and `sluice stats` all know the socket.
std::string mailbox_path(const std::string& socket_path);

}  // namespace sluice::router
