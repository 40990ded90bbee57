// compute/kernels/delta_rule.cpp: the scalar delta-rule step and the dispatch
// (AVX-512 machines run the AVX2 body: the step is bound by the state's reads;
// a head dimension the vector body does not tile runs the scalar one).
#include "compute/kernels/delta_rule.h"

namespace sluice::kernels {

namespace detail {

void delta_rule_step_scalar(float* state, uint32_t d, const DeltaRuleToken& token, float* predicted, float* out) {
  for (uint32_t j = 0; j < d; ++j) predicted[j] = 0.0f, out[j] = 0.0f;
  for (uint32_t c = 0; c < d; ++c) {
    float* row = state + size_t{c} * d;
    for (uint32_t j = 0; j < d; ++j) {
      row[j] *= token.decay[c];
      predicted[j] += row[j] * token.k[c];
    }
  }
  for (uint32_t j = 0; j < d; ++j) predicted[j] = token.beta * (token.v[j] - predicted[j]);
  for (uint32_t c = 0; c < d; ++c) {
    float* row = state + size_t{c} * d;
    for (uint32_t j = 0; j < d; ++j) {
      row[j] += token.k[c] * predicted[j];
      out[j] += row[j] * token.q[c];
    }
  }
}

}  // namespace detail

void delta_rule_step(float* state, uint32_t d, const DeltaRuleToken& token, float* predicted, float* out, Isa isa) {
  if (isa == Isa::kScalar || d % 8 != 0)
    detail::delta_rule_step_scalar(state, d, token, predicted, out);
  else
    detail::delta_rule_step_avx2(state, d, token, predicted, out);
}

}  // namespace sluice::kernels
