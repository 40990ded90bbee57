// compute/kernels/rvq.cpp: RVQ table build and matvec entry points, their
// argument checks, the scalar bodies, and the split of work over the pool.
// Every path computes exactly what rvq.h documents; never changes the codes.
#include "compute/kernels/rvq.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "compute/kernels/rounding.h"
#include "compute/kernels/rvq_kernels.h"
#include "compute/kernels/thread_pool.h"
#include "proto/error.h"

namespace sluice::kernels {

namespace {

constexpr uint32_t kBuildGrainVectors = 32;
constexpr uint32_t kRowGrainBlocks = 4;  // 64 rows: the AVX-512 kernel's group
// A chunk of rows one call computes: up to 1024, the AVX-512 kernel's sweep,
// which reads each table span from L1 once for all the chunk's rows.
constexpr size_t kMaxChunkGrains = 16;
constexpr size_t kGatherPadCodes = 2;

// Every build overwrites the whole table, so a table that must grow drops its
// old storage first: growing in place would hold old and new at once, a
// transient the memory plan does not count (a prefill chunk's down table
// grows expert by expert).
template <typename T>
void resize_discarding(std::vector<T>& v, size_t size) {
  if (size > v.capacity()) std::vector<T>().swap(v);
  v.resize(size);
}

// Requests slice `part` of `parts` of the matrix's index bytes into L2.
void prefetch_slice(const RvqMatrixView* matrix, size_t part, size_t parts) {
  if (matrix == nullptr || matrix->indices == nullptr) return;
  constexpr size_t kLine = 64;
  const size_t lines = (matrix->shape.index_bytes() + kLine - 1) / kLine;
  for (size_t l = part * lines / parts; l < (part + 1) * lines / parts; ++l)
    _mm_prefetch(reinterpret_cast<const char*>(matrix->indices + l * kLine), _MM_HINT_T1);
}

void check_matrix(const RvqTable& table, const RvqMatrixView& m) {
  if (m.shape.cols == 0 || m.shape.cols % kRvqVecDim != 0)
    fail("rvq matvec: matrix cols {} is not a positive multiple of 8", m.shape.cols);
  if (m.shape.cols != table.cols())
    fail("rvq matvec: matrix has {} cols but the table was built for {} inputs", m.shape.cols,
         table.cols());
  if (m.indices == nullptr || m.scales == nullptr)
    fail("rvq matvec: matrix indices or scales missing");
}

}  // namespace

RvqCodebooks::RvqCodebooks(const float* stage0, const float* stage1, const float* stage2) {
  const float* stages[kRvqStages] = {stage0, stage1, stage2};
  for (int s = 0; s < kRvqStages; ++s)
    std::copy(stages[s], stages[s] + kRvqEntries * kRvqVecDim,
              entries_.begin() + s * kRvqEntries * kRvqVecDim);
  for (int s = 0; s < kRvqStages; ++s)
    for (int c = 0; c < kRvqEntries; ++c)
      for (int j = 0; j < kRvqVecDim; ++j)
        transposed_[(size_t{static_cast<size_t>(s)} * kRvqVecDim + j) * kRvqEntries + c] =
            stages[s][c * kRvqVecDim + j];
  // rvq_decoded.h's integer entries: bound = (m0 + m1) + m2, m_s = max |C_s|.
  constexpr size_t kStageFloats = size_t{kRvqEntries} * kRvqVecDim;
  float bound = 0.0f;
  for (int s = 0; s < kRvqStages; ++s) {
    float stage_max = 0.0f;
    for (size_t i = 0; i < kStageFloats; ++i)
      stage_max = std::max(stage_max, std::fabs(stages[s][i]));
    bound += stage_max;
  }
  const float inverse = bound > 0.0f ? kRvqIntegerBound / bound : 0.0f;
  integer_scale_ = bound / kRvqIntegerBound;
  for (int s = 0; s < kRvqStages; ++s)
    for (size_t i = 0; i < kStageFloats; ++i)
      byte_entries_[s * kStageFloats + i] =
          static_cast<int8_t>(detail::round_clamped(stages[s][i] * inverse, 127));
}

namespace detail {

float rvq_build_scalar(const RvqCodebooks& codebooks, const float* x, uint32_t v_begin,
                       uint32_t v_end, float* lut) {
  float amax = 0.0f;
  for (uint32_t v = v_begin; v < v_end; ++v) {
    const float* xv = x + size_t{v} * kRvqVecDim;
    for (int s = 0; s < kRvqStages; ++s) {
      const float* ct = codebooks.transposed(s);
      float* out = lut + (size_t{v} * kRvqStages + s) * kRvqEntries;
      for (int c = 0; c < kRvqEntries; ++c) {
        float acc = xv[0] * ct[c];
        for (int j = 1; j < kRvqVecDim; ++j) acc = acc + xv[j] * ct[j * kRvqEntries + c];
        out[c] = acc;
        amax = std::max(amax, std::fabs(acc));
      }
    }
  }
  return amax;
}

void rvq_quantize_scalar(const float* exact, size_t count, float inv, int16_t* codes,
                         uint8_t* planes) {
  for (size_t i = 0; i < count; ++i) {
    codes[i] = static_cast<int16_t>(round_clamped(exact[i] * inv, kRvqCodeMax));
    if (planes == nullptr) continue;
    const auto biased = static_cast<uint16_t>(codes[i] + kRvqPlaneBias);
    uint8_t* block = planes + i / kRvqEntries * 2 * kRvqEntries;
    block[i % kRvqEntries] = static_cast<uint8_t>(biased & 0xff);
    block[kRvqEntries + i % kRvqEntries] = static_cast<uint8_t>(biased >> 8);
  }
}

// Rows of 16-row blocks [block_begin, block_end), eight rows at a time so
// their eight sums stay in registers, with the vector positions swept in spans
// of kRvqSpanVectors (Zen 5, bench kernels, 1 thread: 10.4-11 G weights/s for one token, where
// row by row over the whole table measured 4.2, and AVX2's gathers 9.3-9.5).
void rvq_rows_scalar(const RvqTable& table, std::span<const uint32_t> tokens,
                     const RvqMatrixView& m, uint32_t block_begin, uint32_t block_end, float* y) {
  constexpr uint32_t kChunkBlocks = 64;
  constexpr size_t kSpanSteps = size_t{kRvqSpanVectors} * kRvqStages;
  const size_t steps = size_t{m.shape.vectors_per_row()} * kRvqStages;
  const size_t block_bytes = steps * kRowBlock;
  int32_t sums[kChunkBlocks * kRowBlock];
  for (uint32_t c0 = block_begin; c0 < block_end; c0 += kChunkBlocks) {
    const uint32_t blocks = std::min(block_end, c0 + kChunkBlocks) - c0;
    const uint32_t row0 = c0 * kRowBlock;
    const uint32_t rows = std::min(m.shape.rows, (c0 + blocks) * kRowBlock) - row0;
    for (size_t t = 0; t < tokens.size(); ++t) {
      const int16_t* codes = table.token_codes(tokens[t]);
      std::fill_n(sums, blocks * kRowBlock, 0);
      for (size_t s0 = 0; s0 < steps; s0 += kSpanSteps) {
        const size_t s1 = std::min(steps, s0 + kSpanSteps);
        for (uint32_t i = 0; i < blocks * 2; ++i) {
          const uint8_t* eight = m.indices + (c0 + i / 2) * block_bytes + (i % 2) * 8;
          int32_t* out = sums + i * 8;
          int32_t a0 = out[0], a1 = out[1], a2 = out[2], a3 = out[3];
          int32_t a4 = out[4], a5 = out[5], a6 = out[6], a7 = out[7];
          for (size_t step = s0; step < s1; ++step) {
            const uint8_t* at = eight + step * kRowBlock;
            const int16_t* c = codes + step * kRvqEntries;
            a0 += c[at[0]], a1 += c[at[1]], a2 += c[at[2]], a3 += c[at[3]];
            a4 += c[at[4]], a5 += c[at[5]], a6 += c[at[6]], a7 += c[at[7]];
          }
          out[0] = a0, out[1] = a1, out[2] = a2, out[3] = a3;
          out[4] = a4, out[5] = a5, out[6] = a6, out[7] = a7;
        }
      }
      const float scale = table.token_scale(tokens[t]);
      for (uint32_t r = 0; r < rows; ++r)
        y[t * m.shape.rows + row0 + r] = rvq_row_output(sums[r], scale, m.scales[row0 + r]);
    }
  }
}

}  // namespace detail

void RvqTable::resize(uint32_t cols, uint32_t tokens, Isa isa) {
  if (cols == 0 || cols % kRvqVecDim != 0)
    fail("rvq table: {} inputs is not a positive multiple of 8", cols);
  if (cols > kRvqMaxCols)
    fail("rvq table: {} inputs exceeds the kernel's limit of {}", cols, kRvqMaxCols);
  if (tokens == 0) fail("rvq table: no input vectors");
  cols_ = cols;
  tokens_ = tokens;
  const size_t per_token = codes_per_token();
  const uint32_t nv = cols / kRvqVecDim;
  has_planes_ = isa == Isa::kAvx512;
  // Capacity never shrinks: a rebuild at the same or a smaller size allocates nothing.
  // The f32 table is one token's: it stays in L2 between the two passes.
  resize_discarding(exact_, per_token);
  resize_discarding(codes_, tokens * per_token + kGatherPadCodes);
  if (has_planes_) resize_discarding(planes_, tokens * per_token * 2);
  resize_discarding(grain_max_, (nv + kBuildGrainVectors - 1) / kBuildGrainVectors);
  resize_discarding(scales_, size_t{tokens});
}

void RvqTable::build_exact(const RvqCodebooks& codebooks, const float* token_x, size_t begin,
                           size_t end, Isa isa) {
  const uint32_t nv = cols_ / kRvqVecDim;
  for (size_t g = begin; g < end; ++g) {
    const auto v0 = static_cast<uint32_t>(g) * kBuildGrainVectors;
    const uint32_t v1 = std::min(nv, v0 + kBuildGrainVectors);
    grain_max_[g] = isa == Isa::kAvx512 ? detail::rvq_build_avx512(codebooks, token_x, v0, v1, exact_.data())
                    : isa == Isa::kAvx2 ? detail::rvq_build_avx2(codebooks, token_x, v0, v1, exact_.data())
                                        : detail::rvq_build_scalar(codebooks, token_x, v0, v1, exact_.data());
  }
}

void RvqTable::finish_scale(uint32_t token) {
  float amax = 0.0f;
  for (float m : grain_max_) amax = std::max(amax, m);
  scales_[token] = amax > 0.0f ? amax / static_cast<float>(detail::kRvqCodeMax) : 0.0f;
  inv_ = amax > 0.0f ? static_cast<float>(detail::kRvqCodeMax) / amax : 0.0f;
}

void RvqTable::quantize(uint32_t token, size_t begin, size_t end, Isa isa) {
  const uint32_t nv = cols_ / kRvqVecDim;
  const size_t per_token = codes_per_token();
  const size_t first = begin * kBuildGrainVectors * kRvqStages * kRvqEntries;
  const size_t last =
      std::min<size_t>(nv, end * kBuildGrainVectors) * kRvqStages * kRvqEntries;
  const float* exact = exact_.data() + first;
  int16_t* codes = codes_.data() + size_t{token} * per_token + first;
  uint8_t* planes = has_planes_ ? planes_.data() + (size_t{token} * per_token + first) * 2 : nullptr;
  if (isa == Isa::kAvx512)
    detail::rvq_quantize_avx512(exact, last - first, inv_, codes, planes);
  else if (isa == Isa::kAvx2)
    detail::rvq_quantize_avx2(exact, last - first, inv_, codes, planes);
  else
    detail::rvq_quantize_scalar(exact, last - first, inv_, codes, planes);
}

void RvqTable::build(const RvqCodebooks& codebooks, const float* x, uint32_t cols, uint32_t tokens,
                     const Exec& exec, const RvqMatrixView* then) {
  const RvqTableBuild only{this, &codebooks};
  build_rvq_tables(std::span<const RvqTableBuild>(&only, 1), x, cols, tokens, exec, then);
}

void build_rvq_tables(std::span<const RvqTableBuild> builds, const float* x, uint32_t cols,
                      uint32_t tokens, const Exec& exec, const RvqMatrixView* then) {
  for (const RvqTableBuild& b : builds) b.table->resize(cols, tokens, exec.isa);
  if (builds.empty()) return;
  // A token's scale is the max over its grains, which no split changes, so
  // both ways give the same bits.
  const size_t threads = exec.pool != nullptr ? exec.pool->size() : 1;
  if (threads <= builds.size()) {
    split_over_pool(exec, builds.size(), 1, [&](size_t begin, size_t end) {
      for (size_t i = begin; i < end; ++i) {
        RvqTable& table = *builds[i].table;
        const size_t grains = table.build_grains();
        for (uint32_t t = 0; t < tokens; ++t) {
          for (size_t g = 0; g < grains; ++g) {
            if (t == 0) prefetch_slice(then, i * grains + g, builds.size() * grains);
            table.build_exact(*builds[i].codebooks, x + size_t{t} * cols, g, g + 1, exec.isa);
          }
          table.finish_scale(t);
          table.quantize(t, 0, grains, exec.isa);
        }
      }
    });
    return;
  }
  const size_t grains = builds[0].table->build_grains();
  for (uint32_t t = 0; t < tokens; ++t) {
    const float* xt = x + size_t{t} * cols;
    split_over_pool(exec, builds.size() * grains, 1, [&](size_t begin, size_t end) {
      for (size_t g = begin; g < end; ++g) {
        if (t == 0) prefetch_slice(then, g, builds.size() * grains);
        builds[g / grains].table->build_exact(*builds[g / grains].codebooks, xt, g % grains,
                                              g % grains + 1, exec.isa);
      }
    });
    for (const RvqTableBuild& b : builds) b.table->finish_scale(t);
    split_over_pool(exec, builds.size() * grains, 1, [&](size_t begin, size_t end) {
      for (size_t g = begin; g < end; ++g)
        builds[g / grains].table->quantize(t, g % grains, g % grains + 1, exec.isa);
    });
  }
}

const int16_t* RvqTable::token_codes(uint32_t token) const {
  if (token >= tokens_) fail("rvq table: token {} out of range (table holds {})", token, tokens_);
  return codes_.data() + size_t{token} * codes_per_token();
}

float RvqTable::token_scale(uint32_t token) const {
  if (token >= tokens_) fail("rvq table: token {} out of range (table holds {})", token, tokens_);
  return scales_[token];
}

const uint8_t* RvqTable::token_planes(uint32_t token) const {
  if (token >= tokens_) fail("rvq table: token {} out of range (table holds {})", token, tokens_);
  return has_planes_ ? planes_.data() + size_t{token} * codes_per_token() * 2 : nullptr;
}

void rvq_matvec(const RvqTable& table, uint32_t token, const RvqMatrixView& matrix, float* y,
                const Exec& exec) {
  rvq_matmul(table, std::span<const uint32_t>(&token, 1), matrix, y, exec);
}

void rvq_matmul(const RvqTable& table, std::span<const uint32_t> tokens,
                const RvqMatrixView& matrix, float* y, const Exec& exec) {
  check_matrix(table, matrix);
  if (tokens.empty()) return;
  for (uint32_t t : tokens) table.token_scale(t);  // throws naming a token out of range
  // A table built without planes runs the AVX2 body: same bits, only slower.
  const bool planes = table.token_planes(tokens[0]) != nullptr;
  const uint32_t blocks = matrix.shape.rows_padded() / kRowBlock;
  const size_t grains = (blocks + kRowGrainBlocks - 1) / kRowGrainBlocks;
  const size_t threads = exec.pool != nullptr ? exec.pool->size() : 1;
  const size_t chunk = std::clamp<size_t>((grains + threads - 1) / threads, 1, kMaxChunkGrains);
  split_over_pool(exec, grains, chunk, [&](size_t begin, size_t end) {
    const auto b0 = static_cast<uint32_t>(begin * kRowGrainBlocks);
    const auto b1 = static_cast<uint32_t>(std::min<size_t>(blocks, end * kRowGrainBlocks));
    if (exec.isa == Isa::kAvx512 && planes)
      detail::rvq_rows_avx512(table, tokens, matrix, b0, b1, y);
    else if (exec.isa != Isa::kScalar)
      detail::rvq_rows_avx2(table, tokens, matrix, b0, b1, y);
    else
      detail::rvq_rows_scalar(table, tokens, matrix, b0, b1, y);
  });
}

}  // namespace sluice::kernels
