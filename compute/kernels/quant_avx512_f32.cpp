// compute/kernels/quant_avx512_f32.cpp: the AVX-512 q8g128/q6g128/q4g128 bodies with
// f32 activations: 16 lanes, each output summed in quant.h's avx512 order
// whatever the tile shape. Called only after dispatch chose Isa::kAvx512.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "compute/kernels/f16c.h"
#include "compute/kernels/quant_kernels.h"
#include "compute/kernels/rvq_kernels.h"

namespace sluice::kernels::detail {

namespace {

constexpr uint32_t kLanes = 16;

// Lanes of the 16 columns from k that lie before cols.
inline __mmask16 columns_mask(uint32_t k, uint32_t cols) {
  return cols - k >= kLanes ? __mmask16(0xffff) : static_cast<__mmask16>((1u << (cols - k)) - 1);
}

// The 16 stored integers of a row from column k, as f32 (exact).
template <QuantFormat F>
inline __m512 load_w(const uint8_t* row, uint32_t k) {
  if constexpr (F == QuantFormat::kQ8G128) {
    return _mm512_cvtepi32_ps(
        _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + k))));
  } else if constexpr (F == QuantFormat::kQ6G128) {
    const __m128i q = _mm_set_epi64x(static_cast<int64_t>(q6_columns8(row, k + 8)),
                                     static_cast<int64_t>(q6_columns8(row, k)));
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q));
  } else {
    const __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(row + k / 2));
    const __m128i nibble = _mm_set1_epi8(0x0f);
    const __m128i lo = _mm_and_si128(bytes, nibble);
    const __m128i hi = _mm_and_si128(_mm_srli_epi16(bytes, 4), nibble);
    const __m128i q = _mm_sub_epi8(_mm_unpacklo_epi8(lo, hi), _mm_set1_epi8(8));
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q));
  }
}

inline float fold(__m512 v) {
  alignas(64) float lanes[kLanes];
  _mm512_store_ps(lanes, v);
  return fold16(lanes);
}

// R rows × T tokens of outputs at once; every output keeps its own lanes.
template <QuantFormat F, int R, int T>
void quant_tile(const QuantMatrixView& m, const float* x, uint32_t r0, uint32_t t0, float* y) {
  const uint32_t groups = m.groups();
  const size_t row_bytes = m.row_bytes();
  __m512 acc[R][T];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) acc[r][t] = _mm512_setzero_ps();
  for (uint32_t g = 0; g < groups; ++g) {
    __m512 part[R][T];
    for (int r = 0; r < R; ++r)
      for (int t = 0; t < T; ++t) part[r][t] = _mm512_setzero_ps();
    const uint32_t k_end = std::min(m.cols, (g + 1) * kQuantGroup);
    for (uint32_t k = g * kQuantGroup; k < k_end; k += kLanes) {
      const __mmask16 inside = columns_mask(k, m.cols);
      __m512 xs[T];
      for (int t = 0; t < T; ++t)
        xs[t] = _mm512_maskz_loadu_ps(inside, x + size_t{t0 + t} * m.cols + k);
      for (int r = 0; r < R; ++r) {
        const __m512 w = load_w<F>(m.data + size_t{r0 + r} * row_bytes, k);
        for (int t = 0; t < T; ++t) part[r][t] = _mm512_fmadd_ps(w, xs[t], part[r][t]);
      }
    }
    for (int r = 0; r < R; ++r) {
      const __m512 scale = _mm512_set1_ps(f16c_to_f32(m.scales[size_t{r0 + r} * groups + g]));
      for (int t = 0; t < T; ++t) acc[r][t] = _mm512_fmadd_ps(scale, part[r][t], acc[r][t]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) y[size_t{t0 + t} * m.rows + r0 + r] = fold(acc[r][t]);
}

template <QuantFormat F>
void quant_rows(const QuantMatrixView& m, const float* x, uint32_t tokens, uint32_t row_begin,
                uint32_t row_end, float* y) {
  if (tokens == 1) {
    uint32_t r = row_begin;
    for (; r + 4 <= row_end; r += 4) quant_tile<F, 4, 1>(m, x, r, 0, y);
    for (; r < row_end; ++r) quant_tile<F, 1, 1>(m, x, r, 0, y);
    return;
  }
  uint32_t r = row_begin;
  for (; r + 2 <= row_end; r += 2) {  // 2 rows × 4 tokens: 16 of the 32 registers accumulate
    uint32_t t = 0;
    for (; t + 4 <= tokens; t += 4) quant_tile<F, 2, 4>(m, x, r, t, y);
    for (; t < tokens; ++t) quant_tile<F, 2, 1>(m, x, r, t, y);
  }
  for (; r < row_end; ++r) {
    uint32_t t = 0;
    for (; t + 4 <= tokens; t += 4) quant_tile<F, 1, 4>(m, x, r, t, y);
    for (; t < tokens; ++t) quant_tile<F, 1, 1>(m, x, r, t, y);
  }
}

}  // namespace

void quant_rows_avx512(const QuantMatrixView& m, const float* x, uint32_t tokens,
                       uint32_t row_begin, uint32_t row_end, float* y) {
  with_format(m.format, [&]<QuantFormat F>() { quant_rows<F>(m, x, tokens, row_begin, row_end, y); });
}

}  // namespace sluice::kernels::detail
