// compute/kernels/attend_kernels.h: internal to compute/kernels: the AVX2 and
// AVX-512 bodies behind attend.h, with its arguments (counts: `queries` of
// them, the longest `longest`) and arithmetic.
#pragma once

#include <cstddef>
#include <cstdint>

namespace sluice::kernels::detail {

// Value rows one pass over the queries keeps in L1 (16 KiB of them, at least 8).
inline uint32_t value_block_rows(uint32_t n) {
  const uint32_t rows = 16384 / (n * static_cast<uint32_t>(sizeof(float)));
  return rows < 8 ? 8 : rows;
}

float lane_dot_avx2(const float* a, const float* b, uint32_t n);
void attention_scores_avx2(const float* q, const uint32_t* counts, uint32_t queries,
                           uint32_t longest, const float* k, size_t k_stride, uint32_t n,
                           float scale, float* scores, size_t score_stride);
void attention_values_avx2(const float* weights, size_t weight_stride, const uint32_t* counts,
                           uint32_t queries, uint32_t longest, const float* v, size_t v_stride,
                           uint32_t n, float* out);

float lane_dot_avx512(const float* a, const float* b, uint32_t n);
void attention_scores_avx512(const float* q, const uint32_t* counts, uint32_t queries,
                             uint32_t longest, const float* k, size_t k_stride, uint32_t n,
                             float scale, float* scores, size_t score_stride);
void attention_values_avx512(const float* weights, size_t weight_stride, const uint32_t* counts,
                             uint32_t queries, uint32_t longest, const float* v, size_t v_stride,
                             uint32_t n, float* out);

}  // namespace sluice::kernels::detail
