// proto/aligned_buffer.h: an owned, zero-initialised byte buffer whose start
// sits on a chosen power-of-two boundary (64 for trunk tensors, 4096 for
// O_DIRECT record reads). It never reallocates or grows after construction.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>

namespace sluice {

class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  // The allocation is rounded up to a multiple of `alignment` (aligned_alloc
  // requires it); size() still reports the requested size.
  AlignedBuffer(size_t size, size_t alignment) : size_(size) {
    const size_t rounded = (size + alignment - 1) / alignment * alignment;
    if (rounded == 0) return;
    data_ = static_cast<uint8_t*>(std::aligned_alloc(alignment, rounded));
    if (data_ == nullptr) throw std::bad_alloc();
    std::memset(data_, 0, rounded);
  }
  ~AlignedBuffer() { std::free(data_); }
  AlignedBuffer(AlignedBuffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}
  AlignedBuffer& operator=(AlignedBuffer&& other) noexcept {
    if (this != &other) {
      std::free(data_);
      data_ = std::exchange(other.data_, nullptr);
      size_ = std::exchange(other.size_, 0);
    }
    return *this;
  }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;

  uint8_t* data() { return data_; }
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace sluice
