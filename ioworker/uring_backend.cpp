// ioworker/uring_backend.cpp: reads through io_uring, one whole-record read
// per job straight into its slot, the slots registered as fixed buffers, a
// scheduler pass in one submission. One thread submits (under a mutex), one
// thread reaps completions; the ring is never touched otherwise.
#include <cerrno>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include <sys/uio.h>

#include <liburing.h>

#include "ioworker/read_backend.h"
#include "proto/container.h"
#include "proto/error.h"

namespace sluice::ioworker {
namespace {

class UringBackend final : public ReadBackend {
 public:
  UringBackend(const Container& container, const BankFiles& banks, uint32_t depth, SlotMemory slots,
               bool verify_crc, Completion completion)
      : container_(container), banks_(banks), slots_(slots), verify_crc_(verify_crc),
        completion_(std::move(completion)) {
    // Room for every read the scheduler allows plus the stop marker.
    const int err = io_uring_queue_init(std::max<uint32_t>(depth, 1) * 2 + 2, &ring_, 0);
    if (err < 0) fail("io_uring: cannot set up a ring: {}", std::strerror(-err));
    register_slots();
    reaper_ = std::thread([this] { reap(); });
  }

  ~UringBackend() override {
    {
      std::lock_guard lock(submit_mutex_);
      io_uring_sqe* sqe = get_sqe();
      io_uring_prep_nop(sqe);
      io_uring_sqe_set_data(sqe, nullptr);  // the stop marker, after every read
      io_uring_submit(&ring_);
    }
    reaper_.join();
    io_uring_queue_exit(&ring_);
  }

  void submit(std::span<const ReadJob> jobs) override {
    std::lock_guard lock(submit_mutex_);
    for (const ReadJob& job : jobs) {
      const MoeLayerInfo& info = container_.moe_layer(job.layer);
      auto owned = std::make_unique<ReadJob>(job);
      io_uring_sqe* sqe = get_sqe();
      const uint64_t offset = uint64_t{job.expert} * info.record_stride;
      if (slots_per_buffer_ > 0 && job.slot < slots_.count) {
        io_uring_prep_read_fixed(sqe, banks_.fd(job.layer), job.data, info.record_stride, offset,
                                 static_cast<int>(job.slot / slots_per_buffer_));
      } else {
        io_uring_prep_read(sqe, banks_.fd(job.layer), job.data, info.record_stride, offset);
      }
      io_uring_sqe_set_data(sqe, owned.release());
    }
    const int err = io_uring_submit(&ring_);
    if (err < 0) fail("io_uring: submit failed: {}", std::strerror(-err));
  }

  const char* name() const override { return "io_uring"; }
  bool registered_buffers() const override { return slots_per_buffer_ > 0; }

 private:
  // The kernel takes buffers of at most 1 GiB: the slots go in runs of whole
  // slots. Refused (locked-memory limit, old kernel): plain reads, same data.
  void register_slots() {
    constexpr uint64_t kMaxBuffer = uint64_t{1} << 30;
    if (slots_.base == nullptr || slots_.count == 0 || slots_.bytes == 0 || slots_.bytes > kMaxBuffer) return;
    const uint32_t per = static_cast<uint32_t>(std::min<uint64_t>(kMaxBuffer / slots_.bytes, slots_.count));
    std::vector<iovec> buffers;
    for (uint32_t first = 0; first < slots_.count; first += per) {
      const uint32_t n = std::min(per, slots_.count - first);
      buffers.push_back(iovec{slots_.base + uint64_t{first} * slots_.bytes, uint64_t{n} * slots_.bytes});
    }
    if (io_uring_register_buffers(&ring_, buffers.data(), static_cast<unsigned>(buffers.size())) == 0) {
      slots_per_buffer_ = per;
    }
  }

  // Caller holds submit_mutex_. The scheduler bounds reads in flight below the
  // ring size, so a full SQ only means the kernel has not consumed it yet.
  io_uring_sqe* get_sqe() {
    for (;;) {
      if (io_uring_sqe* sqe = io_uring_get_sqe(&ring_)) return sqe;
      io_uring_submit(&ring_);
    }
  }

  void reap() {
    for (;;) {
      io_uring_cqe* cqe = nullptr;
      const int err = io_uring_wait_cqe(&ring_, &cqe);
      if (err == -EINTR) continue;
      if (err < 0) fail("io_uring: waiting for a completion failed: {}", std::strerror(-err));
      auto* raw = static_cast<ReadJob*>(io_uring_cqe_get_data(cqe));
      const int result = cqe->res;
      io_uring_cqe_seen(&ring_, cqe);
      if (raw == nullptr) return;
      const std::unique_ptr<ReadJob> job(raw);
      completion_(*job, check(*job, result));
    }
  }

  std::optional<std::string> check(const ReadJob& job, int result) const {
    const MoeLayerInfo& info = container_.moe_layer(job.layer);
    if (result < 0) {
      return fmt::format("read of {} bytes at offset {} of {} failed: {}", info.record_stride,
                         uint64_t{job.expert} * info.record_stride, info.file, std::strerror(-result));
    }
    if (static_cast<uint32_t>(result) != info.record_stride) {
      return fmt::format("short read: {} of {} bytes at offset {} of {}", result, info.record_stride,
                         uint64_t{job.expert} * info.record_stride, info.file);
    }
    return check_landed_record(container_, job.layer, job.expert, job.data, verify_crc_);
  }

  const Container& container_;
  const BankFiles& banks_;
  SlotMemory slots_;
  uint32_t slots_per_buffer_ = 0;  // 0: not registered
  bool verify_crc_;
  Completion completion_;
  io_uring ring_{};
  std::mutex submit_mutex_;
  std::thread reaper_;
};

}  // namespace

std::unique_ptr<ReadBackend> make_uring_backend(const Container& container, const BankFiles& banks,
                                                uint32_t depth, SlotMemory slots, bool verify_crc,
                                                Completion completion) {
  return std::make_unique<UringBackend>(container, banks, depth, slots, verify_crc, std::move(completion));
}

std::optional<std::string> check_landed_record(const Container& container, uint32_t layer, uint32_t expert,
                                               const uint8_t* record, bool verify_crc) {
  const MoeLayerInfo& info = container.moe_layer(layer);
  const RecordHeader found = RecordHeader::decode(record);
  if (auto problem = check_header(found, expected_header(info.layout, layer, expert, info.codebook_base))) {
    // Same bare wording as Container::try_read_record: the caller names the record.
    const std::string prefix = fmt::format("layer {} expert {}: ", layer, expert);
    if (problem->starts_with(prefix)) problem->erase(0, prefix.size());
    return problem;
  }
  if (verify_crc) {
    const uint32_t computed = payload_crc32(record, found.payload_end);
    if (computed != found.crc32) {
      return fmt::format("checksum mismatch (header says {:08x}, payload has {:08x})", found.crc32, computed);
    }
  }
  return std::nullopt;
}

}  // namespace sluice::ioworker
