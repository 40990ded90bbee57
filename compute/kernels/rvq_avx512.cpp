// compute/kernels/rvq_avx512.cpp: AVX-512 (F/BW/VL/VBMI) table build,
// quantization and row kernel for RVQ. The row kernel looks codes up in
// registers with vpermi2b on byte planes and sums them exactly in integers, so
// its outputs equal the scalar path's bit for bit. Built with -ffp-contract=off.
#include <immintrin.h>

#include <algorithm>

#include "compute/kernels/rvq_kernels.h"

namespace sluice::kernels::detail {

float rvq_build_avx512(const RvqCodebooks& codebooks, const float* x, uint32_t v_begin,
                       uint32_t v_end, float* lut) {
  __m512 amax = _mm512_setzero_ps();
  for (uint32_t v = v_begin; v < v_end; ++v) {
    __m512 xs[kRvqVecDim];
    for (int j = 0; j < kRvqVecDim; ++j) xs[j] = _mm512_set1_ps(x[v * kRvqVecDim + j]);
    for (int s = 0; s < kRvqStages; ++s) {
      const float* ct = codebooks.transposed(s);
      float* out = lut + (size_t{v} * kRvqStages + s) * kRvqEntries;
      for (int c = 0; c < kRvqEntries; c += 16) {
        __m512 acc = _mm512_mul_ps(xs[0], _mm512_loadu_ps(ct + c));
        for (int j = 1; j < kRvqVecDim; ++j)
          acc = _mm512_add_ps(acc, _mm512_mul_ps(xs[j], _mm512_loadu_ps(ct + j * kRvqEntries + c)));
        _mm512_storeu_ps(out + c, acc);
        amax = _mm512_max_ps(_mm512_abs_ps(acc), amax);  // a NaN lane keeps amax
      }
    }
  }
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, amax);
  float out = 0.0f;
  for (float l : lanes) out = std::max(out, l);
  return out;
}

void rvq_quantize_avx512(const float* exact, size_t count, float inv, int16_t* codes,
                         uint8_t* planes) {
  const __m512 scale = _mm512_set1_ps(inv);
  const __m512i hi = _mm512_set1_epi32(kRvqCodeMax), lo = _mm512_set1_epi32(-kRvqCodeMax);
  for (size_t i = 0; i < count; i += 16) {
    __m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(exact + i), scale));
    q = _mm512_max_epi32(_mm512_min_epi32(q, hi), lo);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(codes + i), _mm512_cvtepi32_epi16(q));
    if (planes == nullptr) continue;
    const __m512i biased = _mm512_add_epi32(q, _mm512_set1_epi32(kRvqPlaneBias));
    uint8_t* block = planes + i / kRvqEntries * 2 * kRvqEntries + i % kRvqEntries;
    _mm_storeu_si128(reinterpret_cast<__m128i*>(block), _mm512_cvtepi32_epi8(biased));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(block + kRvqEntries),
                     _mm512_cvtepi32_epi8(_mm512_srli_epi32(biased, 8)));
  }
}

namespace {

constexpr uint32_t kGroupBlocks = 4;  // 64 rows: one index byte per zmm lane
// Row groups whose dword sums stay in a stack buffer while the vector spans
// sweep over them (1024 rows; the caller's chunks are at most this long).
constexpr uint32_t kChunkGroups = 16;
// Tokens whose tables one pass reads against each loaded index vector.
constexpr int kMaxPassTokens = 4;
// Spans of kRvqSpanVectors for every pass. A span that fills L1 thrashes it:
// on Zen 5 (48 KiB L1D), bench kernels, one thread, rvq gate and down: 16 to
// 24 vectors 38-45 Gw/s, 32 vectors 27-35 Gw/s; for passes of two to four
// tokens 8, 12 and 16 measured alike.

// The 64 codes' plane bytes for the 64 indices in idx: bit 7 picks the upper
// 128 entries, vpermi2b resolves the lower seven bits in registers.
inline __m512i lookup_plane(const uint8_t* plane, __m512i idx, __mmask64 upper) {
  const auto at = [plane](int k) { return _mm512_loadu_si512(plane + 64 * k); };
  return _mm512_mask_blend_epi8(upper, _mm512_permutex2var_epi8(at(0), idx, at(1)),
                                _mm512_permutex2var_epi8(at(2), idx, at(3)));
}

// Widens 32 word sums to dwords and adds low + 256 · high to the two
// accumulators (words 0-15 and 16-31).
inline void widen_into(__m512i low_words, __m512i high_words, __m512i& first, __m512i& second) {
  const auto part = [](__m512i w, int half) {
    return _mm512_cvtepu16_epi32(half == 0 ? _mm512_castsi512_si256(w)
                                           : _mm512_extracti64x4_epi64(w, 1));
  };
  first = _mm512_add_epi32(
      first, _mm512_add_epi32(part(low_words, 0), _mm512_slli_epi32(part(high_words, 0), 8)));
  second = _mm512_add_epi32(
      second, _mm512_add_epi32(part(low_words, 1), _mm512_slli_epi32(part(high_words, 1), 8)));
}

// The 64 index bytes of one (vector, stage) for the group's four blocks.
inline __m512i load_indices(const uint8_t* const base[kGroupBlocks], size_t at) {
  const auto part = [&](int k) {
    return _mm_loadu_si128(reinterpret_cast<const __m128i*>(base[k] + at));
  };
  __m512i idx = _mm512_castsi128_si512(part(0));
  idx = _mm512_inserti32x4(idx, part(1), 1);
  idx = _mm512_inserti32x4(idx, part(2), 2);
  return _mm512_inserti32x4(idx, part(3), 3);
}

// Dword sums of q + 32768 per token and group, by lane byte: [0] even bytes
// 0-30, [1] even 32-62, [2] odd 1-31, [3] odd 33-63.
struct alignas(64) GroupSums {
  __m512i lanes[4];
};

// Rows of blocks [chunk_begin, chunk_end) (at most kChunkGroups groups) for K
// tokens. Each index vector is loaded once and looked up in all K tables; the
// vector positions are swept in spans, so every group of the chunk reads the
// same span of tables from L1 instead of the whole table from L2.
template <int K>
void rows_pass(const RvqTable& table, const uint32_t* tokens, const RvqMatrixView& m,
               uint32_t chunk_begin, uint32_t chunk_end, float* const y[K]) {
  const uint32_t nv = m.shape.vectors_per_row();
  const size_t block_bytes = size_t{nv} * kRvqStages * kRowBlock;
  const uint8_t* planes[K];
  for (int k = 0; k < K; ++k) planes[k] = table.token_planes(tokens[k]);
  const uint32_t groups = (chunk_end - chunk_begin + kGroupBlocks - 1) / kGroupBlocks;
  GroupSums sums[kChunkGroups][K];
  for (uint32_t gi = 0; gi < groups; ++gi)
    for (int k = 0; k < K; ++k)
      for (__m512i& l : sums[gi][k].lanes) l = _mm512_setzero_si512();
  const __m512i even = _mm512_set1_epi16(0x00ff);
  for (uint32_t v0 = 0; v0 < nv; v0 += kRvqSpanVectors) {
    const size_t vs_begin = size_t{v0} * kRvqStages;
    const size_t vs_end = size_t{std::min(nv, v0 + kRvqSpanVectors)} * kRvqStages;
    for (uint32_t gi = 0; gi < groups; ++gi) {
      const uint32_t g = chunk_begin + gi * kGroupBlocks;
      const uint32_t blocks = std::min(kGroupBlocks, chunk_end - g);
      // A short last group repeats its last block; those lanes are never written.
      const uint8_t* base[kGroupBlocks];
      for (uint32_t b = 0; b < kGroupBlocks; ++b)
        base[b] = m.indices + (g + std::min(b, blocks - 1)) * block_bytes;
      // The next group's blocks are read after this one: each step requests
      // the line of theirs it will read, spread over the span instead of in
      // one burst. Past the chunk's end it asks for lines it never reads.
      const uint8_t* next_base = m.indices + size_t{g + kGroupBlocks} * block_bytes;
      // Word sums: [0] even low bytes, [1] odd low, [2] even high, [3] odd high.
      // A span adds at most 3 · 16 lookups of 255 per word: no overflow.
      __m512i words[K][4];
      for (int k = 0; k < K; ++k)
        for (__m512i& w : words[k]) w = _mm512_setzero_si512();
      for (size_t vs = vs_begin; vs < vs_end; ++vs) {
        if ((vs * kRowBlock) % 64 == 0)
          for (uint32_t b = 0; b < kGroupBlocks; ++b)
            _mm_prefetch(reinterpret_cast<const char*>(next_base + b * block_bytes + vs * kRowBlock), _MM_HINT_T0);
        const __m512i idx = load_indices(base, vs * kRowBlock);
        const __mmask64 upper = _mm512_movepi8_mask(idx);
        for (int k = 0; k < K; ++k) {
          const uint8_t* plane = planes[k] + vs * 2 * kRvqEntries;
          const __m512i lo = lookup_plane(plane, idx, upper);
          const __m512i hi = lookup_plane(plane + kRvqEntries, idx, upper);
          words[k][0] = _mm512_add_epi16(words[k][0], _mm512_and_si512(lo, even));
          words[k][1] = _mm512_add_epi16(words[k][1], _mm512_srli_epi16(lo, 8));
          words[k][2] = _mm512_add_epi16(words[k][2], _mm512_and_si512(hi, even));
          words[k][3] = _mm512_add_epi16(words[k][3], _mm512_srli_epi16(hi, 8));
        }
      }
      for (int k = 0; k < K; ++k) {
        __m512i* l = sums[gi][k].lanes;
        widen_into(words[k][0], words[k][2], l[0], l[1]);
        widen_into(words[k][1], words[k][3], l[2], l[3]);
      }
    }
  }
  const int64_t bias = int64_t{kRvqPlaneBias} * kRvqStages * nv;
  for (uint32_t gi = 0; gi < groups; ++gi) {
    const uint32_t row0 = (chunk_begin + gi * kGroupBlocks) * kRowBlock;
    const uint32_t rows = std::min(m.shape.rows, row0 + kGroupBlocks * kRowBlock) - row0;
    for (int k = 0; k < K; ++k) {
      alignas(64) uint32_t lanes[4][16];
      for (int i = 0; i < 4; ++i) _mm512_store_si512(lanes[i], sums[gi][k].lanes[i]);
      const float scale = table.token_scale(tokens[k]);
      for (uint32_t p = 0; p < rows; ++p) {
        const uint32_t biased = lanes[(p % 2) * 2 + p / 32][(p % 32) / 2];
        const auto total = static_cast<int32_t>(int64_t{biased} - bias);
        y[k][row0 + p] = rvq_row_output(total, scale, m.scales[row0 + p]);
      }
    }
  }
}

template <int K>
void rows_chunk(const RvqTable& table, const uint32_t* tokens, size_t first_token,
                const RvqMatrixView& m, uint32_t chunk_begin, uint32_t chunk_end, float* y) {
  float* outputs[K];
  for (int k = 0; k < K; ++k) outputs[k] = y + (first_token + k) * m.shape.rows;
  rows_pass<K>(table, tokens + first_token, m, chunk_begin, chunk_end, outputs);
}

}  // namespace

void rvq_rows_avx512(const RvqTable& table, std::span<const uint32_t> tokens,
                     const RvqMatrixView& m, uint32_t block_begin, uint32_t block_end, float* y) {
  constexpr uint32_t kChunkBlocks = kChunkGroups * kGroupBlocks;
  for (uint32_t c0 = block_begin; c0 < block_end; c0 += kChunkBlocks) {
    const uint32_t c1 = std::min(block_end, c0 + kChunkBlocks);
    size_t t = 0;
    for (; t + kMaxPassTokens <= tokens.size(); t += kMaxPassTokens)
      rows_chunk<kMaxPassTokens>(table, tokens.data(), t, m, c0, c1, y);
    switch (tokens.size() - t) {
      case 3:
        rows_chunk<3>(table, tokens.data(), t, m, c0, c1, y);
        break;
      case 2:
        rows_chunk<2>(table, tokens.data(), t, m, c0, c1, y);
        break;
      case 1:
        rows_chunk<1>(table, tokens.data(), t, m, c0, c1, y);
        break;
      default:
        break;
    }
  }
}

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
