// compute/kernels/f16c.h: internal to the vector kernel files, which are built
// with -mf16c: the f16 group and row scales widened by the F16C instruction.
// proto/f16.h's portable conversion spends a dozen scalar operations and
// branches on each scale; the trunk tiles convert one per row per 128
// columns, which made it a sixth of the q4 decode tile's time. Internal
// linkage, so the scalar build never links this body.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace sluice::kernels::detail {
namespace {

// Exactly proto/f16.h's f16_to_f32 for every finite or infinite h (subnormals
// included); the containers' scales are checked finite at load.
inline float f16c_to_f32(uint16_t h) { return _cvtsh_ss(h); }

}  // namespace
}  // namespace sluice::kernels::detail
