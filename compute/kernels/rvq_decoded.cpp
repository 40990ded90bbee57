// compute/kernels/rvq_decoded.cpp: the decode-once prefill path: argument
// checks, the scalar bodies, tiling and the split of row tiles over the pool.
// Every path computes exactly what rvq_decoded.h documents.
#include "compute/kernels/rvq_decoded.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "compute/kernels/rvq_kernels.h"
#include "compute/kernels/thread_pool.h"
#include "proto/error.h"

namespace sluice::kernels {

namespace {

constexpr size_t kTileBytes = size_t{256} << 10;  // a decoded tile stays in L2
constexpr size_t kInt8TileBytes = size_t{128} << 10;  // with room for the inputs' bytes
// The matrix's rows in tiles of whole row blocks (32 to kTileMaxRows rows) of
// about `budget` bytes, shared out over the pool: body(tile, r0, r1) for each,
// the tile of the running thread, `row_elements` Elements a row, which grows
// once and is then reused.
template <typename Element, typename Body>
void for_each_tile(const RvqMatrixView& matrix, size_t budget, uint32_t row_elements,
                   const Exec& exec, Body&& body) {
  const size_t fit = budget / (size_t{row_elements} * sizeof(Element));
  const auto per_tile = static_cast<uint32_t>(
      std::clamp<size_t>(fit / kRowBlock * kRowBlock, kRowBlock, detail::kTileMaxRows));
  const size_t tiles = (matrix.shape.rows + per_tile - 1) / per_tile;
  split_over_pool(exec, tiles, 1, [&](size_t begin, size_t end) {
    thread_local std::vector<Element> tile;
    if (tile.size() < size_t{per_tile} * row_elements) tile.resize(size_t{per_tile} * row_elements);
    for (size_t i = begin; i < end; ++i) {
      const auto r0 = static_cast<uint32_t>(i * per_tile);
      body(tile.data(), r0, std::min(matrix.shape.rows, r0 + per_tile));
    }
  });
}

}  // namespace

namespace detail {

void rvq_decode_rows_scalar(const RvqCodebooks& codebooks, const RvqMatrixView& m,
                            uint32_t row_begin, uint32_t row_end, float* tile) {
  const uint32_t nv = m.shape.vectors_per_row();
  for (uint32_t r = row_begin; r < row_end; ++r)
    for (uint32_t v = 0; v < nv; ++v) {
      const float* c0 = codebooks.entries(0) + m.shape.code(m.indices, r, v, 0) * kRvqVecDim;
      const float* c1 = codebooks.entries(1) + m.shape.code(m.indices, r, v, 1) * kRvqVecDim;
      float* out = tile + size_t{r - row_begin} * m.shape.cols + size_t{v} * kRvqVecDim;
      for (int j = 0; j < kRvqVecDim; ++j) out[j] = c0[j] + c1[j];
    }
}

void rvq_tile_matmul_scalar(const float* tile, const RvqMatrixView& m, uint32_t row_begin,
                            uint32_t row_end, const float* x, uint32_t tokens, float* y) {
  const uint32_t cols = m.shape.cols;
  for (uint32_t t = 0; t < tokens; ++t)
    for (uint32_t r = row_begin; r < row_end; ++r) {
      const float* w = tile + size_t{r - row_begin} * cols;
      const float* xt = x + size_t{t} * cols;
      float lanes[16] = {};
      for (uint32_t k = 0; k < cols; ++k) lanes[k % 16] = std::fma(w[k], xt[k], lanes[k % 16]);
      y[size_t{t} * m.shape.rows + r] = f16_to_f32(m.scales[r]) * fold16(lanes);
    }
}

void rvq_decode_rows_int8_scalar(const RvqCodebooks& codebooks, const RvqMatrixView& m,
                                 uint32_t row_begin, uint32_t row_end, int8_t* tile) {
  const uint32_t nv = m.shape.vectors_per_row(), stride = int8_tile_stride(m.shape.cols);
  for (uint32_t r = row_begin; r < row_end; ++r) {
    int8_t* out = tile + size_t{r - row_begin} * stride;
    for (uint32_t v = 0; v < nv; ++v) {
      const int8_t* c0 = codebooks.byte_entries(0) + m.shape.code(m.indices, r, v, 0) * kRvqVecDim;
      const int8_t* c1 = codebooks.byte_entries(1) + m.shape.code(m.indices, r, v, 1) * kRvqVecDim;
      for (int j = 0; j < kRvqVecDim; ++j)
        out[v * kRvqVecDim + j] = static_cast<int8_t>(c0[j] + c1[j]);
    }
    std::fill(out + m.shape.cols, out + stride, int8_t{0});
  }
}

void rvq_int8_tile_matmul_scalar(const int8_t* tile, float sigma, const RvqMatrixView& m,
                                 uint32_t row_begin, uint32_t row_end, const Int8Activations& x,
                                 float* y) {
  const uint32_t cols = m.shape.cols, stride = int8_tile_stride(cols);
  for (uint32_t t = 0; t < x.tokens; ++t)
    for (uint32_t r = row_begin; r < row_end; ++r) {
      const int8_t* w = tile + size_t{r - row_begin} * stride;
      const int8_t* xq = x.values.data() + size_t{t} * x.stride;
      float acc = 0.0f;
      for (uint32_t g = 0; g * kQuantGroup < cols; ++g) {
        int32_t sum = 0;
        for (uint32_t k = g * kQuantGroup; k < std::min(cols, (g + 1) * kQuantGroup); ++k)
          sum += int32_t{w[k]} * int32_t{xq[k]};
        acc = acc + x.group_scale(t, g) * static_cast<float>(sum);
      }
      y[size_t{t} * m.shape.rows + r] = f16_to_f32(m.scales[r]) * (sigma * acc);
    }
}

}  // namespace detail

namespace {

// The tile path with int8 activations (rvq_decoded.h).
void int8_tiles(const RvqCodebooks& codebooks, const RvqMatrixView& matrix, const float* x,
                uint32_t tokens, float* y, const Exec& exec) {
  // The calling thread's, which the pool's threads read while this call
  // waits: through a reference, since a thread_local their lambdas named would
  // be their own.
  thread_local detail::Int8Activations calling_thread_inputs;
  const detail::Int8Activations& inputs = calling_thread_inputs;
  calling_thread_inputs.prepare(QuantFormat::kQ8G128, tokens, matrix.shape.cols);
  detail::quantize_activations(x, calling_thread_inputs, exec.isa);
  const float sigma = codebooks.integer_scale();
  for_each_tile<int8_t>(
      matrix, kInt8TileBytes, detail::int8_tile_stride(matrix.shape.cols), exec,
      [&](int8_t* tile, uint32_t r0, uint32_t r1) {
        if (exec.isa == Isa::kScalar) {
          detail::rvq_decode_rows_int8_scalar(codebooks, matrix, r0, r1, tile);
          detail::rvq_int8_tile_matmul_scalar(tile, sigma, matrix, r0, r1, inputs, y);
        } else {  // AVX-512 machines run the AVX2 body
          detail::rvq_decode_rows_int8_avx2(codebooks, matrix, r0, r1, tile);
          detail::rvq_int8_tile_matmul_avx2(tile, sigma, matrix, r0, r1, inputs, y);
        }
      });
}

}  // namespace

void rvq_matmul_decoded(const RvqCodebooks& codebooks, const RvqMatrixView& matrix, const float* x,
                        uint32_t tokens, float* y, const Exec& exec) {
  if (matrix.shape.cols == 0 || matrix.shape.cols % kRvqColsMultiple != 0)
    fail("rvq decoded matmul: matrix cols {} is not a positive multiple of {}", matrix.shape.cols,
         kRvqColsMultiple);
  if (matrix.indices == nullptr || matrix.scales == nullptr)
    fail("rvq decoded matmul: matrix indices or scales missing");
  if (tokens == 0 || matrix.shape.rows == 0) return;
  if (exec.trunk == TrunkActivations::kInt8 && tokens >= kRvqInt8TilesFrom)
    return int8_tiles(codebooks, matrix, x, tokens, y, exec);
  for_each_tile<float>(
      matrix, kTileBytes, matrix.shape.cols, exec, [&](float* tile, uint32_t r0, uint32_t r1) {
        if (exec.isa == Isa::kScalar) {
          detail::rvq_decode_rows_scalar(codebooks, matrix, r0, r1, tile);
          detail::rvq_tile_matmul_scalar(tile, matrix, r0, r1, x, tokens, y);
          return;
        }
        const bool avx512 = exec.isa == Isa::kAvx512;
        detail::rvq_decode_rows_avx2(
            codebooks, matrix, r0, r1,
            avx512 ? detail::kTilePanelRowsAvx512 : detail::kTilePanelRowsAvx2, tile);
        if (avx512)
          detail::rvq_tile_matmul_avx512(tile, matrix, r0, r1, x, tokens, y);
        else
          detail::rvq_tile_matmul_avx2(tile, matrix, r0, r1, x, tokens, y);
      });
}

}  // namespace sluice::kernels
