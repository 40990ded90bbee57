// compute/kernels/quant.cpp: trunk matvec/matmul entry points, their argument
// checks, the scalar bodies, and the split of rows over the pool. Rows are the
// unit of work, so an output never depends on the thread count.
#include "compute/kernels/quant.h"

#include <algorithm>

#include "compute/kernels/quant_kernels.h"
#include "compute/kernels/thread_pool.h"
#include "proto/error.h"
#include "proto/f16.h"

namespace sluice::kernels {

namespace {

constexpr uint32_t kRowGrain = 64;

template <typename Body>
void split_rows(const Exec& exec, uint32_t rows, Body&& body) {
  auto run = [&](size_t begin, size_t end) {
    body(static_cast<uint32_t>(begin), static_cast<uint32_t>(end));
  };
  if (exec.pool != nullptr)
    exec.pool->parallel_for(rows, kRowGrain, run);
  else if (rows > 0)
    run(0, rows);
}

void check(const QuantMatrixView& m) {
  if (m.cols == 0 || m.rows == 0) fail("quant matvec: empty matrix ({} × {})", m.rows, m.cols);
  if (m.data == nullptr || m.scales == nullptr) fail("quant matvec: matrix data or scales missing");
}

float weight(const QuantMatrixView& m, const uint8_t* row, uint32_t k) {
  if (m.format == QuantFormat::kQ8G128) return static_cast<float>(static_cast<int8_t>(row[k]));
  const uint8_t byte = row[k / 2];
  const int nibble = (k % 2 == 0) ? (byte & 0x0f) : (byte >> 4);
  return static_cast<float>(nibble - 8);
}

}  // namespace

namespace detail {

void quant_rows_scalar(const QuantMatrixView& m, const float* x, uint32_t tokens, uint32_t row_begin,
                       uint32_t row_end, float* y) {
  const uint32_t groups = m.groups();
  for (uint32_t t = 0; t < tokens; ++t) {
    const float* xt = x + size_t{t} * m.cols;
    for (uint32_t r = row_begin; r < row_end; ++r) {
      const uint8_t* row = m.data + size_t{r} * m.row_bytes();
      float acc = 0.0f;
      for (uint32_t g = 0; g < groups; ++g) {
        float sum = 0.0f;
        const uint32_t k_end = std::min(m.cols, (g + 1) * kQuantGroup);
        for (uint32_t k = g * kQuantGroup; k < k_end; ++k) sum += weight(m, row, k) * xt[k];
        acc += f16_to_f32(m.scales[size_t{r} * groups + g]) * sum;
      }
      y[size_t{t} * m.rows + r] = acc;
    }
  }
}

void f32_rows_scalar(const float* w, uint32_t cols, const float* x, uint32_t row_begin, uint32_t row_end,
                     float* y) {
  for (uint32_t r = row_begin; r < row_end; ++r) {
    const float* row = w + size_t{r} * cols;
    float acc = 0.0f;
    for (uint32_t k = 0; k < cols; ++k) acc += row[k] * x[k];
    y[r] = acc;
  }
}

}  // namespace detail

void quant_matvec(const QuantMatrixView& m, const float* x, float* y, const Exec& exec) {
  quant_matmul(m, x, 1, y, exec);
}

void quant_matmul(const QuantMatrixView& m, const float* x, uint32_t tokens, float* y,
                  const Exec& exec) {
  check(m);
  if (tokens == 0) return;
  split_rows(exec, m.rows, [&](uint32_t r0, uint32_t r1) {
    if (exec.isa != Isa::kScalar)  // AVX-512 machines run the AVX2 trunk path
      detail::quant_rows_avx2(m, x, tokens, r0, r1, y);
    else
      detail::quant_rows_scalar(m, x, tokens, r0, r1, y);
  });
}

void f32_matvec(const float* w, uint32_t rows, uint32_t cols, const float* x, float* y,
                const Exec& exec) {
  if (rows == 0 || cols == 0) fail("f32 matvec: empty matrix ({} × {})", rows, cols);
  split_rows(exec, rows, [&](uint32_t r0, uint32_t r1) {
    if (exec.isa != Isa::kScalar)  // AVX-512 machines run the AVX2 trunk path
      detail::f32_rows_avx2(w, cols, x, r0, r1, y);
    else
      detail::f32_rows_scalar(w, cols, x, r0, r1, y);
  });
}

}  // namespace sluice::kernels
