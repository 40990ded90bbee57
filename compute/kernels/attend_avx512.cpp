// compute/kernels/attend_avx512.cpp: attend.h's AVX-512 bodies: lane_dot's
// sixteen lanes are one register, and masks take the tails.
#include <immintrin.h>

#include "compute/kernels/attend_kernels.h"
#include "compute/kernels/lanes.h"

namespace sluice::kernels::detail {

namespace {

inline __mmask16 lanes_below(uint32_t remaining) {
  return remaining >= 16 ? __mmask16(0xffff) : static_cast<__mmask16>((1u << remaining) - 1);
}

inline float dot(const float* a, const float* b, uint32_t n) {
  __m512 lanes = _mm512_setzero_ps();
  uint32_t i = 0;
  for (; i + 16 <= n; i += 16)
    lanes = _mm512_add_ps(lanes, _mm512_mul_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i)));
  if (i < n) {
    const __mmask16 tail = lanes_below(n - i);
    lanes = _mm512_mask_add_ps(
        lanes, tail, lanes,
        _mm512_mul_ps(_mm512_maskz_loadu_ps(tail, a + i), _mm512_maskz_loadu_ps(tail, b + i)));
  }
  alignas(64) float folded[16];
  _mm512_store_ps(folded, lanes);
  return fold16(folded);
}

// Columns [i, i + 16·R) of one query's outputs over rows [p0, p1), the last
// register masked to `tail` columns.
template <int R>
inline void weighted_rows(const float* w, const float* v, size_t v_stride, uint32_t p0, uint32_t p1,
                          uint32_t i, __mmask16 tail, float* o) {
  __m512 acc[R];
  for (int r = 0; r < R; ++r)
    acc[r] = _mm512_maskz_loadu_ps(r == R - 1 ? tail : __mmask16(0xffff), o + i + 16 * r);
  for (uint32_t p = p0; p < p1; ++p) {
    const __m512 weight = _mm512_set1_ps(w[p]);
    const float* row = v + p * v_stride + i;
    for (int r = 0; r < R; ++r) {
      const __mmask16 m = r == R - 1 ? tail : __mmask16(0xffff);
      acc[r] = _mm512_add_ps(acc[r], _mm512_mul_ps(weight, _mm512_maskz_loadu_ps(m, row + 16 * r)));
    }
  }
  for (int r = 0; r < R; ++r)
    _mm512_mask_storeu_ps(o + i + 16 * r, r == R - 1 ? tail : __mmask16(0xffff), acc[r]);
}

}  // namespace

float lane_dot_avx512(const float* a, const float* b, uint32_t n) {
  return dot(a, b, n);
}

void attention_scores_avx512(const float* q, const uint32_t* counts, uint32_t queries,
                             uint32_t longest, const float* k, size_t k_stride, uint32_t n,
                             float scale, float* scores, size_t score_stride) {
  scores_loop([](const float* a, const float* b, uint32_t len) { return dot(a, b, len); }, q,
              counts, queries, longest, k, k_stride, n, scale, scores, score_stride);
}

void attention_values_avx512(const float* weights, size_t weight_stride, const uint32_t* counts,
                             uint32_t queries, uint32_t longest, const float* v, size_t v_stride,
                             uint32_t n, float* out) {
  const auto rows = [&](const float* w, float* o, uint32_t p0, uint32_t p1) {
    uint32_t i = 0;
    for (; i + 128 <= n; i += 128) weighted_rows<8>(w, v, v_stride, p0, p1, i, 0xffff, o);
    for (; i < n; i += 16) weighted_rows<1>(w, v, v_stride, p0, p1, i, lanes_below(n - i), o);
  };
  values_loop(rows, weights, weight_stride, counts, queries, longest, v, v_stride, n, out);
}

}  // namespace sluice::kernels::detail
