// compute/convert/codebook.cpp: the 64-way nearest search, scalar, AVX2 and
// AVX-512. All compute every distance with the same operations in the same order
// (start at ‖C[c]‖², fma v_j·(−2C[c]_j) for j = 0..3) so they agree bit for
// bit; the build uses -ffp-contract=off so the compiler cannot fuse
// differently. The expanded form needs half the arithmetic of summing
// squared differences, and encoding is most of a conversion.
#include "compute/convert/codebook.h"

#include <immintrin.h>

#include <cmath>
#include <limits>

namespace sluice::convert {

void Codebook::assign(const float* entries) {
  for (int c = 0; c < kRvqEntries; ++c) {
    float norm = 0.0f;
    for (int j = 0; j < kRvqVecDim; ++j) {
      const float e = entries[c * kRvqVecDim + j];
      entries_[c * kRvqVecDim + j] = e;
      minus_two_t_[j * kRvqEntries + c] = -2.0f * e;
      norm = std::fma(e, e, norm);
    }
    norms_[c] = norm;
  }
}

int nearest_code_scalar(const Codebook& codebook, const float* v) {
  float best = std::numeric_limits<float>::infinity();
  int best_code = 0;
  const float* m = codebook.minus_two_transposed();
  for (int c = 0; c < kRvqEntries; ++c) {
    float acc = codebook.norms()[c];
    for (int j = 0; j < kRvqVecDim; ++j) acc = std::fma(v[j], m[j * kRvqEntries + c], acc);
    if (acc < best) {
      best = acc;
      best_code = c;
    }
  }
  return best_code;
}

namespace {

// The lowest code among the lanes holding the smallest value, without
// branches (they mispredicted on every vector). `best` never holds NaN; lanes
// that never improved on +inf (all-NaN or infinite distances) still hold code
// 0, which is what the scalar search returns then.
__attribute__((target("avx2"))) int lowest_code_of_minimum_avx2(__m256 best, __m256i codes) {
  __m256 low = _mm256_min_ps(best, _mm256_permute2f128_ps(best, best, 1));
  low = _mm256_min_ps(low, _mm256_shuffle_ps(low, low, _MM_SHUFFLE(1, 0, 3, 2)));
  low = _mm256_min_ps(low, _mm256_shuffle_ps(low, low, _MM_SHUFFLE(2, 3, 0, 1)));
  const __m256 at_minimum = _mm256_cmp_ps(best, low, _CMP_EQ_OQ);
  __m256i c = _mm256_blendv_epi8(_mm256_set1_epi32(std::numeric_limits<int>::max()), codes,
                                 _mm256_castps_si256(at_minimum));
  c = _mm256_min_epi32(c, _mm256_permute2x128_si256(c, c, 1));
  c = _mm256_min_epi32(c, _mm256_shuffle_epi32(c, _MM_SHUFFLE(1, 0, 3, 2)));
  c = _mm256_min_epi32(c, _mm256_shuffle_epi32(c, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm256_cvtsi256_si32(c);
}

// B vectors at once share each codebook column load. Lane l tracks codes
// 8g + l; strict less-than keeps the lowest code of a tie within a lane.
template <int B>
__attribute__((target("avx2,fma"))) void nearest_block_avx2(const Codebook& codebook,
                                                            const float* v, uint8_t* out) {
  const float* m = codebook.minus_two_transposed();
  __m256 best[B];
  __m256i best_code[B];
#pragma GCC unroll 8
  for (int b = 0; b < B; ++b) {
    best[b] = _mm256_set1_ps(std::numeric_limits<float>::infinity());
    best_code[b] = _mm256_setzero_si256();
  }
  __m256i code = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i step = _mm256_set1_epi32(8);
  for (int g = 0; g < kRvqEntries / 8; ++g) {
    __m256 acc[B];
    const __m256 norms = _mm256_loadu_ps(codebook.norms() + g * 8);
#pragma GCC unroll 8
    for (int b = 0; b < B; ++b) acc[b] = norms;
#pragma GCC unroll 8
    for (int j = 0; j < kRvqVecDim; ++j) {
      const __m256 column = _mm256_loadu_ps(m + j * kRvqEntries + g * 8);
#pragma GCC unroll 8
      for (int b = 0; b < B; ++b)
        acc[b] = _mm256_fmadd_ps(_mm256_broadcast_ss(v + b * kRvqVecDim + j), column, acc[b]);
    }
#pragma GCC unroll 8
    for (int b = 0; b < B; ++b) {
      const __m256 less = _mm256_cmp_ps(acc[b], best[b], _CMP_LT_OQ);
      best[b] = _mm256_blendv_ps(best[b], acc[b], less);
      best_code[b] = _mm256_blendv_epi8(best_code[b], code, _mm256_castps_si256(less));
    }
    code = _mm256_add_epi32(code, step);
  }
#pragma GCC unroll 8
  for (int b = 0; b < B; ++b)
    out[b] = static_cast<uint8_t>(lowest_code_of_minimum_avx2(best[b], best_code[b]));
}

// As the AVX2 block with 16 lanes (codes 16g + l); the codebook value is a
// broadcast operand of the fma, so one column load serves all B vectors.
template <int B>
__attribute__((target("avx512f,avx512vl,avx2,fma"))) void nearest_block_avx512(
    const Codebook& codebook, const float* v, uint8_t* out) {
  const float* m = codebook.minus_two_transposed();
  __m512 best[B];
  __m512i best_code[B];
#pragma GCC unroll 8
  for (int b = 0; b < B; ++b) {
    best[b] = _mm512_set1_ps(std::numeric_limits<float>::infinity());
    best_code[b] = _mm512_setzero_si512();
  }
  __m512i code = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512i step = _mm512_set1_epi32(16);
  for (int g = 0; g < kRvqEntries / 16; ++g) {
    __m512 acc[B];
    const __m512 norms = _mm512_loadu_ps(codebook.norms() + g * 16);
#pragma GCC unroll 8
    for (int b = 0; b < B; ++b) acc[b] = norms;
#pragma GCC unroll 8
    for (int j = 0; j < kRvqVecDim; ++j) {
      const __m512 column = _mm512_loadu_ps(m + j * kRvqEntries + g * 16);
#pragma GCC unroll 8
      for (int b = 0; b < B; ++b)
        acc[b] = _mm512_fmadd_ps(_mm512_set1_ps(v[b * kRvqVecDim + j]), column, acc[b]);
    }
#pragma GCC unroll 8
    for (int b = 0; b < B; ++b) {
      const __mmask16 less = _mm512_cmp_ps_mask(acc[b], best[b], _CMP_LT_OQ);
      best[b] = _mm512_mask_mov_ps(best[b], less, acc[b]);
      best_code[b] = _mm512_mask_mov_epi32(best_code[b], less, code);
    }
    code = _mm512_add_epi32(code, step);
  }
#pragma GCC unroll 8
  for (int b = 0; b < B; ++b) {
    // The lowest code among lanes equal to the minimum; best never holds NaN.
    const __mmask16 at_minimum =
        _mm512_cmp_ps_mask(best[b], _mm512_set1_ps(_mm512_reduce_min_ps(best[b])), _CMP_EQ_OQ);
    out[b] = static_cast<uint8_t>(_mm512_mask_reduce_min_epi32(at_minimum, best_code[b]));
  }
}

template <int B, typename Block, typename Single>
void search_in_blocks(const float* vectors, size_t count, uint8_t* codes, Block block,
                      Single single) {
  size_t i = 0;
  for (; i + B <= count; i += B) block(vectors + i * kRvqVecDim, codes + i);
  for (; i < count; ++i) single(vectors + i * kRvqVecDim, codes + i);
}

}  // namespace

void nearest_codes(const Codebook& codebook, const float* vectors, size_t count, uint8_t* codes,
                   kernels::Isa isa) {
  switch (isa) {
    case kernels::Isa::kAvx512:
      search_in_blocks<4>(
          vectors, count, codes,
          [&](const float* v, uint8_t* out) { nearest_block_avx512<4>(codebook, v, out); },
          [&](const float* v, uint8_t* out) { nearest_block_avx512<1>(codebook, v, out); });
      return;
    case kernels::Isa::kAvx2:
      search_in_blocks<4>(
          vectors, count, codes,
          [&](const float* v, uint8_t* out) { nearest_block_avx2<4>(codebook, v, out); },
          [&](const float* v, uint8_t* out) { nearest_block_avx2<1>(codebook, v, out); });
      return;
    case kernels::Isa::kScalar:
      break;
  }
  for (size_t i = 0; i < count; ++i)
    codes[i] = static_cast<uint8_t>(nearest_code_scalar(codebook, vectors + i * kRvqVecDim));
}

kernels::Isa search_isa() {
  static const kernels::Isa isa = kernels::isa_from_environment();
  return isa;
}

}  // namespace sluice::convert
