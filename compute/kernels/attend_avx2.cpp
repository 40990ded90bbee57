// compute/kernels/attend_avx2.cpp: attend.h's AVX2 bodies. Lanes 0-7 and 8-15
// of lane_dot's sixteen are two registers; a tail shorter than 16 adds only to
// the lanes it has, as the scalar body does (masked loads add +0 elsewhere,
// which cannot change a lane: sums from +0 are never −0).
#include <immintrin.h>

#include "compute/kernels/attend_kernels.h"
#include "compute/kernels/lanes_avx2.h"

namespace sluice::kernels::detail {

namespace {

// Rows of a group that every query visits before the next group (18 KiB of
// MLA's 576-wide entries, inside L1 with a pair of queries).
constexpr uint32_t kRowGroup = 8;

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

// The four dots of two queries with two rows at once, each in dot()'s lanes
// and order: eight independent sums keep the adders busy, where one dot's two
// wait on each other, and each loaded vector serves two products.
inline void dot2x2(const float* a0, const float* a1, const float* b0, const float* b1, uint32_t n, float out[4]) {
  __m256 acc[8];
  for (__m256& v : acc) v = _mm256_setzero_ps();
  const auto step = [&](__m256 x0, __m256 x1, __m256 y0, __m256 y1, int half) {
    acc[0 + half] = _mm256_add_ps(acc[0 + half], _mm256_mul_ps(x0, y0));
    acc[2 + half] = _mm256_add_ps(acc[2 + half], _mm256_mul_ps(x0, y1));
    acc[4 + half] = _mm256_add_ps(acc[4 + half], _mm256_mul_ps(x1, y0));
    acc[6 + half] = _mm256_add_ps(acc[6 + half], _mm256_mul_ps(x1, y1));
  };
  uint32_t i = 0;
  for (; i + 16 <= n; i += 16) {
    for (int half = 0; half < 2; ++half) {
      const uint32_t at = i + 8 * half;
      step(_mm256_loadu_ps(a0 + at), _mm256_loadu_ps(a1 + at), _mm256_loadu_ps(b0 + at), _mm256_loadu_ps(b1 + at),
           half);
    }
  }
  if (i < n) {
    for (int half = 0; half < 2; ++half) {
      const __m256i mask = lanes_below(n - i, 8 * half);
      const uint32_t at = i + 8 * half;
      step(_mm256_maskload_ps(a0 + at, mask), _mm256_maskload_ps(a1 + at, mask), _mm256_maskload_ps(b0 + at, mask),
           _mm256_maskload_ps(b1 + at, mask), half);
    }
  }
  // (query 0, row 0), (query 0, row 1), (query 1, row 0), (query 1, row 1)
  for (int d = 0; d < 4; ++d) out[d] = fold16_halves(acc[2 * d], acc[2 * d + 1]);
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
  // A group of rows stays in L1 while every pair of queries passes over it
  // two rows at a time, so each query is read from L2 once per group, not
  // once per row (128 MLA heads are 295 KiB of queries). Pairs of rows
  // against pairs of queries that both reach them go through dot2x2; every
  // other (query, row) one dot at a time. A score is the same bits either way.
  const auto one = [&](uint32_t g, uint32_t p) {
    if (p < counts[g]) scores[g * score_stride + p] = dot(q + size_t{g} * n, k + p * k_stride, n) * scale;
  };
  for (uint32_t p0 = 0; p0 < longest; p0 += kRowGroup) {
    const uint32_t p1 = std::min(longest, p0 + kRowGroup);
    for (uint32_t ahead = p1; ahead < std::min(longest, p1 + kRowGroup); ++ahead) prefetch_row(k + ahead * k_stride, n);
    uint32_t g = 0;
    for (; g + 2 <= queries; g += 2) {
      uint32_t p = p0;
      for (; p + 2 <= p1; p += 2) {
        if (p + 1 >= counts[g] || p + 1 >= counts[g + 1]) {
          one(g, p), one(g, p + 1), one(g + 1, p), one(g + 1, p + 1);
          continue;
        }
        float four[4];
        dot2x2(q + size_t{g} * n, q + size_t{g + 1} * n, k + p * k_stride, k + (p + 1) * k_stride, n, four);
        scores[g * score_stride + p] = four[0] * scale;
        scores[g * score_stride + p + 1] = four[1] * scale;
        scores[(g + 1) * score_stride + p] = four[2] * scale;
        scores[(g + 1) * score_stride + p + 1] = four[3] * scale;
      }
      if (p < p1) one(g, p), one(g + 1, p);
    }
    if (g < queries)
      for (uint32_t p = p0; p < p1; ++p) one(g, p);
  }
}

void to_half_avx2(const float* in, uint32_t n, uint16_t* out) {
  const __m256 largest = _mm256_set1_ps(65504.0f), smallest = _mm256_set1_ps(-65504.0f);
  for (uint32_t i = 0; i < n; i += 8) {
    const __m256 x = _mm256_max_ps(smallest, _mm256_min_ps(largest, _mm256_loadu_ps(in + i)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
  }
}

void from_half_avx2(const uint16_t* in, uint32_t n, float* out) {
  for (uint32_t i = 0; i < n; i += 8)
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i))));
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
