// compute/kernels/quant_avx512.cpp: the int8-activation trunk kernel with the
// AVX-512 VNNI dot product (vpdpbusd on 256-bit vectors, which Zen 4 runs at
// full rate). Same lanes and order as the AVX2 body, so results are equal bit
// for bit. Called only when CPUID reports AVX512_VNNI with VL.
#include "compute/kernels/quant_int8_tile.h"

namespace sluice::kernels::detail {
namespace {

// vpdpbusd sums the four u8·s8 products of each int32 lane exactly.
struct VnniDot {
  static constexpr bool kPairRows = true;
  static __m256i lanes(__m256i magnitude, __m256i signed_x) {
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), magnitude, signed_x);
  }
};

}  // namespace

void int8_rows_avx512_vnni(const QuantMatrixView& m, const Int8Activations& x, uint32_t row_begin,
                           uint32_t row_end, float* y) {
  int8_rows_dispatch<VnniDot>(m, x, row_begin, row_end, y);
}

}  // namespace sluice::kernels::detail
