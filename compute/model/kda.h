// compute/model/kda.h: the Kimi Delta Attention recurrence (architectures.md
// §4.3) on one head, in the two forms that must agree: one token at a time
// (decode) and a chunk of up to kKdaChunk tokens at once (prefill). Inputs
// are already normalised and gated; nothing here knows weights. f32
// throughout; every decay inside a chunk is exp of a difference of
// cumulative log-decays, so no factor ever exceeds 1.
#pragma once

#include <cstdint>
#include <vector>

#include "compute/kernels/dispatch.h"

namespace sluice {

inline constexpr uint32_t kKdaChunk = 64;

// One head's inputs for `tokens` tokens, row-major [tokens][d]: the
// L2-normalised key and (scaled) query, the value, the per-channel log-decay
// g ≤ 0, and the per-token write strength β.
struct KdaHeadInputs {
  const float* q = nullptr;
  const float* k = nullptr;
  const float* v = nullptr;
  const float* g = nullptr;
  const float* beta = nullptr;
};

// For each token: S ← diag(exp g) S; r = Sᵀk; S ← S + k ⊗ β(v − r);
// o = Sᵀq (kernels::delta_rule_step, the same bits at every instruction
// set). `state` is d × d (rows: key channel), updated in place; `out` is
// [tokens][d]; `scratch` is reused.
void kda_recurrent(const KdaHeadInputs& in, uint32_t tokens, uint32_t d, float* state, float* out,
                   std::vector<float>& scratch, kernels::Isa isa);

// The chunked form of the same for tokens ≤ kKdaChunk (§4.3's W, U, V', A
// and T = (I + M)⁻¹ diag(β) by forward substitution). `scratch` is reused.
void kda_chunk(const KdaHeadInputs& in, uint32_t tokens, uint32_t d, float* state, float* out,
               std::vector<float>& scratch);

}  // namespace sluice
