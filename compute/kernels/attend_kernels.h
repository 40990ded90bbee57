// compute/kernels/attend_kernels.h: internal to compute/kernels: the AVX2 and
// AVX-512 bodies behind attend.h, with its arguments and arithmetic.
#pragma once

#include <cstddef>
#include <cstdint>

namespace sluice::kernels::detail {

float lane_dot_avx2(const float* a, const float* b, uint32_t n);
void attention_scores_avx2(const float* q, uint32_t queries, const float* k, size_t k_stride,
                           uint32_t count, uint32_t n, float scale, float* scores,
                           size_t score_stride);
void attention_values_avx2(const float* weights, size_t weight_stride, uint32_t queries,
                           const float* v, size_t v_stride, uint32_t count, uint32_t n, float* out);

float lane_dot_avx512(const float* a, const float* b, uint32_t n);
void attention_scores_avx512(const float* q, uint32_t queries, const float* k, size_t k_stride,
                             uint32_t count, uint32_t n, float scale, float* scores,
                             size_t score_stride);
void attention_values_avx512(const float* weights, size_t weight_stride, uint32_t queries,
                             const float* v, size_t v_stride, uint32_t count, uint32_t n,
                             float* out);

}  // namespace sluice::kernels::detail
