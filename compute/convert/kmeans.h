// compute/convert/kmeans.h: trains RVQ codebooks: k-means++ seeding, then
// Lloyd iterations, stage after stage on the residuals. Work is cut into
// fixed chunks and reduced in chunk order, so the codebooks depend only on
// the data and the seed, never on the thread count.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "compute/convert/codebook.h"

namespace sluice::convert {

struct KmeansParams {
  uint64_t seed = 1234;
  int iterations = 12;
  int threads = 1;
};

// Trains one 64-entry codebook on `count` vectors of 4 floats. With fewer
// distinct vectors than entries the surplus entries repeat chosen points.
Codebook train_codebook(const float* vectors, size_t count, const KmeansParams& params);

// Trains the 2 stages on `vectors`, which it leaves holding the residuals
// after the last stage. Stage s uses a seed derived from params.seed and s.
std::array<Codebook, kRvqStages> train_rvq(std::vector<float>& vectors, const KmeansParams& params);

// Replaces each vector by its residual after encoding with `codebook`.
void subtract_nearest(const Codebook& codebook, std::vector<float>& vectors, int threads);

// Mixes a seed with the identity of what it seeds (layer, kind, stage...).
uint64_t derive_seed(uint64_t seed, uint64_t a, uint64_t b = 0, uint64_t c = 0);

}  // namespace sluice::convert
