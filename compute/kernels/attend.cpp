// compute/kernels/attend.cpp: attend.h's scalar bodies and the choice of body
// by instruction set.
#include "compute/kernels/attend.h"

#include <algorithm>

#include "compute/kernels/attend_kernels.h"
#include "compute/kernels/lanes.h"
#include "proto/f16.h"

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

constexpr float kLargestHalf = 65504.0f;

uint32_t longest(std::span<const uint32_t> counts) {
  return counts.empty() ? 0 : *std::max_element(counts.begin(), counts.end());
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

void attention_scores(const float* q, std::span<const uint32_t> counts, const float* k,
                      size_t k_stride, uint32_t n, float scale, float* scores, size_t score_stride,
                      Isa isa) {
  const auto queries = static_cast<uint32_t>(counts.size());
  switch (isa) {
    case Isa::kAvx512:
      return detail::attention_scores_avx512(q, counts.data(), queries, longest(counts), k,
                                             k_stride, n, scale, scores, score_stride);
    case Isa::kAvx2:
      return detail::attention_scores_avx2(q, counts.data(), queries, longest(counts), k, k_stride,
                                           n, scale, scores, score_stride);
    case Isa::kScalar:
      break;
  }
  for (uint32_t g = 0; g < queries; ++g)
    for (uint32_t p = 0; p < counts[g]; ++p)
      scores[g * score_stride + p] =
          lane_dot_scalar(q + size_t{g} * n, k + p * k_stride, n) * scale;
}

void attention_values(const float* weights, size_t weight_stride, std::span<const uint32_t> counts,
                      const float* v, size_t v_stride, uint32_t n, float* out, Isa isa) {
  const auto queries = static_cast<uint32_t>(counts.size());
  switch (isa) {
    case Isa::kAvx512:
      return detail::attention_values_avx512(weights, weight_stride, counts.data(), queries,
                                             longest(counts), v, v_stride, n, out);
    case Isa::kAvx2:
      return detail::attention_values_avx2(weights, weight_stride, counts.data(), queries,
                                           longest(counts), v, v_stride, n, out);
    case Isa::kScalar:
      break;
  }
  for (uint32_t g = 0; g < queries; ++g) {
    const float* w = weights + g * weight_stride;
    float* o = out + size_t{g} * n;
    for (uint32_t p = 0; p < counts[g]; ++p)
      for (uint32_t i = 0; i < n; ++i) o[i] += w[p] * v[p * v_stride + i];
  }
}

void to_half(const float* in, uint32_t n, uint16_t* out, Isa isa) {
  uint32_t i = 0;
  if (isa != Isa::kScalar) {  // AVX-512 machines run the AVX2 body
    i = n / 8 * 8;
    detail::to_half_avx2(in, i, out);
  }
  for (; i < n; ++i) out[i] = f32_to_f16(std::clamp(in[i], -kLargestHalf, kLargestHalf));
}

void from_half(const uint16_t* in, size_t in_stride, uint32_t rows, uint32_t n, float* out, Isa isa) {
  for (uint32_t r = 0; r < rows; ++r) {
    const uint16_t* row = in + r * in_stride;
    float* o = out + size_t{r} * n;
    uint32_t i = 0;
    if (isa != Isa::kScalar) {
      i = n / 8 * 8;
      detail::from_half_avx2(row, i, o);
    }
    for (; i < n; ++i) o[i] = f16_to_f32(row[i]);
  }
}

}  // namespace sluice::kernels
