// compute/kernels/rvq.cpp: RVQ table build and matvec entry points, their
// argument checks, the scalar bodies, and the split of rows over the pool.
// Every path sums in the order rvq.h documents; never reorders a row's sum.
#include "compute/kernels/rvq.h"

#include <algorithm>

#include "compute/kernels/rvq_kernels.h"
#include "compute/kernels/thread_pool.h"
#include "proto/error.h"
#include "proto/f16.h"

namespace sluice::kernels {

namespace {

constexpr uint32_t kBuildGrainVectors = 32;
constexpr uint32_t kRowGrainBlocks = 4;

template <typename Body>
void split(const Exec& exec, size_t count, size_t grain, Body&& body) {
  if (exec.pool != nullptr) {
    exec.pool->parallel_for(count, grain, body);
  } else if (count > 0) {
    body(size_t{0}, count);
  }
}

void check_matrix(const RvqTable& table, const RvqMatrixView& m) {
  if (m.shape.cols == 0 || m.shape.cols % kRvqVecDim != 0)
    fail("rvq matvec: matrix cols {} is not a positive multiple of 8", m.shape.cols);
  if (m.shape.cols != table.cols())
    fail("rvq matvec: matrix has {} cols but the table was built for {} inputs", m.shape.cols,
         table.cols());
  if (m.indices == nullptr || m.scales == nullptr) fail("rvq matvec: matrix indices or scales missing");
}

}  // namespace

RvqCodebooks::RvqCodebooks(const float* stage0, const float* stage1, const float* stage2)
    : transposed_(size_t{kRvqStages} * kRvqVecDim * kRvqEntries) {
  const float* stages[kRvqStages] = {stage0, stage1, stage2};
  for (int s = 0; s < kRvqStages; ++s)
    for (int c = 0; c < kRvqEntries; ++c)
      for (int j = 0; j < kRvqVecDim; ++j)
        transposed_[(size_t{static_cast<size_t>(s)} * kRvqVecDim + j) * kRvqEntries + c] =
            stages[s][c * kRvqVecDim + j];
}

namespace detail {

void rvq_build_scalar(const RvqCodebooks& codebooks, const float* x, uint32_t v_begin, uint32_t v_end,
                      float* lut) {
  for (uint32_t v = v_begin; v < v_end; ++v) {
    const float* xv = x + size_t{v} * kRvqVecDim;
    for (int s = 0; s < kRvqStages; ++s) {
      const float* ct = codebooks.transposed(s);
      float* out = lut + (size_t{v} * kRvqStages + s) * kRvqEntries;
      for (int c = 0; c < kRvqEntries; ++c) {
        float acc = xv[0] * ct[c];
        for (int j = 1; j < kRvqVecDim; ++j) acc = acc + xv[j] * ct[j * kRvqEntries + c];
        out[c] = acc;
      }
    }
  }
}

void rvq_rows_scalar(const float* const* luts, size_t n, const RvqMatrixView& m, uint32_t block_begin,
                     uint32_t block_end, float* const* ys) {
  const uint32_t nv = m.shape.vectors_per_row();
  const uint32_t row_end = std::min(m.shape.rows, block_end * kRowBlock);
  for (size_t t = 0; t < n; ++t) {
    for (uint32_t r = block_begin * kRowBlock; r < row_end; ++r) {
      const uint8_t* block = m.indices + size_t{r / kRowBlock} * nv * kRvqStages * kRowBlock + r % kRowBlock;
      float acc = 0.0f;
      for (uint32_t v = 0; v < nv; ++v)
        for (int s = 0; s < kRvqStages; ++s) {
          const size_t vs = size_t{v} * kRvqStages + s;
          acc += luts[t][vs * kRvqEntries + block[vs * kRowBlock]];
        }
      ys[t][r] = f16_to_f32(m.scales[r]) * acc;
    }
  }
}

}  // namespace detail

void RvqTable::build(const RvqCodebooks& codebooks, const float* x, uint32_t cols, uint32_t tokens,
                     const Exec& exec) {
  if (cols == 0 || cols % kRvqVecDim != 0) fail("rvq table: {} inputs is not a positive multiple of 8", cols);
  if (tokens == 0) fail("rvq table: no input vectors");
  cols_ = cols;
  tokens_ = tokens;
  data_.resize(size_t{tokens} * floats_per_token());
  const uint32_t nv = cols / kRvqVecDim;
  const size_t grains_per_token = (nv + kBuildGrainVectors - 1) / kBuildGrainVectors;
  split(exec, grains_per_token * tokens, 1, [&](size_t begin, size_t end) {
    for (size_t g = begin; g < end; ++g) {
      const size_t t = g / grains_per_token;
      const uint32_t v0 = static_cast<uint32_t>(g % grains_per_token) * kBuildGrainVectors;
      const uint32_t v1 = std::min(nv, v0 + kBuildGrainVectors);
      const float* xt = x + t * cols;
      float* lut = data_.data() + t * floats_per_token();
      if (exec.isa != Isa::kScalar)
        detail::rvq_build_avx2(codebooks, xt, v0, v1, lut);
      else
        detail::rvq_build_scalar(codebooks, xt, v0, v1, lut);
    }
  });
}

const float* RvqTable::token_table(uint32_t token) const {
  if (token >= tokens_) fail("rvq table: token {} out of range (table holds {})", token, tokens_);
  return data_.data() + size_t{token} * floats_per_token();
}

void rvq_matvec(const RvqTable& table, uint32_t token, const RvqMatrixView& matrix, float* y,
                const Exec& exec) {
  rvq_matmul(table, std::span<const uint32_t>(&token, 1), matrix, y, exec);
}

void rvq_matmul(const RvqTable& table, std::span<const uint32_t> tokens, const RvqMatrixView& matrix,
                float* y, const Exec& exec) {
  detail::rvq_matmul_planned(table, tokens, matrix, y, exec, detail::default_rvq_rows_plan());
}

void detail::rvq_matmul_planned(const RvqTable& table, std::span<const uint32_t> tokens,
                                const RvqMatrixView& matrix, float* y, const Exec& exec,
                                const RvqRowsPlan& plan) {
  check_matrix(table, matrix);
  if (tokens.empty()) return;
  std::vector<const float*> luts(tokens.size());
  std::vector<float*> ys(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    luts[i] = table.token_table(tokens[i]);
    ys[i] = y + i * matrix.shape.rows;
  }
  const uint32_t blocks = matrix.shape.rows_padded() / kRowBlock;
  const size_t grains = (blocks + kRowGrainBlocks - 1) / kRowGrainBlocks;
  split(exec, grains, 1, [&](size_t begin, size_t end) {
    const auto b0 = static_cast<uint32_t>(begin * kRowGrainBlocks);
    const auto b1 = static_cast<uint32_t>(std::min<size_t>(blocks, end * kRowGrainBlocks));
    if (exec.isa != Isa::kScalar)
      detail::rvq_rows_avx2(luts.data(), luts.size(), matrix, b0, b1, ys.data(), plan);
    else
      detail::rvq_rows_scalar(luts.data(), luts.size(), matrix, b0, b1, ys.data());
  });
}

}  // namespace sluice::kernels
