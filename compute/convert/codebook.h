// compute/convert/codebook.h: one RVQ codebook (64 entries × 4 f32) and the
// nearest-entry search that both k-means and the expert encoder use. The
// scalar, AVX2 and AVX-512 searches return identical codes for identical
// input; the choice between them is made once at run time and never changes results.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "compute/kernels/dispatch.h"
#include "proto/record_format.h"

namespace sluice::convert {

class Codebook {
 public:
  Codebook() {
    entries_.fill(0.0f);
    minus_two_t_.fill(0.0f);
    norms_.fill(0.0f);
  }
  // `entries` holds 64 × 4 floats, entry-major (the on-disk order).
  explicit Codebook(const float* entries) { assign(entries); }
  void assign(const float* entries);

  const float* entry(int code) const { return entries_.data() + code * kRvqVecDim; }
  const float* entries() const { return entries_.data(); }
  // Search tables: −2·C transposed to [dim][entry] and ‖C[c]‖² per entry.
  const float* minus_two_transposed() const { return minus_two_t_.data(); }
  const float* norms() const { return norms_.data(); }

 private:
  std::array<float, kRvqEntries * kRvqVecDim> entries_;
  alignas(64) std::array<float, kRvqEntries * kRvqVecDim> minus_two_t_;
  alignas(64) std::array<float, kRvqEntries> norms_;
};

// argmin over codes c of ‖v − C[c]‖², evaluated as ‖C[c]‖² − 2 v·C[c] (the
// ‖v‖² term is common to all codes): one fma per dimension, in dimension
// order, starting from ‖C[c]‖². Ties (and all-NaN distances) give the
// lowest code. This is the model every instruction set reproduces.
int nearest_code_scalar(const Codebook& codebook, const float* v);

// codes[i] = nearest_code_scalar(codebook, vectors + 4 i) for i < count, the
// vectors contiguous. `isa` changes the speed only; it must be one this
// machine runs (kernels::isa_supported).
void nearest_codes(const Codebook& codebook, const float* vectors, size_t count, uint8_t* codes,
                   kernels::Isa isa);
// The converter's instruction set: kernels::isa_from_environment() (CPUID,
// or SLUICE_KERNELS), asked once.
kernels::Isa search_isa();

// Deterministic 64-bit generator (SplitMix64): the same seed gives the same
// stream on every platform, unlike the std distributions.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1p-53; }  // [0, 1)
  uint64_t below(uint64_t n) {
    return static_cast<uint64_t>((static_cast<unsigned __int128>(next()) * n) >> 64);
  }

 private:
  uint64_t state_;
};

}  // namespace sluice::convert
