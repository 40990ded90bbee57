// compute/model/expert_source.h: where a MoE layer's routed expert records
// come from. The model asks for a layer's experts and consumes each record as
// it lands, in whatever order the source delivers; the direct source here
// reads from disk with no cache, the shared-memory cache plugs in behind the
// same interface. A source never hands out a record whose header it has not
// checked.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "proto/aligned_buffer.h"

namespace sluice {

class Container;

struct LandedExpert {
  uint32_t index = 0;               // position in the request
  const uint8_t* record = nullptr;  // the whole record, valid until released
};

struct ExpertSourceStats {
  uint64_t requests = 0;    // experts asked for
  uint64_t hits = 0;        // served without reading the disk
  uint64_t reads = 0;       // records read from disk
  uint64_t bytes_read = 0;
  double wait_seconds = 0;  // time the model spent blocked in next()
  bool direct_io = false;   // reads bypass the page cache
};

class ExpertSource {
 public:
  virtual ~ExpertSource() = default;
  // Asks for the records of distinct `experts` of model layer `layer`. Every
  // record of the previous request must have been handed out and released.
  virtual void request(uint32_t layer, std::span<const uint32_t> experts) = 0;
  // Blocks until a requested record not yet handed out is available.
  virtual LandedExpert next() = 0;
  // Gives a handed-out record back; its memory may be reused at once.
  virtual void release(const LandedExpert& expert) = 0;
  // Names the records of `experts` of `layer` that the next request() will
  // probably ask for (lookahead's guess), while this request's records are
  // still being handed out: a source may hold and read them meanwhile. It
  // never changes what a request hands out.
  virtual void hold(uint32_t /*layer*/, std::span<const uint32_t> /*experts*/) {}
  virtual ExpertSourceStats stats() const = 0;
  // How many handed-out records may be held at once. Calls are never
  // concurrent (the model serializes them), but with more than one record out
  // the model computes several experts in parallel.
  virtual size_t records_held_at_once() const { return 1; }
};

// Reads each requested record with one O_DIRECT pread into an aligned buffer,
// in request order, when next() asks for it. No cache: every request reads.
class DirectExpertSource final : public ExpertSource {
 public:
  DirectExpertSource(const Container& container, bool verify_crc);
  void request(uint32_t layer, std::span<const uint32_t> experts) override;
  LandedExpert next() override;
  void release(const LandedExpert& expert) override;
  ExpertSourceStats stats() const override { return stats_; }

 private:
  const Container& container_;
  bool verify_crc_;
  AlignedBuffer buffer_;
  uint32_t layer_ = 0;
  std::vector<uint32_t> experts_;
  size_t handed_out_ = 0;
  bool buffer_in_use_ = false;
  ExpertSourceStats stats_;
};

}  // namespace sluice
