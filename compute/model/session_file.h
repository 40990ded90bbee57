// compute/model/session_file.h: a sequence's snapshot in a file (`sluice run
// --session`, chat's /save and /load). The file names the container it came
// from and is refused by any other; it appears whole or not at all (written
// atomically); every size in it is checked before anything is read by it.
//
// Layout, little-endian: the 48-byte header
//   magic "SLUICESQ" | u32 version (2) | u32 header bytes (48) |
//   u64 container identity | u32 position | u32 image runs |
//   u64 state floats | u32 crc32 of everything after the header |
//   u32 crc32 of the header's first 44 bytes
// then `position` i32 token ids, then the image runs (u32 first, u32
// length, 32-byte digest each: SequenceSnapshot::media), then the state's
// f32 values (SequenceSnapshot::state). Version 1 (no images; the runs
// field was reserved, 0) still loads.
#pragma once

#include <cstdint>
#include <string>

#include "compute/model/sequence_state.h"

namespace sluice {

inline constexpr uint32_t kSessionFileVersion = 2;

void save_session(const std::string& path, uint64_t container_identity,
                  const SequenceState& sequence);

// Restores `sequence` from `path`. Throws Error naming the file when it is
// not a session file, is damaged or cut short, comes from a container other
// than `container_identity` (naming both identities), or does not fit the
// sequence (another shape, a position past its context).
void load_session(const std::string& path, uint64_t container_identity, SequenceState& sequence);

}  // namespace sluice
