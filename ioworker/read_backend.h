// ioworker/read_backend.h: how records get from the banks into slots: a pool
// of pread threads, or io_uring. A backend only reads into the slot memory
// of the job it was handed (marked LOADING by the scheduler) and reports
// each completion with the record already checked; it never picks slots.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "ioworker/bank_files.h"

namespace sluice {
class Container;
}

namespace sluice::ioworker {

struct ReadJob {
  uint32_t slot = 0;
  uint32_t generation = 0;
  uint32_t layer = 0;
  uint32_t expert = 0;
  uint32_t origin = 0;   // shm::ReadOrigin
  uint8_t* data = nullptr;  // the slot, 4096-aligned, at least the layer's stride
  uint64_t submitted_ns = 0;
};

// Called once per job from a backend thread: `problem` is empty when the
// record landed and its header (and crc32 when verifying) checked out.
using Completion = std::function<void(const ReadJob& job, std::optional<std::string> problem)>;

class ReadBackend {
 public:
  // Waits for every submitted job to complete.
  virtual ~ReadBackend() = default;
  // Starts every job of one scheduler pass (io_uring: one submission).
  virtual void submit(std::span<const ReadJob> jobs) = 0;
  virtual const char* name() const = 0;
  // Whether reads land in buffers registered with the kernel once.
  virtual bool registered_buffers() const { return false; }
};

// `threads` threads, each reading one record at a time through the
// container (its FileSystem, so tests can inject faults).
std::unique_ptr<ReadBackend> make_thread_backend(const Container& container, uint32_t threads, bool verify_crc,
                                                 Completion completion);

// Where every job's data lies: `count` slots of `bytes` bytes from `base`.
// io_uring registers it once, so a read does not map its pages each time.
struct SlotMemory {
  uint8_t* base = nullptr;
  uint32_t count = 0;
  uint32_t bytes = 0;
};

// io_uring with up to `depth` reads in flight on `banks`, into `slots`
// (registered when the kernel allows; plain reads otherwise). Throws Error
// when io_uring cannot be set up (old kernel, seccomp), so the caller can
// fall back.
std::unique_ptr<ReadBackend> make_uring_backend(const Container& container, const BankFiles& banks,
                                                uint32_t depth, SlotMemory slots, bool verify_crc,
                                                Completion completion);

// Checks a record that landed in memory: header against the manifest, and
// the payload crc32 when `verify_crc`. Returns the bare problem (the caller
// names the record), worded as Container::try_read_record words it.
std::optional<std::string> check_landed_record(const Container& container, uint32_t layer, uint32_t expert,
                                               const uint8_t* record, bool verify_crc);

}  // namespace sluice::ioworker
