// compute/kernels/rvq_avx2.cpp: AVX2 table build and row kernel for RVQ. Built
// with -mavx2 -mfma but must not contract mul+add: the bits must equal the
// scalar path's (meson passes -ffp-contract=off). Called only after dispatch.
#include <immintrin.h>

#include <algorithm>
#include <vector>

#include "compute/kernels/rvq_kernels.h"
#include "proto/f16.h"

namespace sluice::kernels::detail {

void rvq_build_avx2(const RvqCodebooks& codebooks, const float* x, uint32_t v_begin, uint32_t v_end,
                    float* lut) {
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
      }
    }
  }
}

namespace {

constexpr uint32_t kChunkBlocks = 32;  // rows whose partial sums live in memory between tiles

// Adds vector positions [v0, v1) of P consecutive blocks starting at `block`
// to the partial sums acc[P * 16], in v-then-stage order.
template <int P>
void add_tile(const float* lut, const uint8_t* indices, uint32_t nv, uint32_t block, uint32_t v0,
              uint32_t v1, float* acc) {
  __m256 lo[P], hi[P];
  const uint8_t* base[P];
  for (int p = 0; p < P; ++p) {
    lo[p] = _mm256_loadu_ps(acc + p * 16);
    hi[p] = _mm256_loadu_ps(acc + p * 16 + 8);
    base[p] = indices + size_t{block + p} * nv * kRvqStages * kRowBlock;
  }
  for (uint32_t v = v0; v < v1; ++v) {
    for (int s = 0; s < kRvqStages; ++s) {
      const float* table = lut + (size_t{v} * kRvqStages + s) * kRvqEntries;
      const size_t at = (size_t{v} * kRvqStages + s) * kRowBlock;
      for (int p = 0; p < P; ++p) {
        const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(base[p] + at));
        const __m256i i_lo = _mm256_cvtepu8_epi32(bytes);
        const __m256i i_hi = _mm256_cvtepu8_epi32(_mm_srli_si128(bytes, 8));
        lo[p] = _mm256_add_ps(lo[p], _mm256_i32gather_ps(table, i_lo, 4));
        hi[p] = _mm256_add_ps(hi[p], _mm256_i32gather_ps(table, i_hi, 4));
      }
    }
  }
  for (int p = 0; p < P; ++p) {
    _mm256_storeu_ps(acc + p * 16, lo[p]);
    _mm256_storeu_ps(acc + p * 16 + 8, hi[p]);
  }
}

}  // namespace

// One block per pass, untiled: fastest of the measured plans on Zen 5 (see
// `sluice bench kernels`); two blocks and v-tiles were 10-25% slower.
RvqRowsPlan default_rvq_rows_plan() { return RvqRowsPlan{1, 0}; }

void rvq_rows_avx2(const float* const* luts, size_t n, const RvqMatrixView& m, uint32_t block_begin,
                   uint32_t block_end, float* const* ys, const RvqRowsPlan& plan) {
  const uint32_t nv = m.shape.vectors_per_row();
  const uint32_t tile = plan.tile_vectors == 0 ? nv : std::min(plan.tile_vectors, nv);
  std::vector<float> acc(size_t{kChunkBlocks} * kRowBlock * n);
  for (uint32_t chunk = block_begin; chunk < block_end; chunk += kChunkBlocks) {
    const uint32_t chunk_end = std::min(block_end, chunk + kChunkBlocks);
    const size_t chunk_rows = size_t{chunk_end - chunk} * kRowBlock;
    std::fill(acc.begin(), acc.begin() + static_cast<ptrdiff_t>(chunk_rows * n), 0.0f);
    for (uint32_t v0 = 0; v0 < nv; v0 += tile) {
      const uint32_t v1 = std::min(nv, v0 + tile);
      uint32_t b = chunk;
      for (; plan.blocks_per_pass == 2 && b + 2 <= chunk_end; b += 2)
        for (size_t t = 0; t < n; ++t)
          add_tile<2>(luts[t], m.indices, nv, b, v0, v1, acc.data() + t * chunk_rows + (b - chunk) * kRowBlock);
      for (; b < chunk_end; ++b)
        for (size_t t = 0; t < n; ++t)
          add_tile<1>(luts[t], m.indices, nv, b, v0, v1, acc.data() + t * chunk_rows + (b - chunk) * kRowBlock);
    }
    const uint32_t row_end = std::min(m.shape.rows, chunk_end * kRowBlock);
    for (size_t t = 0; t < n; ++t)
      for (uint32_t r = chunk * kRowBlock; r < row_end; ++r)
        ys[t][r] = f16_to_f32(m.scales[r]) * acc[t * chunk_rows + (r - chunk * kRowBlock)];
  }
}

}  // namespace sluice::kernels::detail
