// compute/kernels/delta_rule_avx2.cpp: the AVX2 delta-rule step. Columns go
// in blocks of 32 held in registers while the sweep walks the rows, so each
// sum keeps delta_rule.h's order; products and sums stay separate (no fma).
#include <immintrin.h>

#include "compute/kernels/delta_rule.h"

namespace sluice::kernels::detail {

namespace {

constexpr uint32_t kBlock = 32;

// Sweep 1 over columns [j, j + 8N): decay the rows, sum r, keep β(v − r).
template <int N>
void decay_and_predict(float* state, uint32_t d, const DeltaRuleToken& token, uint32_t j, float* predicted) {
  __m256 r[N];
  for (int i = 0; i < N; ++i) r[i] = _mm256_setzero_ps();
  for (uint32_t c = 0; c < d; ++c) {
    float* row = state + size_t{c} * d + j;
    const __m256 decay = _mm256_set1_ps(token.decay[c]), k = _mm256_set1_ps(token.k[c]);
    for (int i = 0; i < N; ++i) {
      const __m256 s = _mm256_mul_ps(_mm256_loadu_ps(row + 8 * i), decay);
      _mm256_storeu_ps(row + 8 * i, s);
      r[i] = _mm256_add_ps(r[i], _mm256_mul_ps(s, k));
    }
  }
  const __m256 beta = _mm256_set1_ps(token.beta);
  for (int i = 0; i < N; ++i) {
    const __m256 error = _mm256_sub_ps(_mm256_loadu_ps(token.v + j + 8 * i), r[i]);
    _mm256_storeu_ps(predicted + j + 8 * i, _mm256_mul_ps(beta, error));
  }
}

// Sweep 2: the rank-one update and the read-out of the updated rows.
template <int N>
void update_and_read(float* state, uint32_t d, const DeltaRuleToken& token, uint32_t j, const float* delta,
                     float* out) {
  __m256 step[N], o[N];
  for (int i = 0; i < N; ++i) step[i] = _mm256_loadu_ps(delta + j + 8 * i), o[i] = _mm256_setzero_ps();
  for (uint32_t c = 0; c < d; ++c) {
    float* row = state + size_t{c} * d + j;
    const __m256 k = _mm256_set1_ps(token.k[c]), q = _mm256_set1_ps(token.q[c]);
    for (int i = 0; i < N; ++i) {
      const __m256 s = _mm256_add_ps(_mm256_loadu_ps(row + 8 * i), _mm256_mul_ps(k, step[i]));
      _mm256_storeu_ps(row + 8 * i, s);
      o[i] = _mm256_add_ps(o[i], _mm256_mul_ps(s, q));
    }
  }
  for (int i = 0; i < N; ++i) _mm256_storeu_ps(out + j + 8 * i, o[i]);
}

template <typename Fn>
void over_column_blocks(uint32_t d, Fn&& fn) {
  uint32_t j = 0;
  for (; j + kBlock <= d; j += kBlock) fn.template operator()<4>(j);
  for (; j < d; j += 8) fn.template operator()<1>(j);
}

}  // namespace

void delta_rule_step_avx2(float* state, uint32_t d, const DeltaRuleToken& token, float* predicted, float* out) {
  // A column's r needs only that column of every row, so both sweeps of one
  // block run back to back while its d × 32 floats (16 KiB at d = 128) are in L1.
  over_column_blocks(d, [&]<int N>(uint32_t j) {
    decay_and_predict<N>(state, d, token, j, predicted);
    update_and_read<N>(state, d, token, j, predicted, out);
  });
}

}  // namespace sluice::kernels::detail
