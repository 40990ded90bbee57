// compute/kernels/rvq.cpp: RVQ table build and matvec entry points, their
// argument checks, the scalar bodies, and the split of work over the pool.
// Every path computes exactly what rvq.h documents.
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

constexpr uint32_t kRowGrainBlocks = 2;  // 64 rows a grain
// A chunk of rows one call computes: up to 1024.
constexpr size_t kMaxChunkGrains = 16;

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
  if (m.shape.cols == 0 || m.shape.cols % kRvqColsMultiple != 0)
    fail("rvq matvec: matrix cols {} is not a positive multiple of {}", m.shape.cols,
         kRvqColsMultiple);
  if (m.shape.cols != table.cols())
    fail("rvq matvec: matrix has {} cols but the table was built for {} inputs", m.shape.cols,
         table.cols());
  if (m.indices == nullptr || m.scales == nullptr)
    fail("rvq matvec: matrix indices or scales missing");
}

}  // namespace

RvqCodebooks::RvqCodebooks(const float* stage0, const float* stage1) {
  const float* stages[kRvqStages] = {stage0, stage1};
  for (int s = 0; s < kRvqStages; ++s)
    std::copy(stages[s], stages[s] + kRvqEntries * kRvqVecDim,
              entries_.begin() + s * kRvqEntries * kRvqVecDim);
  for (int s = 0; s < kRvqStages; ++s)
    for (int c = 0; c < kRvqEntries; ++c)
      for (int j = 0; j < kRvqVecDim; ++j)
        transposed_[(size_t{static_cast<size_t>(s)} * kRvqVecDim + j) * kRvqEntries + c] =
            stages[s][c * kRvqVecDim + j];
  // rvq_decoded.h's integer entries: bound = m0 + m1, m_s = max |C_s|.
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

float rvq_build_group_scalar(const RvqCodebooks& codebooks, const float* x, uint32_t v_begin,
                             uint32_t v_end, int planes, int8_t* codes) {
  float exact[kRvqGroupVectors][kRvqStages][kRvqEntries];
  float amax = 0.0f;
  for (uint32_t v = v_begin; v < v_end; ++v) {
    const float* xv = x + size_t{v} * kRvqVecDim;
    for (int s = 0; s < kRvqStages; ++s) {
      const float* ct = codebooks.transposed(s);
      for (int c = 0; c < kRvqEntries; ++c) {
        float acc = xv[0] * ct[c];
        for (int j = 1; j < kRvqVecDim; ++j) acc = acc + xv[j] * ct[j * kRvqEntries + c];
        exact[v - v_begin][s][c] = acc;
        amax = std::max(amax, std::fabs(acc));  // a NaN leaves amax as it was
      }
    }
  }
  const int32_t code_max = rvq_table_code_max(planes);
  const float inv = amax > 0.0f ? static_cast<float>(code_max) / amax : 0.0f;
  for (uint32_t v = v_begin; v < v_end; ++v)
    for (int s = 0; s < kRvqStages; ++s)
      for (int c = 0; c < kRvqEntries; ++c) {
        const int32_t q = round_clamped(exact[v - v_begin][s][c] * inv, code_max);
        int8_t* at = codes + table_code_offset(planes, v, s, c);
        if (planes == 1) {
          at[0] = static_cast<int8_t>(q);
        } else {
          at[0] = static_cast<int8_t>(static_cast<uint8_t>(q & 255));
          at[kRvqTablePlaneBytes] = static_cast<int8_t>(q >> 8);
        }
      }
  return amax > 0.0f ? amax / static_cast<float>(code_max) : 0.0f;
}

void rvq_rows_scalar(const RvqTable& table, std::span<const uint32_t> tokens,
                     const RvqMatrixView& m, uint32_t block_begin, uint32_t block_end, float* y) {
  const uint32_t nv = m.shape.vectors_per_row();
  const int planes = table.planes();
  for (size_t t = 0; t < tokens.size(); ++t) {
    const int8_t* codes = table.token_codes(tokens[t]);
    const float* scales = table.token_scales(tokens[t]);
    const uint32_t row_end = std::min(m.shape.rows, block_end * kRowBlock);
    for (uint32_t r = block_begin * kRowBlock; r < row_end; ++r) {
      float acc = 0.0f;
      for (uint32_t v0 = 0; v0 < nv; v0 += kRvqGroupVectors) {
        int32_t sum = 0;
        for (uint32_t v = v0; v < std::min(nv, v0 + kRvqGroupVectors); ++v)
          for (int s = 0; s < kRvqStages; ++s) {
            const int c = m.shape.code(m.indices, r, v, s);
            const int8_t* at = codes + table_code_offset(planes, v, s, c);
            sum +=
                planes == 1 ? at[0] : 256 * at[kRvqTablePlaneBytes] + static_cast<uint8_t>(at[0]);
          }
        acc = std::fma(scales[v0 / kRvqGroupVectors], static_cast<float>(sum), acc);
      }
      y[t * m.shape.rows + r] = f16_to_f32(m.scales[r]) * acc;
    }
  }
}

}  // namespace detail

void RvqTable::resize(uint32_t cols, uint32_t tokens, int planes) {
  if (cols == 0 || cols % kRvqColsMultiple != 0)
    fail("rvq table: {} inputs is not a positive multiple of {}", cols, kRvqColsMultiple);
  if (cols > kRvqMaxCols)
    fail("rvq table: {} inputs exceeds the kernel's limit of {}", cols, kRvqMaxCols);
  if (tokens == 0) fail("rvq table: no input vectors");
  cols_ = cols;
  tokens_ = tokens;
  planes_ = planes;
  // Capacity never shrinks: a rebuild at the same or a smaller size allocates nothing.
  resize_discarding(codes_, tokens * codes_per_token());
  resize_discarding(scales_, size_t{tokens} * groups());
}

void RvqTable::build_group(const RvqCodebooks& codebooks, const float* token_x, uint32_t token,
                           size_t group, Isa isa) {
  const auto v0 = static_cast<uint32_t>(group) * kRvqGroupVectors;
  const uint32_t v1 = std::min(cols_ / kRvqVecDim, v0 + kRvqGroupVectors);
  int8_t* codes = codes_.data() + size_t{token} * codes_per_token();
  scales_[size_t{token} * groups() + group] =
      isa == Isa::kScalar
          ? detail::rvq_build_group_scalar(codebooks, token_x, v0, v1, planes_, codes)
          : detail::rvq_build_group_avx2(codebooks, token_x, v0, v1, planes_, codes);
}

void RvqTable::build(const RvqCodebooks& codebooks, const float* x, uint32_t cols, uint32_t tokens,
                     const Exec& exec, const RvqMatrixView* then) {
  const RvqTableBuild only{this, &codebooks};
  build_rvq_tables(std::span<const RvqTableBuild>(&only, 1), x, cols, tokens, exec, then);
}

void build_rvq_tables(std::span<const RvqTableBuild> builds, const float* x, uint32_t cols,
                      uint32_t tokens, const Exec& exec, const RvqMatrixView* then) {
  for (const RvqTableBuild& b : builds) b.table->resize(cols, tokens, rvq_table_planes(exec.trunk));
  if (builds.empty()) return;
  // Grains in (token, table, group) order, so the first token's grains come
  // first and request `then` while the rest build.
  const size_t groups = builds[0].table->groups(), per_token = builds.size() * groups;
  split_over_pool(exec, size_t{tokens} * per_token, 1, [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) {
      const auto t = static_cast<uint32_t>(i / per_token);
      const size_t b = i % per_token / groups, g = i % groups;
      if (t == 0) prefetch_slice(then, i, per_token);
      builds[b].table->build_group(*builds[b].codebooks, x + size_t{t} * cols, t, g, exec.isa);
    }
  });
}

const int8_t* RvqTable::token_codes(uint32_t token) const {
  if (token >= tokens_) fail("rvq table: token {} out of range (table holds {})", token, tokens_);
  return codes_.data() + size_t{token} * codes_per_token();
}

const float* RvqTable::token_scales(uint32_t token) const {
  if (token >= tokens_) fail("rvq table: token {} out of range (table holds {})", token, tokens_);
  return scales_.data() + size_t{token} * groups();
}

void rvq_matvec(const RvqTable& table, uint32_t token, const RvqMatrixView& matrix, float* y,
                const Exec& exec) {
  rvq_matmul(table, std::span<const uint32_t>(&token, 1), matrix, y, exec);
}

void rvq_matmul(const RvqTable& table, std::span<const uint32_t> tokens,
                const RvqMatrixView& matrix, float* y, const Exec& exec) {
  check_matrix(table, matrix);
  if (tokens.empty()) return;
  for (uint32_t t : tokens) table.token_scales(t);  // throws naming a token out of range
  const uint32_t blocks = matrix.shape.rows_padded() / kRowBlock;
  const size_t grains = (blocks + kRowGrainBlocks - 1) / kRowGrainBlocks;
  const size_t threads = exec.pool != nullptr ? exec.pool->size() : 1;
  const size_t chunk = std::clamp<size_t>((grains + threads - 1) / threads, 1, kMaxChunkGrains);
  split_over_pool(exec, grains, chunk, [&](size_t begin, size_t end) {
    const auto b0 = static_cast<uint32_t>(begin * kRowGrainBlocks);
    const auto b1 = static_cast<uint32_t>(std::min<size_t>(blocks, end * kRowGrainBlocks));
    // AVX-512 machines run the AVX2 body.
    if (exec.isa != Isa::kScalar)
      detail::rvq_rows_avx2(table, tokens, matrix, b0, b1, y);
    else
      detail::rvq_rows_scalar(table, tokens, matrix, b0, b1, y);
  });
}

}  // namespace sluice::kernels
