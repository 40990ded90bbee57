// compute/kernels/rvq_avx512.cpp: the AVX-512 f32 tile matmul of the RVQ
// decode-once path (rvq_decoded.h). The table path and the decoders run the
// AVX2 bodies on AVX-512 machines: a vpermb lookup of the 64-entry tables is
// the natural AVX-512 kernel for the format, not written yet. Built with
// -ffp-contract=off; the tile's fused multiply-adds are written out.
#include <immintrin.h>

#include <algorithm>

#include "compute/kernels/rvq_kernels.h"

namespace sluice::kernels::detail {

namespace {

inline float fold_lanes(__m512 a) {
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, a);
  return fold16(lanes);
}

// R rows × T tokens of decoded-path outputs; each keeps its own 16 lanes.
template <int R, int T>
void decoded_tile(const float* tile, uint32_t cols, const float* x, uint32_t r_in_tile, uint32_t t0,
                  const float* scales, float* y, size_t y_stride) {
  __m512 acc[R][T];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) acc[r][t] = _mm512_setzero_ps();
  uint32_t k = 0;
  for (; k + 16 <= cols; k += 16) {
    __m512 w[R];
    for (int r = 0; r < R; ++r) w[r] = _mm512_loadu_ps(tile + size_t{r_in_tile + r} * cols + k);
    for (int t = 0; t < T; ++t) {
      const __m512 xs = _mm512_loadu_ps(x + size_t{t0 + t} * cols + k);
      for (int r = 0; r < R; ++r) acc[r][t] = _mm512_fmadd_ps(w[r], xs, acc[r][t]);
    }
  }
  if (k < cols) {  // cols is a multiple of 8: lanes 0-7 take the last half chunk, 8-15 nothing
    constexpr __mmask16 kLow = 0x00ff;
    for (int t = 0; t < T; ++t) {
      const __m512 xs = _mm512_maskz_loadu_ps(kLow, x + size_t{t0 + t} * cols + k);
      for (int r = 0; r < R; ++r) {
        const __m512 w = _mm512_maskz_loadu_ps(kLow, tile + size_t{r_in_tile + r} * cols + k);
        acc[r][t] = _mm512_mask3_fmadd_ps(w, xs, acc[r][t], kLow);
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) y[(t0 + t) * y_stride + r] = scales[r] * fold_lanes(acc[r][t]);
}

template <int R>
void decoded_rows(const float* tile, uint32_t cols, const float* x, uint32_t tokens,
                  uint32_t r_in_tile, const float* scales, float* y, size_t y_stride) {
  uint32_t t = 0;
  for (; t + 4 <= tokens; t += 4)
    decoded_tile<R, 4>(tile, cols, x, r_in_tile, t, scales, y, y_stride);
  for (; t < tokens; ++t) decoded_tile<R, 1>(tile, cols, x, r_in_tile, t, scales, y, y_stride);
}

}  // namespace

void rvq_tile_matmul_avx512(const float* tile, const RvqMatrixView& m, uint32_t row_begin,
                            uint32_t row_end, const float* x, uint32_t tokens, float* y) {
  const uint32_t cols = m.shape.cols;
  uint32_t r = row_begin;
  // Four rows by four tokens: 16 accumulators, 8 loads per 16 products.
  for (; r + 4 <= row_end; r += 4) {
    float scales[4];
    for (int i = 0; i < 4; ++i) scales[i] = f16_to_f32(m.scales[r + i]);
    decoded_rows<4>(tile, cols, x, tokens, r - row_begin, scales, y + r, m.shape.rows);
  }
  for (; r + 2 <= row_end; r += 2) {
    const float scales[2] = {f16_to_f32(m.scales[r]), f16_to_f32(m.scales[r + 1])};
    decoded_rows<2>(tile, cols, x, tokens, r - row_begin, scales, y + r, m.shape.rows);
  }
  for (; r < row_end; ++r) {
    const float scale = f16_to_f32(m.scales[r]);
    decoded_rows<1>(tile, cols, x, tokens, r - row_begin, &scale, y + r, m.shape.rows);
  }
}

}  // namespace sluice::kernels::detail
