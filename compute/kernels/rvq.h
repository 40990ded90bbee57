// compute/kernels/rvq.h: the RVQ lookup-table matvec over expert records
// (FORMAT.md, "Expert records"). Experts are never dequantized: a table of
// input·codebook dot products is built once, then every row is a sum of lookups.
// Never reads index or scale bytes outside the matrix the view describes.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "compute/kernels/dispatch.h"
#include "proto/record_format.h"

namespace sluice::kernels {

// The int8 tiles' integer entries span ±kRvqIntegerBound per stage sum
// (rvq_decoded.h), under 127 so that three rounded stages still fit a byte.
inline constexpr float kRvqIntegerBound = 125.0f;

// The three stage codebooks of one (layer, matrix kind), prepared once at load.
//
// Arithmetic of everything below (scripts/sluicepy/rvq_int16.py models it
// exactly):
//
//   table   f[v][s][c] = (((x8v·C[c][0] + x8v+1·C[c][1]) + ...) + x8v+7·C[c][7]),
//           each product and each sum rounded to f32 (no FMA), j = 0..7 in order.
//   codes   per input vector (token): a = max |f| over all v, s, c;
//           scale = a / 32767 and inv = 32767 / a (f32 divisions; both 0 when a is
//           0); q[v][s][c] = clamp(round_half_even(f · inv), -32767, 32767), where
//           a NaN or out-of-int32 product counts as -2^31 before the clamp.
//   rows    T[r] = Σ_v Σ_s q[v][s][idx(r, v, s)], exact in int32 (any order);
//           y[r] = f16_to_f32(rowscale[r]) · (scale · f32(T[r])).
//
// The integer sum has no order, so the scalar, AVX2 and AVX-512 paths give
// bit-identical results for any thread count and for batched versus single
// calls. Against exact f32 arithmetic the int16 codes cost a relative error
// of about 2^-15 of the table's largest entry per lookup.
class RvqCodebooks {
 public:
  // Each stage: 256 entries × 8 f32, entry-major, as in codebooks.bin.
  RvqCodebooks(const float* stage0, const float* stage1, const float* stage2);
  // Transposed to [stage][dim][entry] so the table build reads 8 entries at once.
  const float* transposed(int stage) const {
    return transposed_.data() + stage * kRvqVecDim * kRvqEntries;
  }
  // As stored, [stage][entry][dim], for decoding weights (rvq_decoded.h).
  const float* entries(int stage) const {
    return entries_.data() + stage * kRvqVecDim * kRvqEntries;
  }
  // The int8 tiles' integer entries q, [stage][entry][dim], and their step σ
  // (rvq_decoded.h): a weight of the int8 tiles is σ · (q0 + q1 + q2).
  const int8_t* byte_entries(int stage) const {
    return byte_entries_.data() + stage * kRvqVecDim * kRvqEntries;
  }
  float integer_scale() const { return integer_scale_; }

 private:
  // Aligned to cache lines: an entry's 32 bytes then never straddle two lines,
  // which would cost the decode path's lookups a second load each.
  static constexpr size_t kFloats = size_t{kRvqStages} * kRvqVecDim * kRvqEntries;
  alignas(64) std::array<float, kFloats> transposed_;
  alignas(64) std::array<float, kFloats> entries_;
  alignas(64) std::array<int8_t, kFloats> byte_entries_;
  float integer_scale_ = 0.0f;
};

// One stored matrix: its indices (layout rowblock16.vector.stage.row, exactly
// shape.index_bytes() bytes) and its shape.rows_padded() f16 row scales.
// Padding rows are never computed into outputs.
struct RvqMatrixView {
  RvqMatrixShape shape;
  const uint8_t* indices = nullptr;
  const uint16_t* scales = nullptr;
};

// The largest `cols` a table accepts: keeps every integer row sum inside 32 bits.
inline constexpr uint32_t kRvqMaxCols = 65536;

struct RvqTableBuild;

// Lookup tables for `tokens` input vectors of `cols` values against one codebook
// set, as int16 codes (above) with one f32 scale per token. The engine builds
// the gate and up tables once per token per layer and shares them among that
// layer's experts; the down table once per expert. Reusing one RvqTable object
// reuses its memory: rebuilding at the same or a smaller size allocates nothing.
class RvqTable {
 public:
  // x holds `tokens` rows of `cols` f32 values (row stride `cols`). Built with
  // Isa::kAvx512 it also keeps the codes as byte planes for vpermi2b lookups.
  // Same as build_rvq_tables with this table alone; `then` as there.
  void build(const RvqCodebooks& codebooks, const float* x, uint32_t cols, uint32_t tokens,
             const Exec& exec, const RvqMatrixView* then = nullptr);
  uint32_t cols() const { return cols_; }
  uint32_t tokens() const { return tokens_; }
  // Codes q[v][s][c] of one token, (cols/8)·3·256 int16.
  const int16_t* token_codes(uint32_t token) const;
  float token_scale(uint32_t token) const;
  // (q + 32768) split per (v, s) into 256 low bytes then 256 high bytes;
  // nullptr unless built with Isa::kAvx512.
  const uint8_t* token_planes(uint32_t token) const;
  size_t codes_per_token() const { return size_t{cols_ / kRvqVecDim} * kRvqStages * kRvqEntries; }

 private:
  friend void build_rvq_tables(std::span<const RvqTableBuild> builds, const float* x,
                               uint32_t cols, uint32_t tokens, const Exec& exec,
                               const RvqMatrixView* then);
  void resize(uint32_t cols, uint32_t tokens, Isa isa);
  size_t build_grains() const { return grain_max_.size(); }
  // The f32 entries of build grains [begin, end) of one token's input.
  void build_exact(const RvqCodebooks& codebooks, const float* token_x, size_t begin, size_t end,
                   Isa isa);
  // The token's scale from every grain's max, and the factor its codes take.
  void finish_scale(uint32_t token);
  void quantize(uint32_t token, size_t begin, size_t end, Isa isa);

  std::vector<float> exact_;      // one token's f32 table f, kept between the two build passes
  std::vector<float> grain_max_;  // max |f| per build grain of that token
  std::vector<int16_t> codes_;    // + padding: AVX2 gathers read 4 bytes at the last code
  std::vector<uint8_t> planes_;
  std::vector<float> scales_;
  float inv_ = 0.0f;  // the token being built: its codes are round(f · inv_)
  bool has_planes_ = false;
  uint32_t cols_ = 0;
  uint32_t tokens_ = 0;
};

// One table to build and the codebooks it is built against.
struct RvqTableBuild {
  RvqTable* table;
  const RvqCodebooks* codebooks;
};

// Builds every table of `builds` from the same input x (a layer's gate and up
// tables), each with the same bits as its own build(). With no more pool
// threads than tables, each thread builds whole tables: one parallel region
// for all of them and every token. Otherwise each token's grains are split
// over the pool, two regions per token for all tables together.
//
// `then`, when given, is the matrix the caller reads right after: its index
// bytes are requested into L2 grain by grain as the first token's tables
// build, so memory streams while the arithmetic runs instead of idling
// between one matrix and the next. It changes no result.
void build_rvq_tables(std::span<const RvqTableBuild> builds, const float* x, uint32_t cols,
                      uint32_t tokens, const Exec& exec, const RvqMatrixView* then = nullptr);

// y[0..rows) = W · x for the table's token `token`.
void rvq_matvec(const RvqTable& table, uint32_t token, const RvqMatrixView& matrix, float* y,
                const Exec& exec);

// For each i, y[i × rows ..] = W · x of table token tokens[i] (a prefill chunk
// applying one expert to the tokens that chose it). Bit-identical to calling
// rvq_matvec once per token. Allocates nothing.
void rvq_matmul(const RvqTable& table, std::span<const uint32_t> tokens,
                const RvqMatrixView& matrix, float* y, const Exec& exec);

}  // namespace sluice::kernels
