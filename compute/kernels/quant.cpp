// compute/kernels/quant.cpp: trunk matvec/matmul entry points, their argument
// checks, activation quantization, the scalar bodies, and the split of rows
// over the pool. Rows are the unit of work, so no output depends on the pool.
#include "compute/kernels/quant.h"

#include <algorithm>
#include <vector>

#include "compute/kernels/quant_kernels.h"
#include "compute/kernels/rounding.h"
#include "compute/kernels/thread_pool.h"
#include "proto/error.h"

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

int32_t stored_integer(const QuantMatrixView& m, const uint8_t* row, uint32_t k) {
  if (m.format == QuantFormat::kQ8G128) return static_cast<int8_t>(row[k]);
  const uint8_t byte = row[k / 2];
  return ((k % 2 == 0) ? (byte & 0x0f) : (byte >> 4)) - 8;
}

// Where column k of a group sits in the group's 128 activations.
uint32_t activation_slot(QuantFormat format, uint32_t k) {
  return format == QuantFormat::kQ8G128 ? k : (k % 2) * (kQuantGroup / 2) + k / 2;
}

// The caller thread's activation scratch: grows to the largest call, then reused.
struct Scratch {
  std::vector<int16_t> xq;
  std::vector<float> step;
  std::vector<int32_t> sums;
};

}  // namespace

namespace detail {

void quantize_activations(const float* x, uint32_t cols, QuantFormat format, int16_t* xq,
                          float* step, int32_t* sums) {
  const uint32_t groups = (cols + kQuantGroup - 1) / kQuantGroup;
  for (uint32_t g = 0; g < groups; ++g) {
    const uint32_t k0 = g * kQuantGroup, k1 = std::min(cols, k0 + kQuantGroup);
    float amax = 0.0f;
    for (uint32_t k = k0; k < k1; ++k) amax = std::max(amax, std::fabs(x[k]));
    step[g] = amax > 0.0f ? amax / static_cast<float>(kActivationMax) : 0.0f;
    const float inv = amax > 0.0f ? static_cast<float>(kActivationMax) / amax : 0.0f;
    int16_t* out = xq + size_t{g} * kQuantGroup;
    std::fill(out, out + kQuantGroup, int16_t{0});
    int32_t sum = 0;
    for (uint32_t k = k0; k < k1; ++k) {
      const auto q = static_cast<int16_t>(round_clamped(x[k] * inv, kActivationMax));
      out[activation_slot(format, k - k0)] = q;
      sum += q;
    }
    sums[g] = sum;
  }
}

void quant_rows_scalar(const QuantMatrixView& m, const QuantActivations& a, uint32_t tokens,
                       uint32_t row_begin, uint32_t row_end, float* y) {
  for (uint32_t t = 0; t < tokens; ++t) {
    const int16_t* xq = a.xq + size_t{t} * a.padded_cols;
    for (uint32_t r = row_begin; r < row_end; ++r) {
      const uint8_t* row = m.data + size_t{r} * m.row_bytes();
      float acc = 0.0f;
      for (uint32_t g = 0; g < a.groups; ++g) {
        int32_t sum = 0;
        for (uint32_t k = g * kQuantGroup; k < (g + 1) * kQuantGroup; ++k)
          sum += stored_integer(m, row, k) *
                 xq[g * kQuantGroup + activation_slot(m.format, k % kQuantGroup)];
        acc = add_group(acc, m.scales[size_t{r} * a.groups + g], a.step[size_t{t} * a.groups + g],
                        sum);
      }
      y[size_t{t} * m.rows + r] = acc;
    }
  }
}

void f32_rows_scalar(const float* w, uint32_t cols, const float* x, uint32_t row_begin,
                     uint32_t row_end, float* y) {
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
  thread_local Scratch scratch;
  const uint32_t padded = m.padded_cols(), groups = m.groups();
  if (scratch.xq.size() < size_t{tokens} * padded) scratch.xq.resize(size_t{tokens} * padded);
  if (scratch.step.size() < size_t{tokens} * groups) {
    scratch.step.resize(size_t{tokens} * groups);
    scratch.sums.resize(size_t{tokens} * groups);
  }
  for (uint32_t t = 0; t < tokens; ++t)
    detail::quantize_activations(
        x + size_t{t} * m.cols, m.cols, m.format, scratch.xq.data() + size_t{t} * padded,
        scratch.step.data() + size_t{t} * groups, scratch.sums.data() + size_t{t} * groups);
  const detail::QuantActivations a{scratch.xq.data(), scratch.step.data(), scratch.sums.data(),
                                   padded, groups};
  split_rows(exec, m.rows, [&](uint32_t r0, uint32_t r1) {
    if (exec.isa == Isa::kAvx512)
      detail::quant_rows_avx512(m, a, tokens, r0, r1, y);
    else if (exec.isa == Isa::kAvx2)
      detail::quant_rows_avx2(m, a, tokens, r0, r1, y);
    else
      detail::quant_rows_scalar(m, a, tokens, r0, r1, y);
  });
}

void f32_matvec(const float* w, uint32_t rows, uint32_t cols, const float* x, float* y,
                const Exec& exec) {
  if (rows == 0 || cols == 0) fail("f32 matvec: empty matrix ({} × {})", rows, cols);
  split_rows(exec, rows, [&](uint32_t r0, uint32_t r1) {
    if (exec.isa != Isa::kScalar)
      detail::f32_rows_avx2(w, cols, x, r0, r1, y);
    else
      detail::f32_rows_scalar(w, cols, x, r0, r1, y);
  });
}

}  // namespace sluice::kernels
