// compute/model/kda.cpp: the KDA recurrence and its chunked form.
#include "compute/model/kda.h"

#include <algorithm>
#include <cmath>

#include "compute/kernels/delta_rule.h"
#include "proto/error.h"

namespace sluice {

void kda_recurrent(const KdaHeadInputs& in, uint32_t tokens, uint32_t d, float* state, float* out,
                   std::vector<float>& scratch, kernels::Isa isa) {
  scratch.resize(2 * size_t{d});
  float* decay = scratch.data();
  float* predicted = decay + d;
  for (uint32_t t = 0; t < tokens; ++t) {
    const size_t at = size_t{t} * d;
    for (uint32_t c = 0; c < d; ++c) decay[c] = std::exp(in.g[at + c]);
    kernels::delta_rule_step(state, d, {decay, in.k + at, in.q + at, in.v + at, in.beta[t]}, predicted, out + at, isa);
  }
}

void kda_chunk(const KdaHeadInputs& in, uint32_t n, uint32_t d, float* state, float* out,
               std::vector<float>& scratch) {
  if (n == 0 || n > kKdaChunk) fail("kda_chunk: {} tokens (1..{})", n, kKdaChunk);
  const size_t nd = size_t{n} * d, nn = size_t{n} * n;
  scratch.assign(3 * nd + 3 * nn, 0.0f);
  float* gamma = scratch.data();    // Γ_r: cumulative log-decay, [n][d]
  float* pseudo = gamma + nd;       // V' = U − W·S₀, [n][d]
  float* work = pseudo + nd;        // W = T·(exp(Γ) ⊙ K̂), [n][d]
  float* m = work + nd;             // M, [n][n]
  float* attention = m + nn;        // A, [n][n]
  float* solved = attention + nn;   // T, [n][n]

  for (uint32_t r = 0; r < n; ++r) {
    for (uint32_t c = 0; c < d; ++c) {
      gamma[size_t{r} * d + c] = in.g[size_t{r} * d + c] + (r > 0 ? gamma[size_t{r - 1} * d + c] : 0.0f);
    }
  }
  // M_rs = β_r Σ_c k_r[c] exp(Γ_r − Γ_s)[c] k_s[c] (s < r); A_rs the same
  // with q_r and s ≤ r.
  for (uint32_t r = 0; r < n; ++r) {
    for (uint32_t s = 0; s <= r; ++s) {
      float key_dot = 0.0f, query_dot = 0.0f;
      for (uint32_t c = 0; c < d; ++c) {
        const float decay = std::exp(gamma[size_t{r} * d + c] - gamma[size_t{s} * d + c]);
        const float ks = decay * in.k[size_t{s} * d + c];
        key_dot += in.k[size_t{r} * d + c] * ks;
        query_dot += in.q[size_t{r} * d + c] * ks;
      }
      if (s < r) m[size_t{r} * n + s] = in.beta[r] * key_dot;
      attention[size_t{r} * n + s] = query_dot;
    }
  }
  // T = (I + M)⁻¹ diag(β): row r is β_r e_r − Σ_{s<r} M_rs T_s.
  for (uint32_t r = 0; r < n; ++r) {
    float* row = solved + size_t{r} * n;
    row[r] = in.beta[r];
    for (uint32_t s = 0; s < r; ++s) {
      const float coefficient = m[size_t{r} * n + s];
      if (coefficient == 0.0f) continue;
      for (uint32_t j = 0; j <= s; ++j) row[j] -= coefficient * solved[size_t{s} * n + j];
    }
  }
  // W = T (exp(Γ) ⊙ K̂), V' = T V − W S₀.
  for (uint32_t r = 0; r < n; ++r) {
    float* w = work + size_t{r} * d;
    float* u = pseudo + size_t{r} * d;
    for (uint32_t s = 0; s <= r; ++s) {
      const float t = solved[size_t{r} * n + s];
      for (uint32_t c = 0; c < d; ++c) {
        w[c] += t * std::exp(gamma[size_t{s} * d + c]) * in.k[size_t{s} * d + c];
        u[c] += t * in.v[size_t{s} * d + c];
      }
    }
    for (uint32_t c = 0; c < d; ++c) {
      for (uint32_t j = 0; j < d; ++j) u[j] -= w[c] * state[size_t{c} * d + j];
    }
  }
  // O = (Q̂ ⊙ exp(Γ)) S₀ + A V'.
  for (uint32_t r = 0; r < n; ++r) {
    float* o = out + size_t{r} * d;
    std::fill(o, o + d, 0.0f);
    for (uint32_t c = 0; c < d; ++c) {
      const float qc = in.q[size_t{r} * d + c] * std::exp(gamma[size_t{r} * d + c]);
      for (uint32_t j = 0; j < d; ++j) o[j] += qc * state[size_t{c} * d + j];
    }
    for (uint32_t s = 0; s <= r; ++s) {
      const float a = attention[size_t{r} * n + s];
      for (uint32_t j = 0; j < d; ++j) o[j] += a * pseudo[size_t{s} * d + j];
    }
  }
  // S_end = diag(exp Γ_n) S₀ + Σ_s (exp(Γ_n − Γ_s) ⊙ k_s) ⊗ v'_s.
  const float* last = gamma + size_t{n - 1} * d;
  for (uint32_t c = 0; c < d; ++c) {
    const float decay = std::exp(last[c]);
    for (uint32_t j = 0; j < d; ++j) state[size_t{c} * d + j] *= decay;
  }
  for (uint32_t s = 0; s < n; ++s) {
    for (uint32_t c = 0; c < d; ++c) {
      const float ks = std::exp(last[c] - gamma[size_t{s} * d + c]) * in.k[size_t{s} * d + c];
      for (uint32_t j = 0; j < d; ++j) state[size_t{c} * d + j] += ks * pseudo[size_t{s} * d + j];
    }
  }
}

}  // namespace sluice
