// compute/kernels/quant_avx512.cpp: AVX-512 VNNI bodies for q8g128 and q4g128:
// int16 activations, vpdpwssd group sums (exact), one float fold per group, so
// outputs equal the scalar path's bit for bit. Called only after dispatch.
#include <immintrin.h>

#include "compute/kernels/quant_kernels.h"

namespace sluice::kernels::detail {

namespace {

inline __m512i load32(const int16_t* p) {
  return _mm512_loadu_si512(p);
}
inline __m512i widen_signed(__m512i bytes, int half) {
  return _mm512_cvtepi8_epi16(half == 0 ? _mm512_castsi512_si256(bytes)
                                        : _mm512_extracti64x4_epi64(bytes, 1));
}
inline __m512i widen_unsigned(__m512i bytes, int half) {
  return _mm512_cvtepu8_epi16(half == 0 ? _mm512_castsi512_si256(bytes)
                                        : _mm512_extracti64x4_epi64(bytes, 1));
}

template <QuantFormat F, int R, int T>
void quant_tile(const QuantMatrixView& m, const QuantActivations& a, uint32_t r0, uint32_t t0,
                float* y) {
  const size_t row_bytes = m.row_bytes();
  float out[R][T] = {};
  for (uint32_t g = 0; g < a.groups; ++g) {
    __m512i acc[R][T];
    for (int r = 0; r < R; ++r)
      for (int t = 0; t < T; ++t) acc[r][t] = _mm512_setzero_si512();
    const int16_t* xg[T];
    for (int t = 0; t < T; ++t)
      xg[t] = a.xq + size_t{t0 + t} * a.padded_cols + size_t{g} * kQuantGroup;
    if constexpr (F == QuantFormat::kQ8G128) {
      for (uint32_t c = 0; c < kQuantGroup; c += 64) {
        __m512i w16[R][2];
        for (int r = 0; r < R; ++r) {
          const __m512i bytes =
              _mm512_loadu_si512(m.data + size_t{r0 + r} * row_bytes + size_t{g} * kQuantGroup + c);
          w16[r][0] = widen_signed(bytes, 0);
          w16[r][1] = widen_signed(bytes, 1);
        }
        for (int t = 0; t < T; ++t) {
          const __m512i x0 = load32(xg[t] + c), x1 = load32(xg[t] + c + 32);
          for (int r = 0; r < R; ++r)
            acc[r][t] =
                _mm512_dpwssd_epi32(_mm512_dpwssd_epi32(acc[r][t], w16[r][0], x0), w16[r][1], x1);
        }
      }
    } else {
      const __m512i nibble = _mm512_set1_epi8(0x0f);
      __m512i w16[R][4];  // even columns 0-63 of the group in two halves, then odd
      for (int r = 0; r < R; ++r) {
        const __m512i bytes =
            _mm512_loadu_si512(m.data + size_t{r0 + r} * row_bytes + size_t{g} * kQuantGroup / 2);
        const __m512i lo = _mm512_and_si512(bytes, nibble);
        const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(bytes, 4), nibble);
        w16[r][0] = widen_unsigned(lo, 0);
        w16[r][1] = widen_unsigned(lo, 1);
        w16[r][2] = widen_unsigned(hi, 0);
        w16[r][3] = widen_unsigned(hi, 1);
      }
      for (int t = 0; t < T; ++t)
        for (int part = 0; part < 4; ++part) {
          const __m512i xs = load32(xg[t] + 32 * part);
          for (int r = 0; r < R; ++r) acc[r][t] = _mm512_dpwssd_epi32(acc[r][t], w16[r][part], xs);
        }
    }
    for (int r = 0; r < R; ++r)
      for (int t = 0; t < T; ++t) {
        const size_t tg = size_t{t0 + t} * a.groups + g;
        int32_t sum = _mm512_reduce_add_epi32(acc[r][t]);
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

void quant_rows_avx512(const QuantMatrixView& m, const QuantActivations& a, uint32_t tokens,
                       uint32_t row_begin, uint32_t row_end, float* y) {
  if (m.format == QuantFormat::kQ8G128)
    quant_rows<QuantFormat::kQ8G128>(m, a, tokens, row_begin, row_end, y);
  else
    quant_rows<QuantFormat::kQ4G128>(m, a, tokens, row_begin, row_end, y);
}

}  // namespace sluice::kernels::detail
