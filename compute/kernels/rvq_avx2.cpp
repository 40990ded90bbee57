// compute/kernels/rvq_avx2.cpp: AVX2 bodies of the RVQ kernels, which
// AVX-512 machines run too: the table build, the table path's rows (codes
// looked up in registers with pshufb), and the decode-once path's decoders
// and tile matmuls (f32 and int8). Built with -mavx2 -mfma but must not
// contract mul+add: the table's bits must equal the scalar path's (meson
// passes -ffp-contract=off); the fused multiply-adds are written out.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "compute/kernels/rvq_kernels.h"

namespace sluice::kernels::detail {

float rvq_build_group_avx2(const RvqCodebooks& codebooks, const float* x, uint32_t v_begin,
                           uint32_t v_end, int planes, int8_t* codes) {
  alignas(32) float exact[kRvqGroupVectors][kRvqStages][kRvqEntries];
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 amax = _mm256_setzero_ps();
  for (uint32_t v = v_begin; v < v_end; ++v) {
    __m256 xs[kRvqVecDim];
    for (int j = 0; j < kRvqVecDim; ++j) xs[j] = _mm256_set1_ps(x[v * kRvqVecDim + j]);
    for (int s = 0; s < kRvqStages; ++s) {
      const float* ct = codebooks.transposed(s);
      for (int c = 0; c < kRvqEntries; c += 8) {
        __m256 acc = _mm256_mul_ps(xs[0], _mm256_load_ps(ct + c));
        for (int j = 1; j < kRvqVecDim; ++j)
          acc = _mm256_add_ps(acc, _mm256_mul_ps(xs[j], _mm256_load_ps(ct + j * kRvqEntries + c)));
        _mm256_store_ps(&exact[v - v_begin][s][c], acc);
        amax = _mm256_max_ps(_mm256_andnot_ps(sign, acc), amax);  // a NaN lane keeps amax
      }
    }
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, amax);
  float group_max = 0.0f;
  for (float l : lanes) group_max = std::max(group_max, l);
  const int32_t code_max = rvq_table_code_max(planes);
  const __m256 inv =
      _mm256_set1_ps(group_max > 0.0f ? static_cast<float>(code_max) / group_max : 0.0f);
  const __m256i hi = _mm256_set1_epi32(code_max), lo = _mm256_set1_epi32(-code_max);
  for (uint32_t v = v_begin; v < v_end; ++v)
    for (int s = 0; s < kRvqStages; ++s)
      for (int quarter = 0; quarter < kRvqEntries / 16; ++quarter) {
        const float* f = &exact[v - v_begin][s][16 * quarter];
        __m256i q0 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_load_ps(f), inv));
        __m256i q1 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_load_ps(f + 8), inv));
        q0 = _mm256_max_epi32(_mm256_min_epi32(q0, hi), lo);
        q1 = _mm256_max_epi32(_mm256_min_epi32(q1, hi), lo);
        // packs works per 128-bit lane: put the halves back in order.
        const __m256i words = _mm256_permute4x64_epi64(_mm256_packs_epi32(q0, q1), 0xd8);
        const __m128i first = _mm256_castsi256_si128(words),
                      second = _mm256_extracti128_si256(words, 1);
        int8_t* at = codes + table_code_offset(planes, v, s, 16 * quarter);
        if (planes == 1) {
          _mm_storeu_si128(reinterpret_cast<__m128i*>(at), _mm_packs_epi16(first, second));
        } else {
          const __m128i low_byte = _mm_set1_epi16(0xff);
          _mm_storeu_si128(
              reinterpret_cast<__m128i*>(at),
              _mm_packus_epi16(_mm_and_si128(first, low_byte), _mm_and_si128(second, low_byte)));
          _mm_storeu_si128(reinterpret_cast<__m128i*>(at + kRvqTablePlaneBytes),
                           _mm_packs_epi16(_mm_srai_epi16(first, 8), _mm_srai_epi16(second, 8)));
        }
      }
  return group_max > 0.0f ? group_max / static_cast<float>(code_max) : 0.0f;
}

namespace {

// b where mask's bit 7 is set, else a. GCC 12 rewrites _mm256_blendv_epi8
// into a select and then puts a compare against zero before most blends;
// the lookups below only ever need bit 7.
inline __m256i blend_on_bit7(__m256i a, __m256i b, __m256i mask) {
  __m256i blended;
  asm("vpblendvb %3, %2, %1, %0" : "=x"(blended) : "x"(a), "x"(b), "x"(mask));
  return blended;
}

// One stage's codes of one vector for 16 rows per lane looked up in a table
// vector's four 16-entry quarters (lane 0 stage 0, lane 1 stage 1):
// low holds each code's low 4 bits, bit4 and bit5 its higher bits in bit 7.
inline __m256i lookup(const __m256i quarters[4], __m256i low, __m256i bit4, __m256i bit5) {
  const __m256i first = blend_on_bit7(_mm256_shuffle_epi8(quarters[0], low),
                                      _mm256_shuffle_epi8(quarters[1], low), bit4);
  const __m256i second = blend_on_bit7(_mm256_shuffle_epi8(quarters[2], low),
                                       _mm256_shuffle_epi8(quarters[3], low), bit4);
  return blend_on_bit7(first, second, bit5);
}

// One row block's codes of one vector, as its 48-byte unit gives them:
// each code's low 4 bits for rows 0-15 (`first`) and 16-31 (`second`), stage
// 0 in lane 0 and stage 1 in lane 1, and in `highs` each lane's byte i holding
// its stage's high-bit pairs of rows i and 16 + i in bits 4-7 (bits 0-3 hold
// other bits, which blendv never reads).
struct UnitCodes {
  __m256i first, second, highs;
};
inline UnitCodes unit_codes_of(const uint8_t* unit) {
  const __m256i nibble = _mm256_set1_epi8(15);
  const __m256i lows = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(unit));
  return {_mm256_and_si256(lows, nibble), _mm256_and_si256(_mm256_srli_epi16(lows, 4), nibble),
          _mm256_sllv_epi32(_mm256_broadcastsi128_si256(
                                _mm_loadu_si128(reinterpret_cast<const __m128i*>(unit + 32))),
                            _mm256_setr_epi32(4, 4, 4, 4, 0, 0, 0, 0))};
}

// One byte plane of a table vector's codes looked up for a unit: bytes of
// rows 0-15 in `low_rows`, rows 16-31 in `high_rows`, stage 0 in lane 0.
// blendv reads bit 7 alone, so byte adds move each high bit there: shifts
// and pshufb share two of Zen 3's four vector pipes, and they were the
// loop's limit.
inline void lookup_plane(const UnitCodes& u, const int8_t* plane, __m256i& low_rows,
                         __m256i& high_rows) {
  __m256i quarters[4];
  for (int q = 0; q < 4; ++q)
    quarters[q] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(plane + 32 * q));
  const __m256i high_bit5 = u.highs, high_bit4 = _mm256_add_epi8(high_bit5, high_bit5);
  const __m256i low_bit5 = _mm256_add_epi8(high_bit4, high_bit4);
  const __m256i low_bit4 = _mm256_add_epi8(low_bit5, low_bit5);
  low_rows = lookup(quarters, u.first, low_bit4, low_bit5);
  high_rows = lookup(quarters, u.second, high_bit4, high_bit5);
}

// A lookup's even and odd bytes widened to int16, signed or (a two-plane
// table's low plane) unsigned: maddubs multiplies by 1 and 0 on the
// multiply pipes, where shifts would queue behind the lookups.
template <bool Unsigned>
inline __m256i even_bytes(__m256i b) {
  const __m256i even = _mm256_set1_epi16(0x0001);
  return Unsigned ? _mm256_maddubs_epi16(b, even) : _mm256_maddubs_epi16(even, b);
}
template <bool Unsigned>
inline __m256i odd_bytes(__m256i b) {
  const __m256i odd = _mm256_set1_epi16(0x0100);
  return Unsigned ? _mm256_maddubs_epi16(b, odd) : _mm256_maddubs_epi16(odd, b);
}

// A plane's lookups for rows 0-15 (low) and 16-31 (high) added to its int16
// sums [even low rows, odd low rows, even high rows, odd high rows].
template <bool Unsigned>
inline void add_widened(__m256i low, __m256i high, __m256i sums[4]) {
  sums[0] = _mm256_add_epi16(sums[0], even_bytes<Unsigned>(low));
  sums[1] = _mm256_add_epi16(sums[1], odd_bytes<Unsigned>(low));
  sums[2] = _mm256_add_epi16(sums[2], even_bytes<Unsigned>(high));
  sums[3] = _mm256_add_epi16(sums[3], odd_bytes<Unsigned>(high));
}

// 16 int16 sums (lane 0 stage 0, lane 1 stage 1) of 8 rows to their 8 int32 totals.
inline __m256i stage_totals(__m256i sums) {
  const __m128i both =
      _mm_add_epi16(_mm256_castsi256_si128(sums), _mm256_extracti128_si256(sums, 1));
  return _mm256_cvtepi16_epi32(both);
}

// The units are requested this far ahead of the lookups: the hardware
// prefetcher alone left the loop waiting on memory (a top-8 OLMoE expert step
// from memory on Zen 3: 1.83 → 1.55 ms; 1.5 to 4.5 KiB ahead measured alike;
// with the slower loop before, no distance gained anything).
constexpr uintptr_t kUnitPrefetchBytes = 64 * kRvqUnitBytes;

// One row block's 32 outputs for one token with Planes byte planes: per
// group, each vector's lookups widen to int16 sums of even and odd rows (at
// most 32 · 255 for a low plane, 32 · 128 for a signed one); a group ends in
// one fma per row. A unit costs 2 shifts, and each plane 8 pshufb, 6 blends
// and 4 maddubs, which take longer than the memory needs for the unit's
// bytes (Zen 3: an OLMoE gate matrix in cache 0.057 ms, its bytes 0.047 ms
// at 16.8 GB/s). Adding two vectors' int8 lookups in bytes before widening
// (codes of ±63) measured no faster.
template <int Planes>
void block_rows(const uint8_t* block, uint32_t nv, const int8_t* codes, const float* scales,
                float out[kRowBlock]) {
  constexpr size_t kVectorBytes = kRvqTablePlaneBytes * Planes;
  // [plane][even low rows, odd low rows, even high rows, odd high rows]
  __m256 acc[4];
  for (__m256& a : acc) a = _mm256_setzero_ps();
  for (uint32_t v0 = 0; v0 < nv; v0 += kRvqGroupVectors) {
    const uint32_t v1 = std::min(nv, v0 + kRvqGroupVectors);
    __m256i sums[Planes][4];
    for (auto& plane : sums)
      for (__m256i& sum : plane) sum = _mm256_setzero_si256();
    for (uint32_t v = v0; v < v1; ++v) {
      const uint8_t* unit = block + size_t{v} * kRvqUnitBytes;
      // Through an integer: the address may lie past the matrix, which a
      // prefetch may touch but a pointer may not.
      _mm_prefetch(
          reinterpret_cast<const char*>(reinterpret_cast<uintptr_t>(unit) + kUnitPrefetchBytes),
          _MM_HINT_T0);
      const UnitCodes u = unit_codes_of(unit);
      const int8_t* table = codes + size_t{v} * kVectorBytes;
      for (int p = 0; p < Planes; ++p) {
        __m256i low, high;
        lookup_plane(u, table + p * kRvqTablePlaneBytes, low, high);
        // A two-plane table's low plane holds unsigned bytes.
        if (Planes == 2 && p == 0)
          add_widened<true>(low, high, sums[p]);
        else
          add_widened<false>(low, high, sums[p]);
      }
    }
    const __m256 d = _mm256_set1_ps(scales[v0 / kRvqGroupVectors]);
    for (int k = 0; k < 4; ++k) {
      __m256i total = stage_totals(sums[Planes - 1][k]);
      if constexpr (Planes == 2)
        total = _mm256_add_epi32(_mm256_slli_epi32(total, 8), stage_totals(sums[0][k]));
      acc[k] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(total), acc[k]);
    }
  }
  // Rows 2i and 2i + 1 back in order.
  auto interleave = [](__m256 even, __m256 odd, float* to) {
    const __m256 first = _mm256_unpacklo_ps(even, odd), second = _mm256_unpackhi_ps(even, odd);
    _mm256_storeu_ps(to, _mm256_permute2f128_ps(first, second, 0x20));
    _mm256_storeu_ps(to + 8, _mm256_permute2f128_ps(first, second, 0x31));
  };
  interleave(acc[0], acc[1], out);
  interleave(acc[2], acc[3], out + 16);
}

}  // namespace

void rvq_rows_avx2(const RvqTable& table, std::span<const uint32_t> tokens, const RvqMatrixView& m,
                   uint32_t block_begin, uint32_t block_end, float* y) {
  const uint32_t nv = m.shape.vectors_per_row();
  for (uint32_t b = block_begin; b < block_end; ++b) {
    const uint8_t* block = m.indices + m.shape.unit_offset(b, 0);
    const uint32_t row0 = b * kRowBlock, rows = std::min<uint32_t>(kRowBlock, m.shape.rows - row0);
    for (size_t t = 0; t < tokens.size(); ++t) {
      alignas(32) float out[kRowBlock];
      if (table.planes() == 1)
        block_rows<1>(block, nv, table.token_codes(tokens[t]), table.token_scales(tokens[t]), out);
      else
        block_rows<2>(block, nv, table.token_codes(tokens[t]), table.token_scales(tokens[t]), out);
      for (uint32_t r = 0; r < rows; ++r)
        y[t * m.shape.rows + row0 + r] = f16_to_f32(m.scales[row0 + r]) * out[r];
    }
  }
}

namespace {

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

// Vector positions whose codes are unpacked at a time.
constexpr uint32_t kSpan = 16;

// The 64 codes of one row block's vector from its 48-byte unit:
// codes[s][r] for the block's rows r.
inline void unit_codes(const uint8_t* unit, uint8_t (*codes)[kRowBlock]) {
  const UnitCodes u = unit_codes_of(unit);
  const __m256i bits45 = _mm256_set1_epi8(0x30);
  // Rows 0-15 and 16-31, each with stage 0 in lane 0 and stage 1 in lane 1.
  const __m256i first = _mm256_or_si256(u.first, _mm256_and_si256(u.highs, bits45));
  const __m256i second =
      _mm256_or_si256(u.second, _mm256_and_si256(_mm256_srli_epi16(u.highs, 2), bits45));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(codes[0]),
                      _mm256_permute2x128_si256(first, second, 0x20));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(codes[1]),
                      _mm256_permute2x128_si256(first, second, 0x31));
}

// Every row block overlapping rows [row_begin, row_end), a span of its
// vectors at a time: row(codes, v0, span, r) for each row r of the range,
// codes[c][s][r % 32] holding vector v0 + c's codes.
template <typename Row>
void for_each_span(const RvqMatrixView& m, uint32_t row_begin, uint32_t row_end, Row&& row) {
  const uint32_t nv = m.shape.vectors_per_row();
  alignas(32) uint8_t codes[kSpan][kRvqStages][kRowBlock];
  for (uint32_t b0 = row_begin / kRowBlock * kRowBlock; b0 < row_end; b0 += kRowBlock) {
    const uint8_t* block = m.indices + m.shape.unit_offset(b0 / kRowBlock, 0);
    const uint32_t first = std::max(row_begin, b0), last = std::min(row_end, b0 + kRowBlock);
    for (uint32_t v0 = 0; v0 < nv; v0 += kSpan) {
      const uint32_t span = std::min(kSpan, nv - v0);
      for (uint32_t c = 0; c < span; ++c)
        unit_codes(block + size_t{v0 + c} * kRvqUnitBytes, codes[c]);
      for (uint32_t r = first; r < last; ++r) row(codes, v0, span, r);
    }
  }
}

}  // namespace

void rvq_decode_rows_avx2(const RvqCodebooks& codebooks, const RvqMatrixView& m, uint32_t row_begin,
                          uint32_t row_end, uint32_t panel_rows, float* tile) {
  const uint32_t cols = m.shape.cols, tile_rows = row_end - row_begin;
  const float* books[kRvqStages] = {codebooks.entries(0), codebooks.entries(1)};
  for_each_span(
      m, row_begin, row_end,
      [&](const uint8_t(*codes)[kRvqStages][kRowBlock], uint32_t v0, uint32_t span, uint32_t r) {
        const TilePanelRow to = tile_panel_row(tile, tile_rows, cols, panel_rows, r - row_begin);
        const uint32_t lane = r % kRowBlock, full_positions = cols / 16;
        for (uint32_t c = 0; c < span; ++c) {
          const uint32_t v = v0 + c, position = v / 4;
          const __m128 w = _mm_add_ps(_mm_load_ps(books[0] + codes[c][0][lane] * kRvqVecDim),
                                      _mm_load_ps(books[1] + codes[c][1][lane] * kRvqVecDim));
          float* at = to.first + size_t{position} * to.step + v % 4 * kRvqVecDim;
          _mm_storeu_ps(position < full_positions ? at : at - to.tail_shift, w);
        }
      });
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
  const uint32_t cols = m.shape.cols, stride = int8_tile_stride(cols);
  const int8_t* books[kRvqStages] = {codebooks.byte_entries(0), codebooks.byte_entries(1)};
  for_each_span(
      m, row_begin, row_end,
      [&](const uint8_t(*codes)[kRvqStages][kRowBlock], uint32_t v0, uint32_t span, uint32_t r) {
        const uint32_t lane = r % kRowBlock;
        int8_t* to = tile + size_t{r - row_begin} * stride + size_t{v0} * kRvqVecDim;
        for (uint32_t c = 0; c < span; ++c) {
          int32_t e0, e1;
          std::memcpy(&e0, books[0] + codes[c][0][lane] * kRvqVecDim, sizeof e0);
          std::memcpy(&e1, books[1] + codes[c][1][lane] * kRvqVecDim, sizeof e1);
          // Byte sums: the total lies within ±126 whatever the order.
          const int32_t w =
              _mm_cvtsi128_si32(_mm_add_epi8(_mm_cvtsi32_si128(e0), _mm_cvtsi32_si128(e1)));
          std::memcpy(to + c * kRvqVecDim, &w, sizeof w);
        }
      });
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

}  // namespace sluice::kernels::detail
