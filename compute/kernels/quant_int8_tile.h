// compute/kernels/quant_int8_tile.h: internal to quant_avx2.cpp and
// quant_avx512.cpp: the 256-bit int8-activation trunk tile, generic over the
// integer dot product. Everything has internal linkage: each including file
// compiles its own copy with its own instruction set, so the linker can never
// hand the AVX2 build an AVX-512 body. Include nowhere else.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "compute/kernels/f16c.h"
#include "compute/kernels/quant_kernels.h"

namespace sluice::kernels::detail {
namespace {

// ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7))
inline float int8_reduce8(__m256 v) {
  const __m128 four = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 two = _mm_add_ps(four, _mm_movehl_ps(four, four));
  const __m128 one = _mm_add_ss(two, _mm_shuffle_ps(two, two, 1));
  return _mm_cvtss_f32(one);
}

// What q4g128 and q6g128 store is q + bias, never negative; q8g128 stores q.
template <QuantFormat F>
inline constexpr int kStoredBias = F == QuantFormat::kQ6G128 ? 32 : F == QuantFormat::kQ4G128 ? 8 : 0;

// The 32 stored bytes of block `block` of a row as they are kept (q + bias),
// in the activations' order (quant_kernels.h: q4 puts the block's even columns
// first, as the nibbles lie).
template <QuantFormat F>
inline __m256i int8_block_stored(const uint8_t* row, uint32_t block) {
  if constexpr (F == QuantFormat::kQ8G128) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + size_t{block} * kInt8Block));
  } else if constexpr (F == QuantFormat::kQ6G128) {
    // Low nibbles of bytes 0-15 are columns 0-15, high nibbles 16-31; qword
    // lane L of the broadcast top bits, shifted by 2L, holds columns 8L..8L+7.
    const uint8_t* at = row + size_t{block} * kQ6BlockBytes;
    const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(at));
    const __m256i low = _mm256_and_si256(
        _mm256_inserti128_si256(_mm256_castsi128_si256(bytes), _mm_srli_epi16(bytes, 4), 1), _mm256_set1_epi8(0x0f));
    uint64_t top;
    std::memcpy(&top, at + 16, sizeof top);
    const __m256i high = _mm256_and_si256(
        _mm256_srlv_epi64(_mm256_set1_epi64x(static_cast<int64_t>(top)), _mm256_setr_epi64x(0, 2, 4, 6)),
        _mm256_set1_epi8(0x03));
    return _mm256_or_si256(low, _mm256_slli_epi16(high, 4));
  } else {
    const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + size_t{block} * kInt8Block / 2));
    const __m256i both = _mm256_inserti128_si256(_mm256_castsi128_si256(bytes), _mm_srli_epi16(bytes, 4), 1);
    return _mm256_and_si256(both, _mm256_set1_epi8(0x0f));
  }
}

// Decode reads a matrix tile by tile, each tile's `rows` rows from r0 through
// every group: while a tile computes group g, the next tile's group g is
// requested, so no tile starts on cold lines (one thread, AVX-512: the q8 LM
// head 15.2 → 11.0 ms per token). Only the decode tiles (one token, several
// rows) call it: the prefill tiles reread their rows for every token group.
// Past the last row it asks for lines it never reads, which a prefetch may:
// it cannot fault.
inline void prefetch_next_tile(const QuantMatrixView& m, uint32_t r0, int rows, uint32_t g) {
  const size_t row_bytes = m.row_bytes(), groups = m.groups();
  const uint8_t* next = m.data + size_t{r0 + rows} * row_bytes;
  for (int i = 0; i < rows; ++i)
    for (size_t at = g * row_bytes / groups; at < (g + 1) * row_bytes / groups; at += 64)
      _mm_prefetch(reinterpret_cast<const char*>(next + i * row_bytes + at), _MM_HINT_T0);
}

// q4's stored bytes are at most 15, so a maddubs pair sum is at most
// 2 · 15 · 127 = 3810 and a group's four blocks add up in int16 before one
// widening, where the dot product gives pairs at all (one Zen 3 core, q4
// [2048x2048] × 64 tokens: 7.3–7.7 → 6.9–7.4 ms).
template <QuantFormat F, typename Dot>
inline constexpr bool kQ4Int16 = (F == QuantFormat::kQ4G128) && Dot::kInt16Pairs;

// R rows × T tokens of outputs. Dot::lanes_from(start, u, s) gives, in int32
// lane l, start + the exact Σ u·s over the block's positions 4l..4l+3, u
// unsigned and s signed bytes. q8 passes |w| and x·sign(w); q4 and q6 pass
// their stored q + bias and x, and each token's lanes gather −bias · Σx once
// per group for all the rows: the same integer. No product pair reaches
// maddubs's int16 limit: 127 · 127 · 2 for q8, 63 · 127 · 2 for q6. A group's
// blocks sum in int32 (exact) before its one conversion, since the
// activations have one scale per group.
template <QuantFormat F, int R, int T, typename Dot>
void int8_tile(const QuantMatrixView& m, const Int8Activations& x, uint32_t r0, uint32_t t0, float* y) {
  const uint32_t groups = m.groups(), used = x.used_blocks();
  const size_t row_bytes = m.row_bytes();
  __m256 acc[R][T];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) acc[r][t] = _mm256_setzero_ps();
  for (uint32_t g = 0; g < groups; ++g) {
    if constexpr (T == 1 && R > 1) prefetch_next_tile(m, r0, R, g);
    // Each row and token's group sum: int16 pairs until the group's end for
    // kQ4Int16, int32 lanes otherwise.
    __m256i sum[R][T], bias_sum[T];
    for (int t = 0; t < T; ++t) bias_sum[t] = _mm256_setzero_si256();
    for (int r = 0; r < R; ++r)
      for (int t = 0; t < T; ++t) sum[r][t] = _mm256_setzero_si256();
    const uint32_t b_end = std::min(used, (g + 1) * kQuantGroup / kInt8Block);
    for (uint32_t b = g * kQuantGroup / kInt8Block; b < b_end; ++b) {
      __m256i xs[T];
      for (int t = 0; t < T; ++t) {
        xs[t] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.block_values(t0 + t, b)));
        if constexpr (kStoredBias<F> != 0)  // |x| ≤ 127, so −x is a byte too
          bias_sum[t] = Dot::lanes_from(bias_sum[t], _mm256_set1_epi8(kStoredBias<F>),
                                        _mm256_sub_epi8(_mm256_setzero_si256(), xs[t]));
      }
      for (int r = 0; r < R; ++r) {
        const __m256i stored = int8_block_stored<F>(m.data + size_t{r0 + r} * row_bytes, b);
        // q8 multiplies |w| by x·sign(w); the stored q + bias is unsigned as it is.
        const __m256i unsigned_w = kStoredBias<F> == 0 ? _mm256_abs_epi8(stored) : stored;
        for (int t = 0; t < T; ++t) {
          const __m256i signed_x = kStoredBias<F> == 0 ? _mm256_sign_epi8(xs[t], stored) : xs[t];
          if constexpr (kQ4Int16<F, Dot>)
            sum[r][t] = _mm256_add_epi16(sum[r][t], Dot::pairs(unsigned_w, signed_x));
          else
            sum[r][t] = Dot::lanes_from(sum[r][t], unsigned_w, signed_x);
        }
      }
    }
    if constexpr (kQ4Int16<F, Dot>)
      for (int r = 0; r < R; ++r)
        for (int t = 0; t < T; ++t) sum[r][t] = Dot::widen(sum[r][t]);
    for (int t = 0; t < T; ++t) {
      const __m256 d = _mm256_set1_ps(x.group_scale(t0 + t, g));
      for (int r = 0; r < R; ++r) {
        const __m256 scale = _mm256_set1_ps(f16c_to_f32(m.scales[size_t{r0 + r} * groups + g]));
        const __m256 lanes = _mm256_cvtepi32_ps(_mm256_add_epi32(sum[r][t], bias_sum[t]));
        acc[r][t] = _mm256_fmadd_ps(scale, _mm256_mul_ps(d, lanes), acc[r][t]);
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) y[size_t{t0 + t} * m.rows + r0 + r] = int8_reduce8(acc[r][t]);
}

template <QuantFormat F, typename Dot>
void int8_rows_with(const QuantMatrixView& m, const Int8Activations& x, uint32_t row_begin, uint32_t row_end,
                    float* y) {
  if (x.tokens == 1) {
    uint32_t r = row_begin;
    for (; r + 4 <= row_end; r += 4) int8_tile<F, 4, 1, Dot>(m, x, r, 0, y);
    for (; r < row_end; ++r) int8_tile<F, 1, 1, Dot>(m, x, r, 0, y);
    return;
  }
  // Four rows share each token's activation loads and bias sums; two tokens
  // share each row's weight unpacking. One Zen 3 core, q4 [2048x2048] × 64
  // tokens, with one activation scale per group: 7.3–7.5 ms, against 7.6–7.8
  // for two rows by four tokens, 7.7–9.2 for two by three, 8.0–8.3 for two by two.
  uint32_t r = row_begin;
  for (; r + 4 <= row_end; r += 4) {
    uint32_t t = 0;
    for (; t + 2 <= x.tokens; t += 2) int8_tile<F, 4, 2, Dot>(m, x, r, t, y);
    for (; t < x.tokens; ++t) int8_tile<F, 4, 1, Dot>(m, x, r, t, y);
  }
  for (; r < row_end; ++r) {
    uint32_t t = 0;
    for (; t + 4 <= x.tokens; t += 4) int8_tile<F, 1, 4, Dot>(m, x, r, t, y);
    for (; t < x.tokens; ++t) int8_tile<F, 1, 1, Dot>(m, x, r, t, y);
  }
}

template <typename Dot>
void int8_rows_dispatch(const QuantMatrixView& m, const Int8Activations& x, uint32_t row_begin, uint32_t row_end,
                        float* y) {
  with_format(m.format, [&]<QuantFormat F>() { int8_rows_with<F, Dot>(m, x, row_begin, row_end, y); });
}

}  // namespace
}  // namespace sluice::kernels::detail
