// compute/kernels/quant_avx2.cpp: AVX2 bodies for q8g128 and q4g128 (int16
// activations, exact vpmaddwd group sums) and the f32 matvec. Each output is
// computed as quant.h documents whatever the tile shape. Called after dispatch.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "compute/kernels/quant_kernels.h"
#include "proto/f16.h"

namespace sluice::kernels::detail {

namespace {

// ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7))
float reduce8(__m256 v) {
  const __m128 four = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 two = _mm_add_ps(four, _mm_movehl_ps(four, four));
  const __m128 one = _mm_add_ss(two, _mm_shuffle_ps(two, two, 1));
  return _mm_cvtss_f32(one);
}

// Lanes l < n are all-ones.
__m256i lane_mask(uint32_t n) {
  const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), lanes);
}

inline int32_t hsum(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
  return _mm_cvtsi128_si32(s);
}

inline __m256i load16(const int16_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

// R rows × T tokens of outputs at once; each group's integer sums are exact,
// so the tile shape changes speed only.
template <QuantFormat F, int R, int T>
void quant_tile(const QuantMatrixView& m, const QuantActivations& a, uint32_t r0, uint32_t t0,
                float* y) {
  const size_t row_bytes = m.row_bytes();
  float out[R][T] = {};
  for (uint32_t g = 0; g < a.groups; ++g) {
    __m256i acc[R][T];
    for (int r = 0; r < R; ++r)
      for (int t = 0; t < T; ++t) acc[r][t] = _mm256_setzero_si256();
    const int16_t* xg[T];
    for (int t = 0; t < T; ++t)
      xg[t] = a.xq + size_t{t0 + t} * a.padded_cols + size_t{g} * kQuantGroup;
    if constexpr (F == QuantFormat::kQ8G128) {
      for (uint32_t c = 0; c < kQuantGroup; c += 16) {
        __m256i xs[T];
        for (int t = 0; t < T; ++t) xs[t] = load16(xg[t] + c);
        for (int r = 0; r < R; ++r) {
          const uint8_t* w = m.data + size_t{r0 + r} * row_bytes + size_t{g} * kQuantGroup + c;
          const __m256i w16 =
              _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w)));
          for (int t = 0; t < T; ++t)
            acc[r][t] = _mm256_add_epi32(acc[r][t], _mm256_madd_epi16(w16, xs[t]));
        }
      }
    } else {
      const __m256i nibble = _mm256_set1_epi8(0x0f);
      for (uint32_t h = 0; h < 2; ++h) {
        __m256i lo[R], hi[R];
        for (int r = 0; r < R; ++r) {
          const uint8_t* w =
              m.data + size_t{r0 + r} * row_bytes + size_t{g} * kQuantGroup / 2 + 32 * h;
          const __m256i bytes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w));
          lo[r] = _mm256_and_si256(bytes, nibble);
          hi[r] = _mm256_and_si256(_mm256_srli_epi16(bytes, 4), nibble);
        }
        for (int sub = 0; sub < 2; ++sub) {
          const uint32_t at = 32 * h + 16 * sub;  // slot in the even (and odd) half
          for (int r = 0; r < R; ++r) {
            const __m256i wl = _mm256_cvtepu8_epi16(sub == 0 ? _mm256_castsi256_si128(lo[r])
                                                             : _mm256_extracti128_si256(lo[r], 1));
            const __m256i wh = _mm256_cvtepu8_epi16(sub == 0 ? _mm256_castsi256_si128(hi[r])
                                                             : _mm256_extracti128_si256(hi[r], 1));
            for (int t = 0; t < T; ++t)
              acc[r][t] = _mm256_add_epi32(
                  acc[r][t], _mm256_add_epi32(_mm256_madd_epi16(wl, load16(xg[t] + at)),
                                              _mm256_madd_epi16(wh, load16(xg[t] + 64 + at))));
          }
        }
      }
    }
    for (int r = 0; r < R; ++r)
      for (int t = 0; t < T; ++t) {
        const size_t tg = size_t{t0 + t} * a.groups + g;
        int32_t sum = hsum(acc[r][t]);
        if constexpr (F == QuantFormat::kQ4G128) sum -= 8 * a.sums[tg];
        out[r][t] = add_group(out[r][t], m.scales[size_t{r0 + r} * a.groups + g], a.step[tg], sum);
      }
  }
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) y[size_t{t0 + t} * m.rows + r0 + r] = out[r][t];
}

template <QuantFormat F>
void quant_rows(const QuantMatrixView& m, const QuantActivations& a, uint32_t tokens,
                uint32_t row_begin, uint32_t row_end, float* y) {
  if (tokens == 1) {
    uint32_t r = row_begin;
    for (; r + 4 <= row_end; r += 4) quant_tile<F, 4, 1>(m, a, r, 0, y);
    for (; r < row_end; ++r) quant_tile<F, 1, 1>(m, a, r, 0, y);
    return;
  }
  uint32_t r = row_begin;
  for (; r + 2 <= row_end; r += 2) {
    uint32_t t = 0;
    for (; t + 4 <= tokens; t += 4) quant_tile<F, 2, 4>(m, a, r, t, y);
    for (; t < tokens; ++t) quant_tile<F, 2, 1>(m, a, r, t, y);
  }
  for (; r < row_end; ++r) {
    uint32_t t = 0;
    for (; t + 4 <= tokens; t += 4) quant_tile<F, 1, 4>(m, a, r, t, y);
    for (; t < tokens; ++t) quant_tile<F, 1, 1>(m, a, r, t, y);
  }
}

}  // namespace

void quant_rows_avx2(const QuantMatrixView& m, const QuantActivations& a, uint32_t tokens,
                     uint32_t row_begin, uint32_t row_end, float* y) {
  if (m.format == QuantFormat::kQ8G128)
    quant_rows<QuantFormat::kQ8G128>(m, a, tokens, row_begin, row_end, y);
  else
    quant_rows<QuantFormat::kQ4G128>(m, a, tokens, row_begin, row_end, y);
}

namespace {

template <int R>
void f32_tile(const float* w, uint32_t cols, const float* x, uint32_t r0, float* y) {
  __m256 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
  uint32_t k = 0;
  for (; k + 8 <= cols; k += 8) {
    const __m256 xs = _mm256_loadu_ps(x + k);
    for (int r = 0; r < R; ++r)
      acc[r] = _mm256_fmadd_ps(_mm256_loadu_ps(w + size_t{r0 + r} * cols + k), xs, acc[r]);
  }
  if (k < cols) {
    const __m256i mask = lane_mask(cols - k);
    const __m256 xs = _mm256_maskload_ps(x + k, mask);
    for (int r = 0; r < R; ++r)
      acc[r] = _mm256_fmadd_ps(_mm256_maskload_ps(w + size_t{r0 + r} * cols + k, mask), xs, acc[r]);
  }
  for (int r = 0; r < R; ++r) y[r0 + r] = reduce8(acc[r]);
}

}  // namespace

void f32_rows_avx2(const float* w, uint32_t cols, const float* x, uint32_t row_begin,
                   uint32_t row_end, float* y) {
  uint32_t r = row_begin;
  for (; r + 4 <= row_end; r += 4) f32_tile<4>(w, cols, x, r, y);
  for (; r < row_end; ++r) f32_tile<1>(w, cols, x, r, y);
}

}  // namespace sluice::kernels::detail
