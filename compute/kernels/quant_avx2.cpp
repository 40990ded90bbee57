// compute/kernels/quant_avx2.cpp: AVX2+FMA bodies for q8g128, q6g128, q4g128 and f32
// matvec/matmul, with f32 or int8 activations, and the AVX2 activation
// quantizer. Each output is summed in the order quant.h documents whatever the
// tile shape, so tiles only change speed. Called only after dispatch.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "compute/kernels/f16c.h"
#include "compute/kernels/quant_int8_tile.h"
#include "compute/kernels/quant_kernels.h"

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

// Eight x values starting at column k; columns at or beyond cols read as 0.
__m256 load_x(const float* x, uint32_t k, uint32_t cols) {
  if (k + 8 <= cols) return _mm256_loadu_ps(x + k);
  return _mm256_maskload_ps(x + k, lane_mask(cols - k));
}

template <QuantFormat F>
__m256 load_w(const uint8_t* row, uint32_t k) {
  if constexpr (F == QuantFormat::kQ8G128) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(row + k))));
  } else if constexpr (F == QuantFormat::kQ6G128) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_cvtsi64_si128(static_cast<int64_t>(q6_columns8(row, k)))));
  } else {
    int32_t packed;
    std::memcpy(&packed, row + k / 2, sizeof(packed));
    const __m128i bytes = _mm_cvtsi32_si128(packed);
    const __m128i nibble = _mm_set1_epi8(0x0f);
    const __m128i lo = _mm_and_si128(bytes, nibble);
    const __m128i hi = _mm_and_si128(_mm_srli_epi16(bytes, 4), nibble);
    const __m128i q = _mm_sub_epi8(_mm_unpacklo_epi8(lo, hi), _mm_set1_epi8(8));
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q));
  }
}

// R rows × T tokens of outputs at once; every output keeps its own lanes.
template <QuantFormat F, int R, int T>
void quant_tile(const QuantMatrixView& m, const float* x, uint32_t r0, uint32_t t0, float* y) {
  const uint32_t groups = m.groups();
  const size_t row_bytes = m.row_bytes();
  __m256 acc[R][T];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) acc[r][t] = _mm256_setzero_ps();
  for (uint32_t g = 0; g < groups; ++g) {
    __m256 part[R][T];
    for (int r = 0; r < R; ++r)
      for (int t = 0; t < T; ++t) part[r][t] = _mm256_setzero_ps();
    const uint32_t k_end = std::min(m.cols, (g + 1) * kQuantGroup);
    for (uint32_t k = g * kQuantGroup; k < k_end; k += 8) {
      __m256 xs[T];
      for (int t = 0; t < T; ++t) xs[t] = load_x(x + size_t{t0 + t} * m.cols, k, m.cols);
      for (int r = 0; r < R; ++r) {
        const __m256 w = load_w<F>(m.data + size_t{r0 + r} * row_bytes, k);
        for (int t = 0; t < T; ++t) part[r][t] = _mm256_fmadd_ps(w, xs[t], part[r][t]);
      }
    }
    for (int r = 0; r < R; ++r) {
      const __m256 scale = _mm256_set1_ps(f16c_to_f32(m.scales[size_t{r0 + r} * groups + g]));
      for (int t = 0; t < T; ++t) acc[r][t] = _mm256_fmadd_ps(scale, part[r][t], acc[r][t]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) y[size_t{t0 + t} * m.rows + r0 + r] = reduce8(acc[r][t]);
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
  for (uint32_t r = row_begin; r < row_end; ++r) {
    uint32_t t = 0;
    for (; t + 4 <= tokens; t += 4) quant_tile<F, 1, 4>(m, x, r, t, y);
    for (; t < tokens; ++t) quant_tile<F, 1, 1>(m, x, r, t, y);
  }
}

}  // namespace

void quant_rows_avx2(const QuantMatrixView& m, const float* x, uint32_t tokens, uint32_t row_begin,
                     uint32_t row_end, float* y) {
  with_format(m.format, [&]<QuantFormat F>() { quant_rows<F>(m, x, tokens, row_begin, row_end, y); });
}

namespace {

// Columns k..k+31 of a row as four vectors of eight, k a multiple of 32.
template <QuantFormat F>
void load_w32(const uint8_t* row, uint32_t k, __m256 w[4]) {
  if constexpr (F == QuantFormat::kQ4G128) {
    // One load for the 32 nibbles: low nibbles are the even columns.
    const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + k / 2));
    const __m128i nibble = _mm_set1_epi8(0x0f), eight = _mm_set1_epi8(8);
    const __m128i lo = _mm_and_si128(bytes, nibble);
    const __m128i hi = _mm_and_si128(_mm_srli_epi16(bytes, 4), nibble);
    const __m128i first = _mm_sub_epi8(_mm_unpacklo_epi8(lo, hi), eight);
    const __m128i second = _mm_sub_epi8(_mm_unpackhi_epi8(lo, hi), eight);
    w[0] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(first));
    w[1] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(first, 8)));
    w[2] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(second));
    w[3] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(second, 8)));
  } else {
    for (int j = 0; j < 4; ++j) w[j] = load_w<F>(row, k + 8 * j);
  }
}

// Columns k..k+31 of T tokens' outputs, kept in registers over every row.
template <QuantFormat F, int T>
void transposed_block(const QuantMatrixView& m, uint32_t first_row, uint32_t count, const float* c,
                      size_t c_stride, uint32_t t0, float* out, size_t out_stride, uint32_t k) {
  const uint32_t groups = m.groups(), group = k / kQuantGroup;
  const size_t row_bytes = m.row_bytes();
  __m256 acc[T][4];
  for (int t = 0; t < T; ++t)
    for (int j = 0; j < 4; ++j) acc[t][j] = _mm256_loadu_ps(out + (t0 + t) * out_stride + k + 8 * j);
  for (uint32_t i = 0; i < count; ++i) {
    const uint32_t r = first_row + i;
    const float scale = f16c_to_f32(m.scales[size_t{r} * groups + group]);
    __m256 w[4];
    load_w32<F>(m.data + size_t{r} * row_bytes, k, w);
    for (int t = 0; t < T; ++t) {
      const __m256 coefficient = _mm256_set1_ps(c[(t0 + t) * c_stride + i] * scale);
      for (int j = 0; j < 4; ++j) acc[t][j] = _mm256_fmadd_ps(coefficient, w[j], acc[t][j]);
    }
  }
  for (int t = 0; t < T; ++t)
    for (int j = 0; j < 4; ++j) _mm256_storeu_ps(out + (t0 + t) * out_stride + k + 8 * j, acc[t][j]);
}

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

void f32_rows_avx2(const float* w, uint32_t cols, const float* x, uint32_t row_begin, uint32_t row_end,
                   float* y) {
  uint32_t r = row_begin;
  for (; r + 4 <= row_end; r += 4) f32_tile<4>(w, cols, x, r, y);
  for (; r < row_end; ++r) f32_tile<1>(w, cols, x, r, y);
}

void transposed_rows_avx2(const QuantMatrixView& m, uint32_t first_row, uint32_t count, const float* c,
                          size_t c_stride, uint32_t tokens, float* out, size_t out_stride) {
  with_format(m.format, [&]<QuantFormat F>() {
    // Two tokens at a time: eight accumulators and four weight vectors fit the registers.
    for (uint32_t k = 0; k + 32 <= m.cols; k += 32) {
      uint32_t t = 0;
      for (; t + 2 <= tokens; t += 2) transposed_block<F, 2>(m, first_row, count, c, c_stride, t, out, out_stride, k);
      if (t < tokens) transposed_block<F, 1>(m, first_row, count, c, c_stride, t, out, out_stride, k);
    }
  });
}

namespace {

// pmaddubsw pairs, then pmaddwd pairs of those: four products per int32 lane.
// The int16 pair sums can also be added up first and widened once.
struct MaddubsDot {
  static constexpr bool kInt16Pairs = true;
  static __m256i pairs(__m256i unsigned_w, __m256i signed_x) {
    return _mm256_maddubs_epi16(unsigned_w, signed_x);
  }
  static __m256i widen(__m256i pairs) { return _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)); }
  static __m256i lanes_from(__m256i start, __m256i unsigned_w, __m256i signed_x) {
    return _mm256_add_epi32(start, widen(pairs(unsigned_w, signed_x)));
  }
};

// Eight floats of x from column k of a block holding n < 32 real columns.
__m256 load_partial(const float* x, uint32_t k, uint32_t n) {
  if (k + 8 <= n) return _mm256_loadu_ps(x + k);
  if (k >= n) return _mm256_setzero_ps();
  return _mm256_maskload_ps(x + k, lane_mask(n - k));
}

// max |x| over the n real columns of a group, read eight at a time.
float group_max(const float* x, uint32_t n) {
  const __m256 sign_bit = _mm256_set1_ps(-0.0f);
  __m256 amax = _mm256_setzero_ps();
  for (uint32_t k = 0; k < n; k += 8) amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign_bit, load_partial(x, k, n)));
  __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
  m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  return _mm_cvtss_f32(_mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1)));
}

// A block's 32 values (n real) as int8 in column order: round(x·inverse) half to even.
__m256i quantize_block(const float* x, uint32_t n, __m256 inverse) {
  __m256i q[4];
  for (int i = 0; i < 4; ++i) q[i] = _mm256_cvtps_epi32(_mm256_mul_ps(load_partial(x, 8 * i, n), inverse));
  // packs work within 128-bit halves; the dword permute puts columns back in order.
  const __m256i words = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
  const __m256i ordered = _mm256_permutevar8x32_epi32(words, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  return _mm256_max_epi8(ordered, _mm256_set1_epi8(-127));  // as round_clamped: never −128
}

// Column order to q4 order: each half's even bytes then odd bytes, then the
// four 64-bit quarters as (evens 0-15, evens 16-31, odds 0-15, odds 16-31).
__m256i to_q4_order(__m256i v) {
  const __m256i split = _mm256_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15,
                                         0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
  return _mm256_permute4x64_epi64(_mm256_shuffle_epi8(v, split), _MM_SHUFFLE(3, 1, 2, 0));
}

}  // namespace

void quantize_activations_avx2(const float* x, Int8Activations& out) {
  const uint32_t groups = out.groups();
  for (uint32_t t = 0; t < out.tokens; ++t) {
    const float* row = x + size_t{t} * out.cols;
    for (uint32_t g = 0; g < groups; ++g) {
      const uint32_t begin = g * kQuantGroup;
      const uint32_t n = begin < out.cols ? std::min(kQuantGroup, out.cols - begin) : 0;
      const float amax = group_max(row + begin, n);
      out.scales[size_t{t} * groups + g] = amax / 127.0f;
      const __m256 inverse = _mm256_set1_ps(amax > 0.0f ? 127.0f / amax : 0.0f);
      for (uint32_t b = 0; b < kQuantGroup; b += kInt8Block) {
        const uint32_t in_block = n > b ? std::min(kInt8Block, n - b) : 0;
        __m256i q = quantize_block(row + begin + b, in_block, inverse);
        if (out.order == QuantFormat::kQ4G128) q = to_q4_order(q);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out.values.data() + size_t{t} * out.stride + begin + b), q);
      }
    }
  }
}

void int8_rows_avx2(const QuantMatrixView& m, const Int8Activations& x, uint32_t row_begin, uint32_t row_end,
                    float* y) {
  int8_rows_dispatch<MaddubsDot>(m, x, row_begin, row_end, y);
}

}  // namespace sluice::kernels::detail
