// compute/convert/codebook.cpp: the 256-way nearest search, scalar and AVX2.
// Both compute every distance with the same operations in the same order
// (subtract, then fma into the running sum, dimension 0 to 7) so they agree
// bit for bit; the build uses -ffp-contract=off so the compiler cannot
// fuse differently.
#include "compute/convert/codebook.h"

#include <immintrin.h>

#include <cmath>
#include <limits>

namespace sluice::convert {

void Codebook::assign(const float* entries) {
  for (int c = 0; c < kRvqEntries; ++c) {
    for (int j = 0; j < kRvqVecDim; ++j) {
      entries_[c * kRvqVecDim + j] = entries[c * kRvqVecDim + j];
      transposed_[j * kRvqEntries + c] = entries[c * kRvqVecDim + j];
    }
  }
}

int nearest_code_scalar(const Codebook& codebook, const float* v) {
  float best = std::numeric_limits<float>::infinity();
  int best_code = 0;
  for (int c = 0; c < kRvqEntries; ++c) {
    const float* e = codebook.entry(c);
    float acc = 0.0f;
    for (int j = 0; j < kRvqVecDim; ++j) {
      const float d = v[j] - e[j];
      acc = std::fma(d, d, acc);
    }
    if (acc < best) {
      best = acc;
      best_code = c;
    }
  }
  return best_code;
}

__attribute__((target("avx2,fma"))) int nearest_code_avx2(const Codebook& codebook, const float* v) {
  const float* t = codebook.transposed();
  __m256 u[kRvqVecDim];
  for (int j = 0; j < kRvqVecDim; ++j) u[j] = _mm256_set1_ps(v[j]);
  // Lane l tracks codes 8g + l; strict less-than keeps the lowest code of a
  // tie within a lane, the final reduction keeps it across lanes.
  __m256 best = _mm256_set1_ps(std::numeric_limits<float>::infinity());
  __m256i best_code = _mm256_setzero_si256();
  __m256i code = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i step = _mm256_set1_epi32(8);
  for (int g = 0; g < kRvqEntries / 8; ++g) {
    __m256 acc = _mm256_setzero_ps();
    for (int j = 0; j < kRvqVecDim; ++j) {
      const __m256 d = _mm256_sub_ps(u[j], _mm256_load_ps(t + j * kRvqEntries + g * 8));
      acc = _mm256_fmadd_ps(d, d, acc);
    }
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
