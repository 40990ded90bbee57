// compute/convert/codebook.cpp: the 256-way nearest search, scalar and AVX2.
// Both compute every distance with the same operations in the same order
// (start at ‖C[c]‖², fma v_j·(−2C[c]_j) for j = 0..7) so they agree bit for
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

__attribute__((target("avx2,fma"))) int nearest_code_avx2(const Codebook& codebook, const float* v) {
  const float* m = codebook.minus_two_transposed();
  __m256 u[kRvqVecDim];
  for (int j = 0; j < kRvqVecDim; ++j) u[j] = _mm256_set1_ps(v[j]);
  // Lane l tracks codes 8g + l; strict less-than keeps the lowest code of a
  // tie within a lane, the final reduction keeps it across lanes.
  __m256 best = _mm256_set1_ps(std::numeric_limits<float>::infinity());
  __m256i best_code = _mm256_setzero_si256();
  __m256i code = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i step = _mm256_set1_epi32(8);
  for (int g = 0; g < kRvqEntries / 8; ++g) {
    __m256 acc = _mm256_load_ps(codebook.norms() + g * 8);
    for (int j = 0; j < kRvqVecDim; ++j) acc = _mm256_fmadd_ps(u[j], _mm256_load_ps(m + j * kRvqEntries + g * 8), acc);
    const __m256 less = _mm256_cmp_ps(acc, best, _CMP_LT_OQ);
    best = _mm256_blendv_ps(best, acc, less);
    best_code = _mm256_blendv_epi8(best_code, code, _mm256_castps_si256(less));
    code = _mm256_add_epi32(code, step);
  }
  alignas(32) float values[8];
  alignas(32) int codes[8];
  _mm256_store_ps(values, best);
  _mm256_store_si256(reinterpret_cast<__m256i*>(codes), best_code);
  float best_value = values[0];
  int result = codes[0];
  for (int l = 1; l < 8; ++l) {
    if (values[l] < best_value || (values[l] == best_value && codes[l] < result)) {
      best_value = values[l];
      result = codes[l];
    }
  }
  // All-NaN lanes never update; they still hold code 0 like the scalar path.
  return result;
}

bool search_uses_avx2() {
  static const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return avx2;
}

int nearest_code(const Codebook& codebook, const float* v) {
  return search_uses_avx2() ? nearest_code_avx2(codebook, v) : nearest_code_scalar(codebook, v);
}

}  // namespace sluice::convert
