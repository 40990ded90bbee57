// compute/convert/mxfp4.h: Kimi K3's MXFP4 expert sources (k3.md §3):
// X.weight_packed (U8 [out, in/2], E2M1 nibbles, element 2j in the low
// nibble of byte j) and X.weight_scale (U8 [out, in/32], E8M0 2^(e−127)),
// decoded exactly to f32. Decoding checks what the shipped quantiser
// guarantees, so a misread layout is refused instead of converted.
#pragma once

#include <cstdint>
#include <string>

namespace sluice::convert {

inline constexpr uint64_t kMxfp4Group = 32;

std::string mxfp4_packed_name(const std::string& weight);  // X.weight → X.weight_packed
std::string mxfp4_scale_name(const std::string& weight);   // X.weight → X.weight_scale

// The E2M1 value of a nibble: bit 3 the sign, bits 0–2 index {0, .5, 1, 1.5, 2, 3, 4, 6}.
float e2m1_to_f32(uint8_t nibble);

// out (rows × cols) from `packed` (rows × cols/2 bytes) and `scales`
// (rows × cols/32 bytes). Throws Error naming `tensor`, the row and the group
// when a scale is 255 (NaN) or a non-zero group's largest |E2M1| is below 3
// (the quantiser's k = ceil(log2(amax/6)) puts amax/scale in (3, 6]).
void decode_mxfp4(const uint8_t* packed, const uint8_t* scales, uint64_t rows, uint64_t cols,
                  const std::string& tensor, float* out);

}  // namespace sluice::convert
