// compute/kernels/quant.cpp: trunk matvec/matmul entry points, their argument
// checks, the scalar bodies, the activations' quantization, and the split of
// rows over the pool. Rows are the unit of work, so an output never depends on
// the thread count.
#include "compute/kernels/quant.h"

#include <algorithm>
#include <cmath>

#include "compute/kernels/quant_kernels.h"
#include "compute/kernels/rounding.h"
#include "compute/kernels/thread_pool.h"
#include "proto/error.h"
#include "proto/f16.h"

namespace sluice::kernels {

namespace {

// Rows are split into a few long runs per thread, whole multiples of 64 rows
// (the kernels' tiles divide it): each run is one sequential stream for the
// prefetchers, and its first tile is the only one that starts on cold lines.
// Four per thread still even out a thread that falls behind. Each row's
// result is its own, so where the runs end changes nothing.
constexpr uint32_t kRowGrain = 64;
constexpr size_t kRunsPerThread = 4;

template <typename Body>
void split_rows(const Exec& exec, uint32_t rows, Body&& body) {
  auto run = [&](size_t begin, size_t end) {
    body(static_cast<uint32_t>(begin), static_cast<uint32_t>(end));
  };
  const size_t runs = kRunsPerThread * (exec.pool != nullptr ? exec.pool->size() : 1);
  const size_t grain = (rows + runs * kRowGrain - 1) / (runs * kRowGrain) * kRowGrain;
  split_over_pool(exec, rows, grain, run);
}

void check(const QuantMatrixView& m) {
  if (m.cols == 0 || m.rows == 0) fail("quant matvec: empty matrix ({} × {})", m.rows, m.cols);
  if (m.data == nullptr || m.scales == nullptr) fail("quant matvec: matrix data or scales missing");
}

float weight(const QuantMatrixView& m, const uint8_t* row, uint32_t k) {
  return static_cast<float>(trunk_integer(stored_format(m.format), row, k));
}

}  // namespace

void quant_dequantize_row(const QuantMatrixView& m, uint32_t row, float* out) {
  const uint8_t* q = m.data + size_t{row} * m.row_bytes();
  const uint16_t* scales = m.scales + size_t{row} * m.groups();
  for (uint32_t g = 0; g < m.groups(); ++g) {
    const float scale = f16_to_f32(scales[g]);
    const uint32_t begin = g * kQuantGroup, end = std::min(m.cols, begin + kQuantGroup);
    switch (m.format) {
      case QuantFormat::kQ8G128:
        for (uint32_t k = begin; k < end; ++k)
          out[k] = static_cast<float>(static_cast<int8_t>(q[k])) * scale;
        break;
      case QuantFormat::kQ4G128:
        for (uint32_t k = begin; k < end; ++k)
          out[k] = static_cast<float>(((q[k / 2] >> (k % 2 * 4)) & 0x0f) - 8) * scale;
        break;
      case QuantFormat::kQ6G128:
        // Eight columns at a time; the row is stored to whole groups, past cols.
        for (uint32_t k = begin; k < end; k += 8) {
          const uint64_t bytes = detail::q6_columns8(q, k);
          for (uint32_t i = 0; i < 8 && k + i < end; ++i)
            out[k + i] = static_cast<float>(static_cast<int8_t>(bytes >> (8 * i))) * scale;
        }
        break;
    }
  }
}

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

void Int8Activations::prepare(QuantFormat format, uint32_t tokens_, uint32_t cols_) {
  order = format;
  tokens = tokens_;
  cols = cols_;
  stride = (cols_ + kQuantGroup - 1) / kQuantGroup * kQuantGroup;
  const size_t values_needed = size_t{tokens} * stride, scales_needed = size_t{tokens} * groups();
  if (values.size() < values_needed) values.resize(values_needed);
  if (scales.size() < scales_needed) scales.resize(scales_needed);
}

void quantize_activations_scalar(const float* x, Int8Activations& out) {
  const uint32_t groups = out.groups();
  for (uint32_t t = 0; t < out.tokens; ++t) {
    const float* row = x + size_t{t} * out.cols;
    for (uint32_t g = 0; g < groups; ++g) {
      const uint32_t begin = g * kQuantGroup;
      const uint32_t end = std::min(out.cols, begin + kQuantGroup);
      float amax = 0.0f;
      for (uint32_t k = begin; k < end; ++k) amax = std::max(amax, std::fabs(row[k]));
      out.scales[size_t{t} * groups + g] = amax / 127.0f;
      const float inverse = amax > 0.0f ? 127.0f / amax : 0.0f;
      for (uint32_t b = begin; b < begin + kQuantGroup; b += kInt8Block) {
        int8_t* q = out.values.data() + size_t{t} * out.stride + b;
        for (uint32_t p = 0; p < kInt8Block; ++p) {
          const uint32_t column = b + int8_column_at(out.order, p);
          q[p] = column < end ? static_cast<int8_t>(round_clamped(row[column] * inverse, 127)) : 0;
        }
      }
    }
  }
}

void quantize_activations(const float* x, Int8Activations& out, Isa isa) {
  if (isa == Isa::kScalar)
    quantize_activations_scalar(x, out);
  else
    quantize_activations_avx2(x, out);
}

void int8_rows_scalar(const QuantMatrixView& m, const Int8Activations& x, uint32_t row_begin, uint32_t row_end,
                      float* y) {
  const uint32_t groups = m.groups(), used = x.used_blocks();
  for (uint32_t t = 0; t < x.tokens; ++t) {
    for (uint32_t r = row_begin; r < row_end; ++r) {
      const uint8_t* row = m.data + size_t{r} * m.row_bytes();
      float acc[8] = {};
      for (uint32_t g = 0; g < groups; ++g) {
        int32_t lanes[8] = {};
        const uint32_t b_end = std::min(used, (g + 1) * kQuantGroup / kInt8Block);
        for (uint32_t b = g * kQuantGroup / kInt8Block; b < b_end; ++b) {
          const int8_t* xb = x.block_values(t, b);
          for (uint32_t p = 0; p < kInt8Block; ++p) {
            const uint32_t column = b * kInt8Block + int8_column_at(x.order, p);
            lanes[p / 4] += static_cast<int32_t>(weight(m, row, column)) * xb[p];
          }
        }
        const float d = x.group_scale(t, g), scale = f16_to_f32(m.scales[size_t{r} * groups + g]);
        for (int l = 0; l < 8; ++l) acc[l] = std::fma(scale, d * static_cast<float>(lanes[l]), acc[l]);
      }
      y[size_t{t} * m.rows + r] = ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
    }
  }
}

void transposed_rows_scalar(const QuantMatrixView& m, uint32_t first_row, uint32_t count, const float* c,
                            size_t c_stride, uint32_t tokens, float* out, size_t out_stride, uint32_t col_begin,
                            uint32_t col_end) {
  const uint32_t groups = m.groups();
  for (uint32_t t = 0; t < tokens; ++t) {
    float* o = out + t * out_stride;
    for (uint32_t i = 0; i < count; ++i) {
      const uint32_t r = first_row + i;
      const uint8_t* row = m.data + size_t{r} * m.row_bytes();
      for (uint32_t k = col_begin; k < col_end; ++k) {
        const float coefficient = c[t * c_stride + i] * f16_to_f32(m.scales[size_t{r} * groups + k / kQuantGroup]);
        o[k] = std::fma(coefficient, weight(m, row, k), o[k]);
      }
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
  if (exec.trunk == TrunkActivations::kInt8) {
    // Quantized once on the calling thread; the workers read this thread's
    // buffer through the reference (naming a thread_local in the lambda would
    // give each worker its own, empty one).
    thread_local detail::Int8Activations buffer;
    detail::Int8Activations& activations = buffer;
    activations.prepare(m.format, tokens, m.cols);
    detail::quantize_activations(x, activations, exec.isa);
    const bool vnni = exec.isa == Isa::kAvx512 && avx512_has_vnni();
    split_rows(exec, m.rows, [&](uint32_t r0, uint32_t r1) {
      if (vnni)
        detail::int8_rows_avx512_vnni(m, activations, r0, r1, y);
      else if (exec.isa != Isa::kScalar)
        detail::int8_rows_avx2(m, activations, r0, r1, y);
      else
        detail::int8_rows_scalar(m, activations, r0, r1, y);
    });
    return;
  }
  split_rows(exec, m.rows, [&](uint32_t r0, uint32_t r1) {
    if (exec.isa == Isa::kAvx512)
      detail::quant_rows_avx512(m, x, tokens, r0, r1, y);
    else if (exec.isa == Isa::kAvx2)
      detail::quant_rows_avx2(m, x, tokens, r0, r1, y);
    else
      detail::quant_rows_scalar(m, x, tokens, r0, r1, y);
  });
}

void quant_transposed_matmul(const QuantMatrixView& m, uint32_t first_row, uint32_t count, const float* c,
                             size_t c_stride, uint32_t tokens, float* out, size_t out_stride, Isa isa) {
  check(m);
  if (first_row > m.rows || count > m.rows - first_row)
    fail("quant transposed matmul: rows [{}, {}) of a {}-row matrix", first_row, size_t{first_row} + count, m.rows);
  if (isa == Isa::kScalar) {
    detail::transposed_rows_scalar(m, first_row, count, c, c_stride, tokens, out, out_stride, 0, m.cols);
    return;
  }
  detail::transposed_rows_avx2(m, first_row, count, c, c_stride, tokens, out, out_stride);
  const uint32_t vector_end = m.cols / 32 * 32;  // the AVX2 body's whole blocks
  detail::transposed_rows_scalar(m, first_row, count, c, c_stride, tokens, out, out_stride, vector_end, m.cols);
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
