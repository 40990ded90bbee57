// proto/checksum.h: the one checksum of the container format, crc32 with the
// zlib polynomial, over buffers of any size. Pure arithmetic: no I/O, no
// knowledge of what the bytes mean.
#pragma once

#include <cstddef>
#include <cstdint>

#include <zlib.h>

namespace sluice {

// crc32 of `size` bytes, continuing from `running` (0 starts a new sum).
inline uint32_t crc32_bytes(const void* data, size_t size, uint32_t running = 0) {
  if (size == 0) return running;  // zlib answers 0 for a null buffer, dropping `running`
  return static_cast<uint32_t>(::crc32_z(running, static_cast<const Bytef*>(data), size));
}

}  // namespace sluice
