// compute/kernels/attend_kernels.h: internal to compute/kernels: the AVX2 and
// AVX-512 bodies behind attend.h, with its arguments (counts: `queries` of
// them, the longest `longest`) and arithmetic, and the loops they share.
#pragma once

#include <xmmintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace sluice::kernels::detail {

float lane_dot_avx2(const float* a, const float* b, uint32_t n);
void attention_scores_avx2(const float* q, const uint32_t* counts, uint32_t queries,
                           uint32_t longest, const float* k, size_t k_stride, uint32_t n,
                           float scale, float* scores, size_t score_stride);
void attention_values_avx2(const float* weights, size_t weight_stride, const uint32_t* counts,
                           uint32_t queries, uint32_t longest, const float* v, size_t v_stride,
                           uint32_t n, float* out);

void to_half_avx2(const float* in, uint32_t n, uint16_t* out);
void from_half_avx2(const uint16_t* in, uint32_t n, float* out);

float lane_dot_avx512(const float* a, const float* b, uint32_t n);
void attention_scores_avx512(const float* q, const uint32_t* counts, uint32_t queries,
                             uint32_t longest, const float* k, size_t k_stride, uint32_t n,
                             float scale, float* scores, size_t score_stride);
void attention_values_avx512(const float* weights, size_t weight_stride, const uint32_t* counts,
                             uint32_t queries, uint32_t longest, const float* v, size_t v_stride,
                             uint32_t n, float* out);

// Unnamed: each instruction set's file compiles its own copy, so that no
// shared inline function can be linked from the other set's object.
namespace {

// Consecutive rows of one kv head sit a whole cache row apart (16 KiB for
// OLMoE), which the hardware prefetcher does not follow: asking for the key
// row 8 ahead measured 7.6 → 5.9–6.5 ms for one OLMoE token at 4096 positions
// (bench kernels, one Zen 3 core; Qwen3's 5.6 → 3.8–4.4).
constexpr uint32_t kPrefetchAhead = 8;

inline void prefetch_row(const float* row, uint32_t n) {
  for (uint32_t i = 0; i < n; i += 16)
    _mm_prefetch(reinterpret_cast<const char*>(row + i), _MM_HINT_T0);
}

// attention_scores around an instruction set's dot(a, b, n): positions
// outside, so each key row is read once for every query.
template <typename Dot>
void scores_loop(Dot dot, const float* q, const uint32_t* counts, uint32_t queries,
                 uint32_t longest, const float* k, size_t k_stride, uint32_t n, float scale,
                 float* scores, size_t score_stride) {
  for (uint32_t p = 0; p < longest; ++p) {
    if (p + kPrefetchAhead < longest) prefetch_row(k + (p + kPrefetchAhead) * k_stride, n);
    for (uint32_t g = 0; g < queries; ++g)
      if (p < counts[g])
        scores[g * score_stride + p] = dot(q + size_t{g} * n, k + p * k_stride, n) * scale;
  }
}

// attention_values around an instruction set's rows(w, o, p0, p1), which adds
// rows [p0, p1) weighted by w to one query's outputs o: a block of 16 KiB of
// rows (at least 8) serves every query from L1 while the next block is
// requested.
template <typename Rows>
void values_loop(Rows rows, const float* weights, size_t weight_stride, const uint32_t* counts,
                 uint32_t queries, uint32_t longest, const float* v, size_t v_stride, uint32_t n,
                 float* out) {
  const uint32_t block = std::max<uint32_t>(8, 16384 / (n * static_cast<uint32_t>(sizeof(float))));
  for (uint32_t p0 = 0; p0 < longest; p0 += block) {
    const uint32_t p1 = std::min(longest, p0 + block);
    for (uint32_t p = p1; p < std::min(longest, p1 + block); ++p) prefetch_row(v + p * v_stride, n);
    for (uint32_t g = 0; g < queries; ++g) {
      const uint32_t end = std::min(p1, counts[g]);
      if (end > p0) rows(weights + g * weight_stride, out + size_t{g} * n, p0, end);
    }
  }
}

}  // namespace

}  // namespace sluice::kernels::detail
