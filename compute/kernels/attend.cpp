// compute/kernels/attend.cpp: attend.h's scalar bodies and the choice of body
// by instruction set.
#include "compute/kernels/attend.h"

#include "compute/kernels/attend_kernels.h"
#include "compute/kernels/lanes.h"

namespace sluice::kernels {

namespace {

float lane_dot_scalar(const float* a, const float* b, uint32_t n) {
  float lanes[16] = {};
  uint32_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (uint32_t l = 0; l < 16; ++l) lanes[l] += a[i + l] * b[i + l];
  for (uint32_t l = 0; i + l < n; ++l) lanes[l] += a[i + l] * b[i + l];
  return fold16(lanes);
}

}  // namespace

float lane_dot(const float* a, const float* b, uint32_t n, Isa isa) {
  switch (isa) {
    case Isa::kAvx512:
      return detail::lane_dot_avx512(a, b, n);
    case Isa::kAvx2:
      return detail::lane_dot_avx2(a, b, n);
    case Isa::kScalar:
      break;
  }
  return lane_dot_scalar(a, b, n);
}

void attention_scores(const float* q, uint32_t queries, const float* k, size_t k_stride,
                      uint32_t count, uint32_t n, float scale, float* scores, size_t score_stride,
                      Isa isa) {
  switch (isa) {
    case Isa::kAvx512:
      return detail::attention_scores_avx512(q, queries, k, k_stride, count, n, scale, scores,
                                             score_stride);
    case Isa::kAvx2:
      return detail::attention_scores_avx2(q, queries, k, k_stride, count, n, scale, scores,
                                           score_stride);
    case Isa::kScalar:
      break;
  }
  for (uint32_t p = 0; p < count; ++p)
    for (uint32_t g = 0; g < queries; ++g)
      scores[g * score_stride + p] =
          lane_dot_scalar(q + size_t{g} * n, k + p * k_stride, n) * scale;
}

void attention_values(const float* weights, size_t weight_stride, uint32_t queries, const float* v,
                      size_t v_stride, uint32_t count, uint32_t n, float* out, Isa isa) {
  switch (isa) {
    case Isa::kAvx512:
      return detail::attention_values_avx512(weights, weight_stride, queries, v, v_stride, count, n,
                                             out);
    case Isa::kAvx2:
      return detail::attention_values_avx2(weights, weight_stride, queries, v, v_stride, count, n,
                                           out);
    case Isa::kScalar:
      break;
  }
  for (uint32_t p = 0; p < count; ++p)
    for (uint32_t g = 0; g < queries; ++g) {
      const float w = weights[g * weight_stride + p];
      float* o = out + size_t{g} * n;
      const float* row = v + p * v_stride;
      for (uint32_t i = 0; i < n; ++i) o[i] += w * row[i];
    }
}

}  // namespace sluice::kernels
