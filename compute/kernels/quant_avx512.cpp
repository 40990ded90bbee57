// compute/kernels/quant_avx512.cpp: the int8-activation trunk kernel with the
// AVX-512 VNNI dot product. Same lanes and order as the AVX2 body, so results
// are equal bit for bit. Called only when CPUID reports AVX-512 F/BW/VL (the
// engine's AVX-512 level, VBMI included) and AVX512_VNNI.
#include "compute/kernels/quant_int8_tile.h"

namespace sluice::kernels::detail {
namespace {

// vpdpbusd sums the four u8·s8 products of each int32 lane exactly.
struct VnniDot {
  static constexpr bool kInt16Pairs = false;
  static __m256i lanes_from(__m256i start, __m256i unsigned_w, __m256i signed_x) {
    return _mm256_dpbusd_epi32(start, unsigned_w, signed_x);
  }
};

inline __m512 halves(float low, float high) {
  return _mm512_castpd_ps(
      _mm512_insertf64x4(_mm512_castps_pd(_mm512_set1_ps(low)), _mm256_castps_pd(_mm256_set1_ps(high)), 1));
}

// Where a pair tile keeps its two rows' lanes. Lanes of a row are the 256-bit
// tile's lanes 0-7, each over the same four positions, so how they lie in the
// register changes no result. q8g128 and q6g128 put row r's in 0-7 and row
// r + 1's in 8-15. q4g128's decode tiles interleave them by 128 bits, row
// r's lanes 0-3, row r + 1's 0-3, row r's 4-7, row r + 1's 4-7: that is how
// two rows' nibbles lie after one shift, and it saves splitting each row's
// bytes apart. Its prefill tiles keep the halves: there each token's block
// of activations would take a shuffle for the quarters, four of them for the
// one row pair whose unpacking it saves (olmoe 4 layers, 1 thread, prefill
// of 64 tokens: 0.51-0.53 s with halves, 0.54-0.55 s with quarters).
template <QuantFormat F, int T>
inline constexpr bool kNibbleQuarters = F == QuantFormat::kQ4G128 && T == 1;

// Block b's stored bytes of two q4g128 rows in that interleaved order.
inline __m512i q4_pair_stored(const uint8_t* row0, const uint8_t* row1, uint32_t block) {
  const size_t at = size_t{block} * kInt8Block / 2;
  const __m256i both = _mm256_loadu2_m128i(reinterpret_cast<const __m128i*>(row1 + at),
                                           reinterpret_cast<const __m128i*>(row0 + at));
  const __m512i quarters = _mm512_inserti64x4(_mm512_castsi256_si512(both), _mm256_srli_epi16(both, 4), 1);
  return _mm512_and_si512(quarters, _mm512_set1_epi8(0x0f));
}

// A token's 32 block values for a pair of rows: both rows' positions 0-31 for
// the halves layout; for the quarters, positions 0-15 twice, then 16-31 twice.
template <QuantFormat F, int T>
inline __m512i pair_activations(const int8_t* values) {
  const __m256i block = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(values));
  if constexpr (kNibbleQuarters<F, T>) {
    const __m512i wide = _mm512_castsi256_si512(block);
    return _mm512_shuffle_i64x2(wide, wide, _MM_SHUFFLE(1, 1, 0, 0));
  } else {
    return _mm512_broadcast_i64x4(block);
  }
}

// One scale for each row's lanes, in the pair's layout.
template <QuantFormat F, int T>
inline __m512 pair_scales(float row0, float row1) {
  const __m512 h = halves(row0, row1);
  if constexpr (kNibbleQuarters<F, T>) return _mm512_shuffle_f32x4(h, h, _MM_SHUFFLE(2, 0, 2, 0));
  return h;
}

// Row r's eight lanes in 0-7 and row r + 1's in 8-15, from the pair's layout.
template <QuantFormat F, int T>
inline __m512 rows_in_halves(__m512 pair) {
  if constexpr (kNibbleQuarters<F, T>) return _mm512_shuffle_f32x4(pair, pair, _MM_SHUFFLE(3, 1, 2, 0));
  return pair;
}

// The stored bytes (q + 32) of q6g128 block b of two rows, row0's 32
// positions in bytes 0-31 and row1's in 32-63, unpacked in 512 bits: vpermb
// brings each position's low-nibble byte, vpmultishiftqb its top two bits.
inline __m512i q6_pair_stored(const uint8_t* row0, const uint8_t* row1, uint32_t block) {
  constexpr __mmask32 kBlockBytes = (__mmask32{1} << kQ6BlockBytes) - 1;  // never reads past the block
  const size_t at = size_t{block} * kQ6BlockBytes;
  // Bytes 0-15 and 32-47: the rows' low nibbles; 16-23 and 48-55: their top bits.
  const __m512i both = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_maskz_loadu_epi8(kBlockBytes, row0 + at)),
                                          _mm256_maskz_loadu_epi8(kBlockBytes, row1 + at), 1);
  // Position p of a row (byte 32·row + p): low-nibble byte p % 16, high nibble when p ≥ 16.
  alignas(64) static constexpr uint8_t kLowByte[64] = {
      0,  1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11, 12, 13, 14, 15, 0,  1,  2,  3,  4,  5,
      6,  7,  8,  9,  10, 11, 12, 13, 14, 15, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43,
      44, 45, 46, 47, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47};
  constexpr __mmask64 kHighNibble = 0xffff0000ffff0000ull;
  const __m512i low_bytes = _mm512_permutexvar_epi8(_mm512_load_si512(kLowByte), both);
  const __m512i low = _mm512_mask_blend_epi8(kHighNibble, low_bytes, _mm512_srli_epi16(low_bytes, 4));
  // Qword k of a row's 32 positions (positions 8k..8k+7) takes the row's top-bit
  // qword; byte j of it wants bits 8j + 2k, 8j + 2k + 1 at bits 4-5.
  const __m512i tops = _mm512_permutexvar_epi64(_mm512_setr_epi64(2, 2, 2, 2, 6, 6, 6, 6), both);
  alignas(64) static constexpr uint8_t kTopShift[64] = {
      60, 4,  12, 20, 28, 36, 44, 52, 62, 6,  14, 22, 30, 38, 46, 54, 0,  8,  16, 24, 32, 40,
      48, 56, 2,  10, 18, 26, 34, 42, 50, 58, 60, 4,  12, 20, 28, 36, 44, 52, 62, 6,  14, 22,
      30, 38, 46, 54, 0,  8,  16, 24, 32, 40, 48, 56, 2,  10, 18, 26, 34, 42, 50, 58};
  const __m512i high = _mm512_multishift_epi64_epi8(_mm512_load_si512(kTopShift), tops);
  // (low & 0x0f) | (high & 0x30)
  return _mm512_ternarylogic_epi32(_mm512_and_si512(high, _mm512_set1_epi8(0x30)), low, _mm512_set1_epi8(0x0f), 0xf8);
}

// Two rows per 512-bit vector, each row's eight documented lanes where
// kNibbleQuarters says, so each lane computes what the 256-bit tile computes,
// bit for bit, with half its dot products, conversions and FMAs. q4g128 and
// q6g128 multiply the stored q + bias as the unsigned bytes vpdpbusd wants,
// each lane's group sum taking −bias · Σx over its positions too: the same
// exact integer as Σ q·x, without abs and sign. Pairs × 2 rows, T tokens from t0.
template <QuantFormat F, int Pairs, int T>
void pair_tile(const QuantMatrixView& m, const Int8Activations& x, uint32_t r0, uint32_t t0, float* y) {
  const uint32_t groups = m.groups(), used = x.used_blocks();
  const size_t row_bytes = m.row_bytes();
  const uint8_t* rows[2 * Pairs];
  for (int i = 0; i < 2 * Pairs; ++i) rows[i] = m.data + size_t{r0 + i} * row_bytes;
  __m512 acc[Pairs][T];
  for (int p = 0; p < Pairs; ++p)
    for (int t = 0; t < T; ++t) acc[p][t] = _mm512_setzero_ps();
  for (uint32_t g = 0; g < groups; ++g) {
    if constexpr (T == 1 && Pairs > 1) prefetch_next_tile(m, r0, 2 * Pairs, g);
    __m512i sum[Pairs][T], bias_sum[T];
    for (int t = 0; t < T; ++t) bias_sum[t] = _mm512_setzero_si512();
    for (int p = 0; p < Pairs; ++p)
      for (int t = 0; t < T; ++t) sum[p][t] = _mm512_setzero_si512();
    const uint32_t b_end = std::min(used, (g + 1) * kQuantGroup / kInt8Block);
    for (uint32_t b = g * kQuantGroup / kInt8Block; b < b_end; ++b) {
      __m512i xs[T];
      for (int t = 0; t < T; ++t) {
        xs[t] = pair_activations<F, T>(x.block_values(t0 + t, b));
        if constexpr (kStoredBias<F> != 0)  // |x| ≤ 127, so −x is a byte too
          bias_sum[t] = _mm512_dpbusd_epi32(bias_sum[t], _mm512_set1_epi8(kStoredBias<F>),
                                            _mm512_sub_epi8(_mm512_setzero_si512(), xs[t]));
      }
      for (int p = 0; p < Pairs; ++p) {
        __m512i w;
        if constexpr (F == QuantFormat::kQ6G128)
          w = q6_pair_stored(rows[2 * p], rows[2 * p + 1], b);
        else if constexpr (kNibbleQuarters<F, T>)
          w = q4_pair_stored(rows[2 * p], rows[2 * p + 1], b);
        else
          w = _mm512_inserti64x4(_mm512_castsi256_si512(int8_block_stored<F>(rows[2 * p], b)),
                                 int8_block_stored<F>(rows[2 * p + 1], b), 1);
        // q8 multiplies |w| by x negated where w < 0; the stored q + bias is unsigned as it is.
        const __mmask64 negative = kStoredBias<F> == 0 ? _mm512_movepi8_mask(w) : 0;
        const __m512i unsigned_w = kStoredBias<F> == 0 ? _mm512_abs_epi8(w) : w;
        for (int t = 0; t < T; ++t) {
          const __m512i signed_x = _mm512_mask_sub_epi8(xs[t], negative, _mm512_setzero_si512(), xs[t]);
          sum[p][t] = _mm512_dpbusd_epi32(sum[p][t], unsigned_w, signed_x);
        }
      }
    }
    for (int p = 0; p < Pairs; ++p) {
      const uint32_t r = r0 + 2 * p;
      const __m512 scale = pair_scales<F, T>(f16c_to_f32(m.scales[size_t{r} * groups + g]),
                                          f16c_to_f32(m.scales[size_t{r + 1} * groups + g]));
      for (int t = 0; t < T; ++t) {
        const __m512 d = _mm512_set1_ps(x.group_scale(t0 + t, g));
        const __m512 lanes = _mm512_cvtepi32_ps(_mm512_add_epi32(sum[p][t], bias_sum[t]));
        acc[p][t] = _mm512_fmadd_ps(scale, _mm512_mul_ps(d, lanes), acc[p][t]);
      }
    }
  }
  for (int p = 0; p < Pairs; ++p)
    for (int t = 0; t < T; ++t) {
      float* out = y + size_t{t0 + t} * m.rows + r0 + 2 * p;
      const __m512 rows = rows_in_halves<F, T>(acc[p][t]);
      out[0] = int8_reduce8(_mm512_castps512_ps256(rows));
      out[1] = int8_reduce8(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(rows), 1)));
    }
}

template <QuantFormat F>
void pair_rows(const QuantMatrixView& m, const Int8Activations& x, uint32_t row_begin, uint32_t row_end, float* y) {
  uint32_t r = row_begin;
  if (x.tokens == 1) {
    for (; r + 8 <= row_end; r += 8) pair_tile<F, 4, 1>(m, x, r, 0, y);
  }
  for (; r + 2 <= row_end; r += 2) {
    uint32_t t = 0;
    for (; t + 4 <= x.tokens; t += 4) pair_tile<F, 1, 4>(m, x, r, t, y);
    for (; t < x.tokens; ++t) pair_tile<F, 1, 1>(m, x, r, t, y);
  }
  if (r < row_end) int8_rows_with<F, VnniDot>(m, x, r, row_end, y);
}

}  // namespace

void int8_rows_avx512_vnni(const QuantMatrixView& m, const Int8Activations& x, uint32_t row_begin,
                           uint32_t row_end, float* y) {
  with_format(m.format, [&]<QuantFormat F>() { pair_rows<F>(m, x, row_begin, row_end, y); });
}

}  // namespace sluice::kernels::detail
