// compute/kernels/attend_avx2.cpp: attend.h's AVX2 bodies. Lanes 0-7 and 8-15
// of lane_dot's sixteen are two registers; a tail shorter than 16 adds only to
// the lanes it has, as the scalar body does (masked loads add +0 elsewhere,
// which cannot change a lane: sums from +0 are never −0).
#include <immintrin.h>

#include "compute/kernels/attend_kernels.h"
#include "compute/kernels/lanes_avx2.h"

namespace sluice::kernels::detail {

namespace {

// Lanes l with l < remaining.
inline __m256i lanes_below(uint32_t remaining, int first) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(remaining) - first),
                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

inline float dot(const float* a, const float* b, uint32_t n) {
  __m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();
  uint32_t i = 0;
  for (; i + 16 <= n; i += 16) {
    lo = _mm256_add_ps(lo, _mm256_mul_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
    hi = _mm256_add_ps(hi, _mm256_mul_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8)));
  }
  if (i < n) {
    const __m256i low_mask = lanes_below(n - i, 0), high_mask = lanes_below(n - i, 8);
    lo = _mm256_add_ps(lo, _mm256_mul_ps(_mm256_maskload_ps(a + i, low_mask),
                                         _mm256_maskload_ps(b + i, low_mask)));
    hi = _mm256_add_ps(hi, _mm256_mul_ps(_mm256_maskload_ps(a + i + 8, high_mask),
                                         _mm256_maskload_ps(b + i + 8, high_mask)));
  }
  return fold16_halves(lo, hi);
}

// Columns [i, i + 8·R) of one query's outputs over rows [p0, p1).
template <int R>
inline void weighted_rows(const float* w, const float* v, size_t v_stride, uint32_t p0, uint32_t p1,
                          uint32_t i, float* o) {
  __m256 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm256_loadu_ps(o + i + 8 * r);
  for (uint32_t p = p0; p < p1; ++p) {
    const __m256 weight = _mm256_broadcast_ss(w + p);
    const float* row = v + p * v_stride + i;
    for (int r = 0; r < R; ++r)
      acc[r] = _mm256_add_ps(acc[r], _mm256_mul_ps(weight, _mm256_loadu_ps(row + 8 * r)));
  }
  for (int r = 0; r < R; ++r) _mm256_storeu_ps(o + i + 8 * r, acc[r]);
}

}  // namespace

float lane_dot_avx2(const float* a, const float* b, uint32_t n) {
  return dot(a, b, n);
}

void attention_scores_avx2(const float* q, const uint32_t* counts, uint32_t queries,
                           uint32_t longest, const float* k, size_t k_stride, uint32_t n,
                           float scale, float* scores, size_t score_stride) {
  scores_loop([](const float* a, const float* b, uint32_t len) { return dot(a, b, len); }, q,
              counts, queries, longest, k, k_stride, n, scale, scores, score_stride);
}

void attention_values_avx2(const float* weights, size_t weight_stride, const uint32_t* counts,
                           uint32_t queries, uint32_t longest, const float* v, size_t v_stride,
                           uint32_t n, float* out) {
  // Eight registers of outputs stay put while a block of rows streams past.
  const auto rows = [&](const float* w, float* o, uint32_t p0, uint32_t p1) {
    uint32_t i = 0;
    for (; i + 64 <= n; i += 64) weighted_rows<8>(w, v, v_stride, p0, p1, i, o);
    for (; i + 8 <= n; i += 8) weighted_rows<1>(w, v, v_stride, p0, p1, i, o);
    for (uint32_t p = p0; i < n && p < p1; ++p)
      for (uint32_t c = i; c < n; ++c) o[c] += w[p] * v[p * v_stride + c];
  };
  values_loop(rows, weights, weight_stride, counts, queries, longest, v, v_stride, n, out);
}

}  // namespace sluice::kernels::detail
