// compute/convert/kmeans.cpp: k-means++ and Lloyd for 4-dimensional vectors.
// Sums are kept per fixed chunk of kChunk vectors in double and added in
// chunk order: the reduction order, not the thread schedule, fixes the bits.
#include "compute/convert/kmeans.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "compute/convert/parallel.h"

namespace sluice::convert {
namespace {

constexpr size_t kChunk = 1024;
constexpr size_t kDim = kRvqVecDim;

float distance(const float* a, const float* b) {
  float acc = 0.0f;
  for (size_t j = 0; j < kDim; ++j) {
    const float d = a[j] - b[j];
    acc = std::fma(d, d, acc);
  }
  return acc;
}

// The same arithmetic with the fma inlined: without -mfma std::fma is a libm
// call, which was a third of k-means++ seeding.
__attribute__((target("fma"))) float distance_fma(const float* a, const float* b) {
  float acc = 0.0f;
  for (size_t j = 0; j < kDim; ++j) {
    const float d = a[j] - b[j];
    acc = __builtin_fmaf(d, d, acc);
  }
  return acc;
}

// d2[i] = min(d2[i], ‖x_i − centre‖²) over [begin, end); returns Σ d2 in order.
template <float (*Distance)(const float*, const float*)>
double lower_distances(const float* x, size_t begin, size_t end, const float* centre, float* d2) {
  double sum = 0.0;
  for (size_t i = begin; i < end; ++i) {
    d2[i] = std::min(d2[i], Distance(x + i * kDim, centre));
    sum += d2[i];
  }
  return sum;
}

size_t chunk_count(size_t count) {
  return (count + kChunk - 1) / kChunk;
}

// k-means++: each next centre is a point drawn with probability ∝ its
// squared distance to the nearest centre chosen so far.
std::vector<float> seed_centres(const float* x, size_t count, SplitMix64& rng, int threads) {
  std::vector<float> centres(kRvqEntries * kDim);
  std::vector<float> d2(count, std::numeric_limits<float>::infinity());
  const size_t chunks = chunk_count(count);
  std::vector<double> chunk_sum(chunks);
  const bool fma_inline = search_isa() != kernels::Isa::kScalar;  // AVX2 implies FMA
  size_t pick = rng.below(count);
  for (int k = 0; k < kRvqEntries; ++k) {
    std::copy(x + pick * kDim, x + (pick + 1) * kDim, centres.begin() + k * kDim);
    if (k + 1 == kRvqEntries) break;
    const float* centre = centres.data() + k * kDim;
    parallel_for(chunks, threads, [&](size_t chunk) {
      const size_t begin = chunk * kChunk, end = std::min(count, (chunk + 1) * kChunk);
      chunk_sum[chunk] = fma_inline
                             ? lower_distances<distance_fma>(x, begin, end, centre, d2.data())
                             : lower_distances<distance>(x, begin, end, centre, d2.data());
    });
    double total = 0.0;
    for (double s : chunk_sum) total += s;
    if (!(total > 0.0)) {
      pick = rng.below(count);  // every point coincides with a centre already
      continue;
    }
    double target = rng.uniform() * total;
    size_t chunk = 0;
    while (chunk + 1 < chunks && target >= chunk_sum[chunk]) target -= chunk_sum[chunk++];
    pick = std::min(count, (chunk + 1) * kChunk) - 1;
    for (size_t i = chunk * kChunk; i < std::min(count, (chunk + 1) * kChunk); ++i) {
      if (d2[i] > 0.0f && target < d2[i]) {
        pick = i;
        break;
      }
      target -= d2[i];
    }
  }
  return centres;
}

}  // namespace

uint64_t derive_seed(uint64_t seed, uint64_t a, uint64_t b, uint64_t c) {
  SplitMix64 mix(seed);
  uint64_t out = mix.next();
  for (uint64_t part : {a, b, c}) {
    SplitMix64 step(out ^ (part * 0xd1342543de82ef95ull + 1));
    out = step.next();
  }
  return out;
}

Codebook train_codebook(const float* x, size_t count, const KmeansParams& params) {
  if (count == 0) return Codebook{};
  SplitMix64 rng(params.seed);
  std::vector<float> centres = seed_centres(x, count, rng, params.threads);
  Codebook codebook(centres.data());
  const size_t chunks = chunk_count(count);
  std::vector<uint8_t> assignment(count, 0);
  std::vector<double> sums(chunks * kRvqEntries * kDim);
  std::vector<uint32_t> counts(chunks * kRvqEntries);
  std::vector<uint8_t> changed(chunks);
  const kernels::Isa isa = search_isa();
  for (int iteration = 0; iteration < params.iterations; ++iteration) {
    parallel_for(chunks, params.threads, [&](size_t chunk) {
      double* sum = sums.data() + chunk * kRvqEntries * kDim;
      uint32_t* n = counts.data() + chunk * kRvqEntries;
      std::fill(sum, sum + kRvqEntries * kDim, 0.0);
      std::fill(n, n + kRvqEntries, 0u);
      bool any = false;
      const size_t begin = chunk * kChunk, end = std::min(count, (chunk + 1) * kChunk);
      uint8_t codes[kChunk];
      nearest_codes(codebook, x + begin * kDim, end - begin, codes, isa);
      for (size_t i = begin; i < end; ++i) {
        const int code = codes[i - begin];
        any |= code != assignment[i];
        assignment[i] = static_cast<uint8_t>(code);
        ++n[code];
        for (size_t j = 0; j < kDim; ++j) sum[code * kDim + j] += x[i * kDim + j];
      }
      changed[chunk] = any;
    });
    // Iteration 0 always updates: the initial assignment of 0 is arbitrary.
    if (iteration > 0 &&
        std::none_of(changed.begin(), changed.end(), [](uint8_t c) { return c != 0; }))
      break;
    for (int c = 0; c < kRvqEntries; ++c) {
      double total[kDim] = {};
      uint64_t members = 0;
      for (size_t chunk = 0; chunk < chunks; ++chunk) {
        members += counts[chunk * kRvqEntries + c];
        for (size_t j = 0; j < kDim; ++j) total[j] += sums[(chunk * kRvqEntries + c) * kDim + j];
      }
      // An empty cluster keeps its centre: deterministic, and k-means++
      // seeding makes it rare.
      if (members == 0) continue;
      for (size_t j = 0; j < kDim; ++j)
        centres[c * kDim + j] = static_cast<float>(total[j] / static_cast<double>(members));
    }
    codebook.assign(centres.data());
  }
  return codebook;
}

void subtract_nearest(const Codebook& codebook, std::vector<float>& vectors, int threads) {
  const size_t count = vectors.size() / kDim;
  const kernels::Isa isa = search_isa();
  parallel_for(chunk_count(count), threads, [&](size_t chunk) {
    const size_t begin = chunk * kChunk, end = std::min(count, (chunk + 1) * kChunk);
    uint8_t codes[kChunk];
    nearest_codes(codebook, vectors.data() + begin * kDim, end - begin, codes, isa);
    for (size_t i = begin; i < end; ++i) {
      float* v = vectors.data() + i * kDim;
      const float* e = codebook.entry(codes[i - begin]);
      for (size_t j = 0; j < kDim; ++j) v[j] -= e[j];
    }
  });
}

std::array<Codebook, kRvqStages> train_rvq(std::vector<float>& vectors,
                                           const KmeansParams& params) {
  std::array<Codebook, kRvqStages> stages;
  for (int s = 0; s < kRvqStages; ++s) {
    KmeansParams stage_params = params;
    stage_params.seed = derive_seed(params.seed, static_cast<uint64_t>(s));
    stages[s] = train_codebook(vectors.data(), vectors.size() / kDim, stage_params);
    subtract_nearest(stages[s], vectors, params.threads);
  }
  return stages;
}

}  // namespace sluice::convert
