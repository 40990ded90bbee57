// compute/kernels/delta_rule.h: one token of the gated delta rule on one
// head's d × d state (KDA's recurrence, compute/model/kda.h), at every
// instruction set with the same bits. The state is read from memory once per
// token: a block of columns is decayed and dotted in one sweep over the rows,
// then updated and read out in a second while it is still in L1.
//
// Arithmetic (every instruction set, bit for bit; no fused multiply-adds):
//   S'[c][j]  = S[c][j] · decay[c]
//   r[j]      = Σ_c S'[c][j] · k[c]            (c ascending, from 0)
//   S''[c][j] = S'[c][j] + k[c] · (β · (v[j] − r[j]))
//   out[j]    = Σ_c S''[c][j] · q[c]           (c ascending, from 0)
// with every product rounded before its sum.
#pragma once

#include <cstdint>

#include "compute/kernels/dispatch.h"

namespace sluice::kernels {

struct DeltaRuleToken {
  const float* decay;  // exp(g), per key channel
  const float* k;
  const float* q;
  const float* v;
  float beta;
};

// `state` is d × d (rows: key channel), updated in place; `out` has d values;
// `predicted` is d floats of scratch.
void delta_rule_step(float* state, uint32_t d, const DeltaRuleToken& token, float* predicted, float* out, Isa isa);

namespace detail {
void delta_rule_step_scalar(float* state, uint32_t d, const DeltaRuleToken& token, float* predicted, float* out);
void delta_rule_step_avx2(float* state, uint32_t d, const DeltaRuleToken& token, float* predicted, float* out);
}  // namespace detail

}  // namespace sluice::kernels
