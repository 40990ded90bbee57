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
// (rvq_decoded.h), under 127 so that the rounded stages still fit a byte.
inline constexpr float kRvqIntegerBound = 125.0f;

// The two stage codebooks of one (layer, matrix kind), prepared once at load.
//
// Arithmetic of everything below (scripts/sluicepy/rvq_tables.py models it
// exactly), with Q = 127 under int8 activations (Exec::trunk, the default) and
// Q = 32767 under f32 ones:
//
//   table   f[v][s][c] = ((x4v·C_s[c][0] + x4v+1·C_s[c][1]) + x4v+2·C_s[c][2]) + x4v+3·C_s[c][3],
//           each product and each sum rounded to f32 (no FMA).
//   groups  the vectors v in runs of kRvqGroupVectors (128 inputs; the last run
//           may be shorter): per token and group g, a_g = max |f| over its
//           vectors, both stages and every entry (NaNs ignored); d_g = a_g / Q
//           and inv_g = Q / a_g (f32 divisions; both 0 when a_g is 0);
//           q[v][s][c] = clamp(round_half_even(f · inv_g), -Q, Q), where a NaN
//           or out-of-int32 product counts as -2^31 before the clamp.
//   rows    L_g[r] = Σ_{v in g} Σ_s q[v][s][code(r, v, s)], exact (any order);
//           acc = 0, then for g ascending acc = fma(d_g, f32(L_g), acc) (one
//           rounding); y[r] = f16_to_f32(rowscale[r]) · acc.
//
// Codes are looked up in registers (pshufb), a byte for 16 entries at a time:
// int8 codes as one byte plane, int16 ones as a low and a high plane, which
// costs about twice the lookups. The integer sums have no order, so the
// scalar and AVX2 paths give bit-identical results for any thread count and
// for batched versus single calls. Against exact f32 arithmetic a lookup is
// off by at most half a step of a_g / Q: with Q = 127 about 1% of an output
// (the weights' own quantization costs 17%), so that, like the trunk's int8
// activations, an input a rounding away from another can move an output by a
// whole step; with Q = 32767 as close to f32 as scripts/reference.py's 1e-4
// agreement needs.
class RvqCodebooks {
 public:
  // Each stage: 64 entries × 4 f32, entry-major, as in codebooks.bin.
  RvqCodebooks(const float* stage0, const float* stage1);
  // Transposed to [stage][dim][entry] so the table build reads 8 entries at once.
  const float* transposed(int stage) const {
    return transposed_.data() + stage * kRvqVecDim * kRvqEntries;
  }
  // As stored, [stage][entry][dim], for decoding weights (rvq_decoded.h).
  const float* entries(int stage) const {
    return entries_.data() + stage * kRvqVecDim * kRvqEntries;
  }
  // The int8 tiles' integer entries q, [stage][entry][dim], and their step σ
  // (rvq_decoded.h): a weight of the int8 tiles is σ · (q0 + q1).
  const int8_t* byte_entries(int stage) const {
    return byte_entries_.data() + stage * kRvqVecDim * kRvqEntries;
  }
  float integer_scale() const { return integer_scale_; }

 private:
  static constexpr size_t kFloats = size_t{kRvqStages} * kRvqVecDim * kRvqEntries;
  alignas(64) std::array<float, kFloats> transposed_;
  alignas(64) std::array<float, kFloats> entries_;
  alignas(64) std::array<int8_t, kFloats> byte_entries_;
  float integer_scale_ = 0.0f;
};

// One stored matrix: its indices (layout rowblock32.vector.split6, exactly
// shape.index_bytes() bytes) and its shape.rows_padded() f16 row scales.
// Padding rows are never computed into outputs.
struct RvqMatrixView {
  RvqMatrixShape shape;
  const uint8_t* indices = nullptr;
  const uint16_t* scales = nullptr;
};

// Vectors per group of table codes sharing one scale: 128 inputs.
inline constexpr uint32_t kRvqGroupVectors = 32;
// The largest magnitude Q of a table code (above), for `planes` byte planes.
inline constexpr int32_t rvq_table_code_max(int planes) {
  return planes == 1 ? 127 : 32767;
}
// Byte planes of table codes under `activations` (above).
inline constexpr int rvq_table_planes(TrunkActivations activations) {
  return activations == TrunkActivations::kInt8 ? 1 : 2;
}
// Bytes of one plane of one vector's codes in a table: 64 entries × 2 stages.
inline constexpr size_t kRvqTablePlaneBytes = size_t{kRvqEntries} * kRvqStages;

// The largest `cols` a table accepts: keeps every integer group sum and every
// index inside 32 bits.
inline constexpr uint32_t kRvqMaxCols = 65536;

struct RvqTableBuild;

// Lookup tables for `tokens` input vectors of `cols` values against one codebook
// set, as int8 or int16 codes (above) with one f32 scale per token and group. The engine
// builds the gate and up tables once per token per layer and shares them among
// that layer's experts; the down table once per expert. Reusing one RvqTable
// object reuses its memory: rebuilding at the same or a smaller size allocates
// nothing.
class RvqTable {
 public:
  // x holds `tokens` rows of `cols` f32 values (row stride `cols`); the
  // codes' precision follows exec.trunk. Same as build_rvq_tables with this
  // table alone; `then` as there.
  void build(const RvqCodebooks& codebooks, const float* x, uint32_t cols, uint32_t tokens,
             const Exec& exec, const RvqMatrixView* then = nullptr);
  uint32_t cols() const { return cols_; }
  uint32_t tokens() const { return tokens_; }
  uint32_t groups() const { return (cols_ / kRvqVecDim + kRvqGroupVectors - 1) / kRvqGroupVectors; }
  int planes() const { return planes_; }
  // Codes of one token, planes() · 128 bytes per vector v, laid out for
  // 16-entry register lookups: byte plane p of q[v][s][c] at
  // (v · planes() + p) · 128 + (c / 16) · 32 + s · 16 + c % 16. One plane holds
  // q itself; two hold q & 255 (unsigned) and q >> 8 (signed): q = 256·high + low.
  const int8_t* token_codes(uint32_t token) const;
  // d_g of one token, groups() of them.
  const float* token_scales(uint32_t token) const;
  size_t codes_per_token() const {
    return size_t{cols_ / kRvqVecDim} * kRvqTablePlaneBytes * static_cast<size_t>(planes_);
  }

 private:
  friend void build_rvq_tables(std::span<const RvqTableBuild> builds, const float* x, uint32_t cols,
                               uint32_t tokens, const Exec& exec, const RvqMatrixView* then);
  void resize(uint32_t cols, uint32_t tokens, int planes);
  // Builds one group of one token: its entries, their max, and codes.
  void build_group(const RvqCodebooks& codebooks, const float* token_x, uint32_t token,
                   size_t group, Isa isa);

  std::vector<int8_t> codes_;
  std::vector<float> scales_;
  uint32_t cols_ = 0;
  uint32_t tokens_ = 0;
  int planes_ = 1;
};

// One table to build and the codebooks it is built against.
struct RvqTableBuild {
  RvqTable* table;
  const RvqCodebooks* codebooks;
};

// Builds every table of `builds` from the same input x (a layer's gate and up
// tables), each with the same bits as its own build(): one parallel region
// over (token, table, group), since a group's codes need nothing outside it.
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
