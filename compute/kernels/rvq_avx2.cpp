// compute/kernels/rvq_avx2.cpp: AVX2 table build, quantization and row kernel
// for RVQ. Built with -mavx2 -mfma but must not contract mul+add: the table's
// bits must equal the scalar path's (meson passes -ffp-contract=off).
#include <immintrin.h>

#include <algorithm>

#include "compute/kernels/rvq_kernels.h"

namespace sluice::kernels::detail {

float rvq_build_avx2(const RvqCodebooks& codebooks, const float* x, uint32_t v_begin,
                     uint32_t v_end, float* lut) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 amax = _mm256_setzero_ps();
  for (uint32_t v = v_begin; v < v_end; ++v) {
    __m256 xs[kRvqVecDim];
    for (int j = 0; j < kRvqVecDim; ++j) xs[j] = _mm256_set1_ps(x[v * kRvqVecDim + j]);
    for (int s = 0; s < kRvqStages; ++s) {
      const float* ct = codebooks.transposed(s);
      float* out = lut + (size_t{v} * kRvqStages + s) * kRvqEntries;
      for (int c = 0; c < kRvqEntries; c += 8) {
        __m256 acc = _mm256_mul_ps(xs[0], _mm256_loadu_ps(ct + c));
        for (int j = 1; j < kRvqVecDim; ++j)
          acc = _mm256_add_ps(acc, _mm256_mul_ps(xs[j], _mm256_loadu_ps(ct + j * kRvqEntries + c)));
        _mm256_storeu_ps(out + c, acc);
        amax = _mm256_max_ps(_mm256_andnot_ps(sign, acc), amax);  // a NaN lane keeps amax
      }
    }
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, amax);
  float out = 0.0f;
  for (float l : lanes) out = std::max(out, l);
  return out;
}

void rvq_quantize_avx2(const float* exact, size_t count, float inv, int16_t* codes,
                       uint8_t* planes) {
  const __m256 scale = _mm256_set1_ps(inv);
  const __m256i hi = _mm256_set1_epi32(kRvqCodeMax), lo = _mm256_set1_epi32(-kRvqCodeMax);
  const __m128i bias = _mm_set1_epi16(static_cast<int16_t>(0x8000));
  for (size_t i = 0; i < count; i += 16) {
    __m256i q0 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(exact + i), scale));
    __m256i q1 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(exact + i + 8), scale));
    q0 = _mm256_max_epi32(_mm256_min_epi32(q0, hi), lo);
    q1 = _mm256_max_epi32(_mm256_min_epi32(q1, hi), lo);
    // packs works per 128-bit lane: put the halves back in order.
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packs_epi32(q0, q1), 0xd8);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(codes + i), packed);
    if (planes == nullptr) continue;
    uint8_t* block = planes + i / kRvqEntries * 2 * kRvqEntries + i % kRvqEntries;
    for (int half = 0; half < 2; ++half) {
      const __m128i biased = _mm_xor_si128(
          half == 0 ? _mm256_castsi256_si128(packed) : _mm256_extracti128_si256(packed, 1), bias);
      const __m128i low = _mm_and_si128(biased, _mm_set1_epi16(0xff));
      const __m128i high = _mm_srli_epi16(biased, 8);
      _mm_storel_epi64(reinterpret_cast<__m128i*>(block + half * 8), _mm_packus_epi16(low, low));
      _mm_storel_epi64(reinterpret_cast<__m128i*>(block + kRvqEntries + half * 8),
                       _mm_packus_epi16(high, high));
    }
  }
}

namespace {

// 16 codes at the bytes `indices` points to, sign-extended from a gather that
// reads 4 bytes at each code (the table is padded for the last one).
inline __m256i lookup8(const int16_t* codes, __m128i bytes8) {
  const __m256i at = _mm256_cvtepu8_epi32(bytes8);
  const __m256i pair = _mm256_i32gather_epi32(reinterpret_cast<const int*>(codes), at, 2);
  return _mm256_srai_epi32(_mm256_slli_epi32(pair, 16), 16);
}

}  // namespace

void rvq_rows_avx2(const RvqTable& table, std::span<const uint32_t> tokens, const RvqMatrixView& m,
                   uint32_t block_begin, uint32_t block_end, float* y) {
  const uint32_t nv = m.shape.vectors_per_row();
  const size_t block_bytes = size_t{nv} * kRvqStages * kRowBlock;
  for (uint32_t b = block_begin; b < block_end; ++b) {
    const uint8_t* base = m.indices + b * block_bytes;
    const uint32_t row0 = b * kRowBlock, rows = std::min(m.shape.rows, row0 + kRowBlock) - row0;
    for (size_t t = 0; t < tokens.size(); ++t) {
      const int16_t* codes = table.token_codes(tokens[t]);
      __m256i acc_lo = _mm256_setzero_si256(), acc_hi = _mm256_setzero_si256();
      for (size_t vs = 0; vs < size_t{nv} * kRvqStages; ++vs) {
        const __m128i bytes =
            _mm_loadu_si128(reinterpret_cast<const __m128i*>(base + vs * kRowBlock));
        const int16_t* table_vs = codes + vs * kRvqEntries;
        acc_lo = _mm256_add_epi32(acc_lo, lookup8(table_vs, bytes));
        acc_hi = _mm256_add_epi32(acc_hi, lookup8(table_vs, _mm_srli_si128(bytes, 8)));
      }
      alignas(32) int32_t totals[kRowBlock];
      _mm256_store_si256(reinterpret_cast<__m256i*>(totals), acc_lo);
      _mm256_store_si256(reinterpret_cast<__m256i*>(totals + 8), acc_hi);
      const float scale = table.token_scale(tokens[t]);
      for (uint32_t r = 0; r < rows; ++r)
        y[t * m.shape.rows + row0 + r] = rvq_row_output(totals[r], scale, m.scales[row0 + r]);
    }
  }
}

}  // namespace sluice::kernels::detail
