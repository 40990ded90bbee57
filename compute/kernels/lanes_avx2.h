// compute/kernels/lanes_avx2.h: lanes.h's fold16 for sixteen lanes held in two
// AVX2 registers (lanes 0-7, 8-15), done in registers in the same order, for
// the AVX2 library's files (it needs AVX enabled). Unnamed: each including
// file compiles its own copy, so no other library's object can stand in for it.
#pragma once

#include <immintrin.h>

namespace sluice::kernels::detail {
namespace {

inline float fold16_halves(__m256 lo, __m256 hi) {
  const __m256 s = _mm256_add_ps(lo, hi);  // s_l = a_l + a_{l+8}
  const __m128 t = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
  const __m128 u = _mm_add_ps(t, _mm_movehl_ps(t, t));  // t0 + t2, t1 + t3
  return _mm_cvtss_f32(_mm_add_ss(u, _mm_shuffle_ps(u, u, 1)));
}

}  // namespace
}  // namespace sluice::kernels::detail
