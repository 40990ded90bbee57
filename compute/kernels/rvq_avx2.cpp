// compute/kernels/rvq_avx2.cpp: AVX2 table build, quantization and row kernel
// for RVQ, and the decode-once paths: in registers, f32 tiles and int8 tiles
// (which AVX-512 machines run too). Built with -mavx2 -mfma but must not
// contract mul+add: the table's bits must equal the scalar path's (meson passes
// -ffp-contract=off); the tile's fused multiply-adds are written out.
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "compute/kernels/lanes_avx2.h"
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

// Rows one pass accumulates: the caller's largest chunk (rvq.cpp).
constexpr uint32_t kChunkBlocks = 64;
// Vector positions per span: K tokens' spans of tables together no larger
// than one token's kRvqSpanVectors, so they stay in L1.
constexpr uint32_t span_vectors(int tokens) {
  return tokens == 1 ? kRvqSpanVectors : tokens == 2 ? kRvqSpanVectors / 2 : kRvqSpanVectors / 4;
}

// body.template operator()<K>() for K = k, a run-time count of 1 to 3; nothing for 0.
template <typename Body>
void with_count_up_to_three(size_t k, Body&& body) {
  switch (k) {
    case 3:
      body.template operator()<3>();
      break;
    case 2:
      body.template operator()<2>();
      break;
    case 1:
      body.template operator()<1>();
      break;
    default:
      break;
  }
}

// body.template operator()<K>(t) for tokens [t, t + K) of n: groups of four
// (the most tokens whose tables one pass reads against each loaded index
// vector, and whose inputs a tile pass holds), then one group of what remains.
template <typename Body>
void in_groups_of_four(size_t n, Body&& body) {
  size_t t = 0;
  for (; t + 4 <= n; t += 4) body.template operator()<4>(t);
  with_count_up_to_three(n - t, [&]<int K>() { body.template operator()<K>(t); });
}

inline __m256i lanes_of(const uint8_t* bytes) {
  return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(bytes)));
}

// The dwords a gather reads at code `at` of `codes`: code[at] in the low word.
inline __m256i gather_pairs(const int16_t* codes, __m256i at) {
  return _mm256_i32gather_epi32(reinterpret_cast<const int*>(codes), at, 2);
}

// Rows of blocks [chunk_begin, chunk_end) for K tokens. Vector positions are
// swept in spans so that every block of the chunk reads the same span of
// tables from L1. Two (vector, stage) steps are summed per madd: the second
// step's gather reads one code earlier, so its code lands in the high word
// and one blend pairs both codes of a row for an exact sign-extending sum.
template <int K>
void rows_pass(const RvqTable& table, const uint32_t* tokens, const RvqMatrixView& m,
               uint32_t chunk_begin, uint32_t chunk_end, float* const y[K]) {
  const uint32_t nv = m.shape.vectors_per_row();
  const size_t steps = size_t{nv} * kRvqStages;
  const size_t block_bytes = steps * kRowBlock;
  const size_t span = size_t{span_vectors(K)} * kRvqStages;
  const int16_t* codes[K];
  for (int k = 0; k < K; ++k) codes[k] = table.token_codes(tokens[k]);
  const uint32_t blocks = chunk_end - chunk_begin;
  alignas(32) int32_t sums[K][kChunkBlocks * kRowBlock] = {};
  const __m256i ones = _mm256_set1_epi16(1);
  const __m256i low_word = _mm256_set1_epi32(1);
  for (size_t s0 = 0; s0 < steps; s0 += span) {
    const size_t s1 = std::min(steps, s0 + span);
    for (uint32_t bi = 0; bi < blocks; ++bi) {
      const uint8_t* base = m.indices + (chunk_begin + bi) * block_bytes;
      // The next span of this block is read one sweep later: have it in cache by then.
      for (size_t at = s1 * kRowBlock; at < std::min(steps, s1 + span) * kRowBlock; at += 64)
        _mm_prefetch(reinterpret_cast<const char*>(base + at), _MM_HINT_T0);
      __m256i lo[K], hi[K];
      for (int k = 0; k < K; ++k) {
        lo[k] = _mm256_load_si256(reinterpret_cast<const __m256i*>(&sums[k][bi * kRowBlock]));
        hi[k] = _mm256_load_si256(reinterpret_cast<const __m256i*>(&sums[k][bi * kRowBlock + 8]));
      }
      size_t s = s0;
      for (; s + 2 <= s1; s += 2) {
        const uint8_t* at = base + s * kRowBlock;
        const __m256i a0 = lanes_of(at), a1 = lanes_of(at + 8);
        const __m256i b0 = lanes_of(at + 16), b1 = lanes_of(at + 24);
        for (int k = 0; k < K; ++k) {
          const int16_t* first = codes[k] + s * kRvqEntries;
          const int16_t* second = first + kRvqEntries - 1;  // code[i] in the high word
          const __m256i p0 = _mm256_blend_epi16(gather_pairs(first, a0), gather_pairs(second, b0), 0xaa);
          const __m256i p1 = _mm256_blend_epi16(gather_pairs(first, a1), gather_pairs(second, b1), 0xaa);
          lo[k] = _mm256_add_epi32(lo[k], _mm256_madd_epi16(p0, ones));
          hi[k] = _mm256_add_epi32(hi[k], _mm256_madd_epi16(p1, ones));
        }
      }
      if (s < s1) {  // an odd last step: its code alone, the high word weighted 0
        const uint8_t* at = base + s * kRowBlock;
        const __m256i a0 = lanes_of(at), a1 = lanes_of(at + 8);
        for (int k = 0; k < K; ++k) {
          const int16_t* first = codes[k] + s * kRvqEntries;
          lo[k] = _mm256_add_epi32(lo[k], _mm256_madd_epi16(gather_pairs(first, a0), low_word));
          hi[k] = _mm256_add_epi32(hi[k], _mm256_madd_epi16(gather_pairs(first, a1), low_word));
        }
      }
      for (int k = 0; k < K; ++k) {
        _mm256_store_si256(reinterpret_cast<__m256i*>(&sums[k][bi * kRowBlock]), lo[k]);
        _mm256_store_si256(reinterpret_cast<__m256i*>(&sums[k][bi * kRowBlock + 8]), hi[k]);
      }
    }
  }
  const uint32_t row0 = chunk_begin * kRowBlock;
  const uint32_t rows = std::min(m.shape.rows, chunk_end * kRowBlock) - row0;
  for (int k = 0; k < K; ++k) {
    const float scale = table.token_scale(tokens[k]);
    for (uint32_t r = 0; r < rows; ++r)
      y[k][row0 + r] = rvq_row_output(sums[k][r], scale, m.scales[row0 + r]);
  }
}

template <int K>
void rows_chunk(const RvqTable& table, std::span<const uint32_t> tokens, size_t first_token,
                const RvqMatrixView& m, uint32_t chunk_begin, uint32_t chunk_end, float* y) {
  float* outputs[K];
  for (int k = 0; k < K; ++k) outputs[k] = y + (first_token + k) * m.shape.rows;
  rows_pass<K>(table, tokens.data() + first_token, m, chunk_begin, chunk_end, outputs);
}

}  // namespace

void rvq_rows_avx2(const RvqTable& table, std::span<const uint32_t> tokens, const RvqMatrixView& m,
                   uint32_t block_begin, uint32_t block_end, float* y) {
  for (uint32_t c0 = block_begin; c0 < block_end; c0 += kChunkBlocks) {
    const uint32_t c1 = std::min(block_end, c0 + kChunkBlocks);
    in_groups_of_four(tokens.size(),
                      [&]<int K>(size_t t) { rows_chunk<K>(table, tokens, t, m, c0, c1, y); });
  }
}

namespace {

// Vector positions whose index bytes are widened at a time: 1.5 KiB of offsets.
constexpr uint32_t kSpan = 16;
constexpr size_t kVectorBytes = kRvqStages * kRowBlock;  // one vector position of a row block
constexpr size_t kSpanBytes = kSpan * kVectorBytes;
// How far ahead of its span a sweep asks for index lines. The hardware
// prefetcher alone leaves the sequential index stream stalling (one token,
// 1024×2048 from DRAM: 6.7 → 8.2 G weights/s when the host is quiet). Reaching
// into the next row block measured no better.
constexpr uint32_t kPrefetchSpans = 4;

// The codebook byte offsets (index << Shift: 5 for f32 entries, 3 for int8
// ones) of vector positions [v0, v0 + span) of the row block whose index bytes
// start at `indices` and end at `block_end`: offsets[c][s][r] for row r of the
// block, so that a row's entry then costs one extraction and no shift, while
// the index lines kPrefetchSpans ahead are requested.
template <int Shift>
inline void widen_span(const uint8_t* indices, const uint8_t* block_end, uint32_t v0, uint32_t span,
                       uint16_t (*offsets)[kRvqStages][kRowBlock]) {
  const uint8_t* at = indices + v0 * kVectorBytes;
  for (const uint8_t* ahead = at + kPrefetchSpans * kSpanBytes;
       ahead < std::min(block_end, at + (kPrefetchSpans + 1) * kSpanBytes); ahead += 64)
    _mm_prefetch(reinterpret_cast<const char*>(ahead), _MM_HINT_T0);
  for (uint32_t i = 0; i < span * kRvqStages; ++i) {
    const __m128i bytes =
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(at + size_t{i} * kRowBlock));
    _mm256_store_si256(reinterpret_cast<__m256i*>(&offsets[0][0][0] + size_t{i} * kRowBlock),
                       _mm256_slli_epi16(_mm256_cvtepu8_epi16(bytes), Shift));
  }
}

// One vector position's decoded weights, (C0 + C1) + C2, at codebook byte offsets o0-o2.
inline __m256 decoded_vector(const char* const books[kRvqStages], uint32_t o0, uint32_t o1,
                             uint32_t o2) {
  const __m256 e0 = _mm256_loadu_ps(reinterpret_cast<const float*>(books[0] + o0));
  const __m256 e1 = _mm256_loadu_ps(reinterpret_cast<const float*>(books[1] + o1));
  const __m256 e2 = _mm256_loadu_ps(reinterpret_cast<const float*>(books[2] + o2));
  return _mm256_add_ps(_mm256_add_ps(e0, e1), e2);
}

// Rows `row` .. `row` + N − 1 (N 2 or 4) of a widened span's vector position
// (offsets[s][r]) decoded: one word per stage holds their N offsets, row's in
// its lowest 16 bits. The fused step is bound by memory operations (about two
// per cycle on a Zen 3 core), so four rows per word, half the offset loads of
// two, count: one Zen 3 core, one OLMoE expert at one token, 6.2–6.5 → 5.7–5.8 ms.
template <int N>
struct DecodedRows {
  __m256 rows[N];
};
template <int N>
inline DecodedRows<N> decoded_rows(const char* const books[kRvqStages],
                                   const uint16_t (&offsets)[kRvqStages][kRowBlock], int row) {
  static_assert(N == 2 || N == 4);
  using Word = std::conditional_t<N == 4, uint64_t, uint32_t>;
  Word w[kRvqStages];
  for (int s = 0; s < kRvqStages; ++s) std::memcpy(&w[s], &offsets[s][row], sizeof(Word));
  DecodedRows<N> decoded;
  for (int k = 0; k < N; ++k)
    decoded.rows[k] = decoded_vector(books, (w[0] >> 16 * k) & 0xffff, (w[1] >> 16 * k) & 0xffff,
                                     (w[2] >> 16 * k) & 0xffff);
  return decoded;
}

// Rows [block·16, block·16 + 16) of one row block for tokens [t0, t0 + T), T
// 1 or 2: the weights of each vector position are decoded into a register and
// multiplied there, with the tile's arithmetic lane for lane (even vectors
// feed lanes 0-7, odd ones lanes 8-15), so the decoded weights never travel
// through memory. Each span's index bytes are widened first (widen_span): the
// step is integer-bound otherwise (one Zen 3 core, one token, 1024×2048 in
// cache: 6.5–7.5 → 8.3 G weights/s). Groups of 4 / T rows take turns over a
// span, with eight accumulators each, kept on the stack between spans.
template <int T>
void fused_block(const RvqCodebooks& codebooks, const RvqMatrixView& m, uint32_t block,
                 const float* x, uint32_t t0, float* y) {
  static_assert(T == 1 || T == 2);
  constexpr int kGroupRows = 4 / T, kGroups = kRowBlock / kGroupRows;
  const uint32_t nv = m.shape.vectors_per_row(), cols = m.shape.cols;
  const char* const books[kRvqStages] = {reinterpret_cast<const char*>(codebooks.entries(0)),
                                         reinterpret_cast<const char*>(codebooks.entries(1)),
                                         reinterpret_cast<const char*>(codebooks.entries(2))};
  const uint8_t* indices = m.indices + m.shape.index_position(block * kRowBlock, 0, 0);
  const uint8_t* block_end = indices + nv * kVectorBytes;
  alignas(32) uint16_t offsets[kSpan][kRvqStages][kRowBlock];
  __m256 acc[kGroups][2][kGroupRows][T];
  for (auto& group : acc)
    for (auto& half : group)
      for (auto& row : half)
        for (__m256& a : row) a = _mm256_setzero_ps();
  for (uint32_t v0 = 0; v0 < nv; v0 += kSpan) {
    const uint32_t span = std::min(kSpan, nv - v0);
    widen_span<5>(indices, block_end, v0, span, offsets);
    for (int g = 0; g < kGroups; ++g) {
      // Copied out and back so the accumulators live in registers over the span.
      __m256 a[2][kGroupRows][T];
      std::memcpy(a, acc[g], sizeof a);
      auto step = [&]<int Half>(uint32_t c) {
        __m256 xs[T];
        for (int t = 0; t < T; ++t)
          xs[t] = _mm256_loadu_ps(x + size_t{t0 + t} * cols + size_t{v0 + c} * kRvqVecDim);
        const auto weights = decoded_rows<kGroupRows>(books, offsets[c], g * kGroupRows);
        for (int r = 0; r < kGroupRows; ++r)
          for (int t = 0; t < T; ++t)
            a[Half][r][t] = _mm256_fmadd_ps(weights.rows[r], xs[t], a[Half][r][t]);
      };
      // v0 is even, so vector v0 + c feeds half c % 2.
      uint32_t c = 0;
      for (; c + 2 <= span; c += 2) {
        step.template operator()<0>(c);
        step.template operator()<1>(c + 1);
      }
      if (c < span) step.template operator()<0>(c);
      std::memcpy(acc[g], a, sizeof a);
    }
  }
  for (int g = 0; g < kGroups; ++g)
    for (int r = 0; r < kGroupRows; ++r) {
      const uint32_t row = block * kRowBlock + g * kGroupRows + r;
      if (row >= m.shape.rows) continue;
      const float scale = f16_to_f32(m.scales[row]);
      for (int t = 0; t < T; ++t)
        y[size_t{t0 + t} * m.shape.rows + row] =
            scale * fold16_halves(acc[g][0][r][t], acc[g][1][r][t]);
    }
}

// Columns one pass of the tile matmul reads: four tokens' inputs for them (8
// KiB) stay in L1 while the tile's rows stream past from L2. Whole rows would
// not: at 2048 columns four tokens' inputs alone fill a Zen 3 core's 32 KiB L1,
// and every row re-read them from L2 (bench kernels, one OLMoE expert, each
// further token: 0.274 → 0.229 ms; 64 tokens: 18.7 → 15.8 ms).
constexpr uint32_t kTilePassCols = 512;
// Half h of a panel of R rows × T tokens over columns [k0, k1): lane l of half
// h accumulates columns 16c + 8h + l, so the halves are independent chains and
// one is swept at a time, with R · T accumulators in registers, reading the
// panel's weights as one stream. partial[r][t] holds the 16 lanes of row r,
// token t between passes. Three rows by four tokens fill the 16 registers (12
// accumulators, 3 rows' weights, one token's inputs). With rows 8 KiB apart
// that measured no better than two by four; in panels it is (bench kernels,
// one Zen 3 core, an OLMoE expert at 64 tokens: 15.1–16.2 → 13.2–13.5 ms;
// panels of four rows by three tokens: 14.1–14.2).
template <int R, int T>
void tile_pass(const float* panel, uint32_t cols, const float* x, uint32_t k0, uint32_t k1,
               float (*partial)[4][16]) {
  for (uint32_t h = 0; h < 2; ++h) {
    __m256 acc[R][T];
    for (int r = 0; r < R; ++r)
      for (int t = 0; t < T; ++t) acc[r][t] = _mm256_load_ps(&partial[r][t][8 * h]);
    auto step = [&](const float* w, uint32_t row_floats, uint32_t k) {
      __m256 ws[R];
      for (int r = 0; r < R; ++r) ws[r] = _mm256_loadu_ps(w + r * row_floats);
      for (int t = 0; t < T; ++t) {
        const __m256 xt = _mm256_loadu_ps(x + static_cast<size_t>(t) * cols + k);
        for (int r = 0; r < R; ++r) acc[r][t] = _mm256_fmadd_ps(ws[r], xt, acc[r][t]);
      }
    };
    const float* w = panel + size_t{k0 / 16} * R * 16;
    uint32_t k = k0;
    for (; k + 16 <= k1; k += 16, w += R * 16) step(w + 8 * h, 16, k + 8 * h);
    if (h == 0 && k < k1) step(w, 8, k);  // a final 8-column position
    for (int r = 0; r < R; ++r)
      for (int t = 0; t < T; ++t) _mm256_store_ps(&partial[r][t][8 * h], acc[r][t]);
  }
}

// Where one tile row's columns lie in a panel layout (rvq_kernels.h): columns
// 16p..16p+15 at first + p · step, except a final 8-column position's,
// tail_shift floats before.
struct TilePanelRow {
  float* first;
  uint32_t step;
  uint32_t tail_shift;
};
TilePanelRow tile_panel_row(float* tile, uint32_t tile_rows, uint32_t cols, uint32_t panel_rows,
                            uint32_t row) {
  const uint32_t first = row / panel_rows * panel_rows, slot = row - first;
  const uint32_t rows = std::min(panel_rows, tile_rows - first);
  return {tile + size_t{first} * cols + slot * 16, rows * 16, slot * 8};
}

// The tile's rows [row_begin, row_end) (at most kTileMaxRows) for tokens [t0, t0 + T).
template <int T>
void tile_tokens(const float* tile, const RvqMatrixView& m, uint32_t row_begin, uint32_t row_end,
                 const float* x, uint32_t t0, float* y) {
  static_assert(kTilePanelRowsAvx2 <= 3);
  const uint32_t cols = m.shape.cols, rows = row_end - row_begin;
  alignas(32) float partial[kTileMaxRows][4][16];
  std::memset(partial, 0, sizeof partial[0] * rows);
  const float* xt = x + size_t{t0} * cols;
  for (uint32_t k0 = 0; k0 < cols; k0 += kTilePassCols) {
    const uint32_t k1 = std::min(cols, k0 + kTilePassCols);
    for (uint32_t r = 0; r < rows; r += kTilePanelRowsAvx2) {
      with_count_up_to_three(std::min(kTilePanelRowsAvx2, rows - r), [&]<int R>() {
        tile_pass<R, T>(tile + size_t{r} * cols, cols, xt, k0, k1, &partial[r]);
      });
    }
  }
  for (uint32_t r = 0; r < rows; ++r) {
    const float scale = f16_to_f32(m.scales[row_begin + r]);
    for (int t = 0; t < T; ++t)
      y[size_t{t0 + t} * m.shape.rows + row_begin + r] = scale * fold16(partial[r][t]);
  }
}

}  // namespace

void rvq_decode_rows_avx2(const RvqCodebooks& codebooks, const RvqMatrixView& m, uint32_t row_begin,
                          uint32_t row_end, uint32_t panel_rows, float* tile) {
  const uint32_t nv = m.shape.vectors_per_row(), cols = m.shape.cols;
  const uint32_t tile_rows = row_end - row_begin;
  const char* const books[kRvqStages] = {reinterpret_cast<const char*>(codebooks.entries(0)),
                                         reinterpret_cast<const char*>(codebooks.entries(1)),
                                         reinterpret_cast<const char*>(codebooks.entries(2))};
  alignas(32) uint16_t offsets[kSpan][kRvqStages][kRowBlock];
  // A row block at a time, a span of its vector positions at a time, two rows
  // at a time.
  for (uint32_t b0 = row_begin / kRowBlock * kRowBlock; b0 < row_end; b0 += kRowBlock) {
    const uint8_t* indices = m.indices + m.shape.index_position(b0, 0, 0);
    const uint8_t* block_end = indices + nv * kVectorBytes;
    const uint32_t first = std::max(row_begin, b0) - b0,
                   last = std::min(row_end, b0 + kRowBlock) - b0;
    for (uint32_t v0 = 0; v0 < nv; v0 += kSpan) {
      const uint32_t span = std::min(kSpan, nv - v0);
      widen_span<5>(indices, block_end, v0, span, offsets);
      // Pairs start on even rows, so a word never reaches past the offsets.
      for (uint32_t r = first & ~1u; r < last; r += 2) {
        const uint32_t in_tile = b0 + r - row_begin;
        // A row outside the tile writes every position to a scratch one instead,
        // which keeps the loop free of branches.
        alignas(32) float scratch[2 * kRvqVecDim];
        const TilePanelRow outside{scratch, 0, 0};
        const TilePanelRow low =
            r >= first ? tile_panel_row(tile, tile_rows, cols, panel_rows, in_tile) : outside;
        const TilePanelRow high =
            r + 1 < last ? tile_panel_row(tile, tile_rows, cols, panel_rows, in_tile + 1) : outside;
        float* low_at = low.first + size_t{v0 / 2} * low.step;
        float* high_at = high.first + size_t{v0 / 2} * high.step;
        auto store = [&](uint32_t c, float* low_to, float* high_to) {
          const auto pair = decoded_rows<2>(books, offsets[c], static_cast<int>(r));
          _mm256_storeu_ps(low_to, pair.rows[0]);
          _mm256_storeu_ps(high_to, pair.rows[1]);
        };
        // v0 is even: vectors c and c + 1 share a 16-column position.
        uint32_t c = 0;
        for (; c + 2 <= span; c += 2, low_at += low.step, high_at += high.step) {
          store(c, low_at, high_at);
          store(c + 1, low_at + 8, high_at + 8);
        }
        if (c < span) store(c, low_at - low.tail_shift, high_at - high.tail_shift);
      }
    }
  }
}

void rvq_tile_matmul_avx2(const float* tile, const RvqMatrixView& m, uint32_t row_begin,
                          uint32_t row_end, const float* x, uint32_t tokens, float* y) {
  in_groups_of_four(tokens, [&]<int T>(size_t t) {
    tile_tokens<T>(tile, m, row_begin, row_end, x, static_cast<uint32_t>(t), y);
  });
}

namespace {

// [Σ v0, Σ v1, Σ v2, Σ v3] over each vector's eight int32 lanes.
inline __m128i lane_sums(__m256i v0, __m256i v1, __m256i v2, __m256i v3) {
  const __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(v0, v1), _mm256_hadd_epi32(v2, v3));
  return _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}

// R rows (at most 4) of an int8 tile from tile row r_in_tile, by T tokens
// from t0, into y[t · y_stride + r]. Each block's products: maddubs of |w| and
// x · sign(w), pairs at most 2 · 127 · 127 (no saturation), widened by madd. A
// group's blocks sum in int32, then fold to one exact sum per output.
template <int R, int T>
void int8_tile(const int8_t* tile, uint32_t stride, uint32_t r_in_tile, const Int8Activations& x,
               uint32_t t0, float sigma, const uint16_t* scales, float* y, size_t y_stride) {
  const uint32_t used = x.used_blocks();
  const __m256i ones = _mm256_set1_epi16(1);
  __m128 acc[T];
  for (__m128& a : acc) a = _mm_setzero_ps();
  for (uint32_t g = 0; g < x.groups(); ++g) {
    __m256i sum[4][T];
    for (auto& row : sum)
      for (__m256i& lanes : row) lanes = _mm256_setzero_si256();
    const uint32_t b_end = std::min(used, (g + 1) * kQuantGroup / kInt8Block);
    for (uint32_t b = g * kQuantGroup / kInt8Block; b < b_end; ++b) {
      __m256i xs[T];
      for (int t = 0; t < T; ++t)
        xs[t] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.block_values(t0 + t, b)));
      for (int r = 0; r < R; ++r) {
        const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(
            tile + size_t{r_in_tile + r} * stride + size_t{b} * kInt8Block));
        const __m256i magnitude = _mm256_abs_epi8(w);
        for (int t = 0; t < T; ++t) {
          const __m256i pairs = _mm256_maddubs_epi16(magnitude, _mm256_sign_epi8(xs[t], w));
          sum[r][t] = _mm256_add_epi32(sum[r][t], _mm256_madd_epi16(pairs, ones));
        }
      }
    }
    for (int t = 0; t < T; ++t) {
      const __m128 totals = _mm_cvtepi32_ps(lane_sums(sum[0][t], sum[1][t], sum[2][t], sum[3][t]));
      acc[t] = _mm_add_ps(acc[t], _mm_mul_ps(_mm_set1_ps(x.group_scale(t0 + t, g)), totals));
    }
  }
  for (int t = 0; t < T; ++t) {
    alignas(16) float lanes[4];
    _mm_store_ps(lanes, acc[t]);
    for (int r = 0; r < R; ++r)
      y[(t0 + t) * y_stride + r] = f16_to_f32(scales[r]) * (sigma * lanes[r]);
  }
}

}  // namespace

void rvq_decode_rows_int8_avx2(const RvqCodebooks& codebooks, const RvqMatrixView& m,
                               uint32_t row_begin, uint32_t row_end, int8_t* tile) {
  const uint32_t nv = m.shape.vectors_per_row(), cols = m.shape.cols;
  const uint32_t stride = int8_tile_stride(cols);
  const char* const books[kRvqStages] = {reinterpret_cast<const char*>(codebooks.byte_entries(0)),
                                         reinterpret_cast<const char*>(codebooks.byte_entries(1)),
                                         reinterpret_cast<const char*>(codebooks.byte_entries(2))};
  alignas(32) uint16_t offsets[kSpan][kRvqStages][kRowBlock];
  // Rows outside the tile (a word's four rows reach past it) write here
  // instead, which keeps the loop free of branches.
  alignas(16) int8_t scratch[kSpan * kRvqVecDim];
  // A row block at a time, a span of its vector positions at a time, four rows
  // at a time, their offsets one 64-bit word per stage. The block and span
  // loops repeat rvq_decode_rows_avx2's: one helper taking each decoder's row
  // loop as a lambda made both 5–15% slower (bench kernels, one OLMoE expert at
  // 8 tokens, int8 tiles 2.0–2.2 → 2.3–2.4 ms).
  for (uint32_t b0 = row_begin / kRowBlock * kRowBlock; b0 < row_end; b0 += kRowBlock) {
    const uint8_t* indices = m.indices + m.shape.index_position(b0, 0, 0);
    const uint8_t* block_end = indices + nv * kVectorBytes;
    const uint32_t first = std::max(row_begin, b0) - b0,
                   last = std::min(row_end, b0 + kRowBlock) - b0;
    for (uint32_t v0 = 0; v0 < nv; v0 += kSpan) {
      const uint32_t span = std::min(kSpan, nv - v0);
      widen_span<3>(indices, block_end, v0, span, offsets);
      for (uint32_t r = first & ~3u; r < last; r += 4) {
        int8_t* to[4];
        for (uint32_t k = 0; k < 4; ++k)
          to[k] = r + k >= first && r + k < last
                      ? tile + size_t{b0 + r + k - row_begin} * stride + size_t{v0} * kRvqVecDim
                      : scratch;
        for (uint32_t c = 0; c < span; ++c) {
          uint64_t words[kRvqStages];
          for (int s = 0; s < kRvqStages; ++s)
            std::memcpy(&words[s], &offsets[c][s][r], sizeof words[s]);
          for (int k = 0; k < 4; ++k) {
            const auto entry = [&](int s) {
              return _mm_loadl_epi64(
                  reinterpret_cast<const __m128i*>(books[s] + ((words[s] >> 16 * k) & 0xffff)));
            };
            // Wrapping byte sums: the total lies within ±127 whatever the order.
            const __m128i w = _mm_add_epi8(_mm_add_epi8(entry(0), entry(1)), entry(2));
            _mm_storel_epi64(reinterpret_cast<__m128i*>(to[k] + c * kRvqVecDim), w);
          }
        }
      }
    }
  }
  if (stride > cols)
    for (uint32_t r = 0; r < row_end - row_begin; ++r)
      std::memset(tile + size_t{r} * stride + cols, 0, stride - cols);
}

void rvq_int8_tile_matmul_avx2(const int8_t* tile, float sigma, const RvqMatrixView& m,
                               uint32_t row_begin, uint32_t row_end, const Int8Activations& x,
                               float* y) {
  const uint32_t stride = int8_tile_stride(m.shape.cols);
  // Four rows share each token's input loads; two tokens share each row's
  // weight loads and magnitudes.
  for (uint32_t r = row_begin; r < row_end; r += 4) {
    auto outputs = [&]<int R>() {
      uint32_t t = 0;
      for (; t + 2 <= x.tokens; t += 2)
        int8_tile<R, 2>(tile, stride, r - row_begin, x, t, sigma, m.scales + r, y + r,
                        m.shape.rows);
      if (t < x.tokens)
        int8_tile<R, 1>(tile, stride, r - row_begin, x, t, sigma, m.scales + r, y + r,
                        m.shape.rows);
    };
    switch (std::min(4u, row_end - r)) {
      case 4:
        outputs.template operator()<4>();
        break;
      case 3:
        outputs.template operator()<3>();
        break;
      case 2:
        outputs.template operator()<2>();
        break;
      default:
        outputs.template operator()<1>();
        break;
    }
  }
}

void rvq_fused_rows_avx2(const RvqCodebooks& codebooks, const RvqMatrixView& m,
                         uint32_t block_begin, uint32_t block_end, const float* x, uint32_t tokens,
                         float* y) {
  uint32_t t = 0;
  for (; t + 2 <= tokens; t += 2)
    for (uint32_t b = block_begin; b < block_end; ++b) fused_block<2>(codebooks, m, b, x, t, y);
  if (t < tokens)
    for (uint32_t b = block_begin; b < block_end; ++b) fused_block<1>(codebooks, m, b, x, t, y);
}

}  // namespace sluice::kernels::detail
