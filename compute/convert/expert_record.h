// compute/convert/expert_record.h: encodes one routed expert into its
// on-disk record (FORMAT.md "Expert records"): row scales, 2-stage RVQ
// codes in the rowblock32.vector.split6 layout, header and crc32. It
// measures the reconstruction error as it goes; it never touches files.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "compute/convert/codebook.h"
#include "compute/convert/error_sums.h"
#include "proto/record_format.h"

namespace sluice::convert {

// The codebooks of one MoE layer, indexed kind * kRvqStages + stage.
using LayerCodebooks = std::array<Codebook, 3 * kRvqStages>;

// Row r of w ([rows, cols] row-major): scales[r] = f16(max |row|), u = row /
// f16_to_f32(scale), zeros when the scale is 0. Refuses a row whose maximum
// does not fit an f16, naming `tensor` and the row (numbered from
// `first_row`, where w's first row sits in the tensor). Every `isa` gives
// the same values (scalar, or 8 lanes for AVX2 and AVX-512).
void normalise_rows(const float* w, uint32_t rows, uint32_t cols, float* u, uint16_t* scales,
                    const std::string& tensor, uint32_t first_row = 0,
                    kernels::Isa isa = search_isa());

// Writes the header of a record whose payload [64, payload_end) is in
// place: the geometry the reader expects and the payload's crc32.
void seal_record(const RecordLayout& layout, uint32_t layer, uint32_t expert, uint32_t codebook_base, uint8_t* record);

// Writes the full record (layout.stride bytes) of one expert. `weights` are
// gate, up, down as [rows, cols] row-major f32; `names` their tensor names.
std::array<ErrorSums, 3> encode_expert_record(const std::array<const float*, 3>& weights,
                                              const std::array<std::string, 3>& names,
                                              const RecordLayout& layout, const LayerCodebooks& codebooks,
                                              uint32_t layer, uint32_t expert, uint32_t codebook_base,
                                              uint8_t* record);

}  // namespace sluice::convert
