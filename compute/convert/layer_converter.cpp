// compute/convert/layer_converter.cpp: one MoE layer: read its source bytes
// once, sample its normalised vectors, train its codebooks (one per matrix
// kind and stage), encode every expert into its bank file. It never reads a
// source byte twice.
// Each expert is one task writing its own record at e × stride, and the
// error sums are reduced in expert order: the bank is the same bytes for
// any thread count.
#include <algorithm>
#include <cstring>
#include <unordered_set>

#include <fmt/format.h>

#include "compute/convert/atomic_file.h"
#include "compute/convert/convert_steps.h"
#include "compute/convert/kmeans.h"
#include "compute/convert/parallel.h"

namespace sluice::convert {
namespace {

constexpr uint64_t kSampleSalt = 0x5a3;

std::array<std::string, 3> expert_names(const ModelConfig& config, uint32_t layer, uint32_t expert) {
  return {expert_tensor_name(config, layer, expert, MatrixKind::kGate),
          expert_tensor_name(config, layer, expert, MatrixKind::kUp),
          expert_tensor_name(config, layer, expert, MatrixKind::kDown)};
}

}  // namespace

std::vector<uint64_t> sample_positions(uint64_t total, uint64_t wanted, uint64_t seed) {
  std::vector<uint64_t> positions;
  if (total <= wanted) {
    positions.resize(total);
    for (uint64_t i = 0; i < total; ++i) positions[i] = i;
    return positions;
  }
  // Floyd's algorithm: `wanted` distinct draws without a shuffle of `total`.
  SplitMix64 rng(seed);
  std::unordered_set<uint64_t> chosen;
  chosen.reserve(wanted * 2);
  for (uint64_t j = total - wanted; j < total; ++j) {
    const uint64_t t = rng.below(j + 1);
    chosen.insert(chosen.count(t) ? j : t);
  }
  positions.assign(chosen.begin(), chosen.end());
  std::sort(positions.begin(), positions.end());
  return positions;
}

std::array<ErrorSums, 3> convert_layer(const Checkpoint& checkpoint, const ModelConfig& config, const MoeLayerPlan& layer,
                                       const ConvertOptions& options, const std::string& codebook_path,
                                       const std::string& bank_path, ConvertProgress& progress,
                                       uint32_t& source_crc32) {
  progress.phase(fmt::format("layer {}: reading", layer.layer));
  std::vector<std::array<WeightBytes, 3>> held(layer.experts);
  parallel_for(layer.experts, options.threads, [&](size_t e) {
    const auto names = expert_names(config, layer.layer, static_cast<uint32_t>(e));
    for (int k = 0; k < 3; ++k) held[e][k] = read_weight_bytes(checkpoint, names[k]);
  });
  source_crc32 = 0;
  for (const auto& expert : held) {
    for (const WeightBytes& matrix : expert) source_crc32 = crc32_of(matrix, source_crc32);
  }

  const RecordLayout layout = RecordLayout::compute(layer.hidden, layer.expert_width);
  std::array<std::vector<uint64_t>, 3> positions;
  std::array<std::vector<float>, 3> samples;
  std::array<uint64_t, 3> per_expert{};
  for (int k = 0; k < 3; ++k) {
    const RvqMatrixShape& m = layout.matrices[k];
    per_expert[k] = uint64_t{m.rows} * m.vectors_per_row();
    positions[k] = sample_positions(per_expert[k] * layer.experts, options.kmeans_sample,
                                    derive_seed(options.seed, layer.layer, static_cast<uint64_t>(k), kSampleSalt));
    samples[k].resize(positions[k].size() * kRvqVecDim);
  }

  progress.phase(fmt::format("layer {}: sampling", layer.layer));
  parallel_for(layer.experts, options.threads, [&](size_t e) {
    const auto names = expert_names(config, layer.layer, static_cast<uint32_t>(e));
    thread_local std::vector<float> w;  // reused: a fresh one per matrix is mostly page faults
    std::vector<float> u;
    for (int k = 0; k < 3; ++k) {
      const auto first = std::lower_bound(positions[k].begin(), positions[k].end(), e * per_expert[k]);
      const auto last = std::lower_bound(first, positions[k].end(), (e + 1) * per_expert[k]);
      if (first == last) continue;
      const RvqMatrixShape& m = layout.matrices[k];
      decode_weights_into(checkpoint, names[k], held[e][k], w);
      u.resize(m.cols);
      // Only rows holding a sample are normalised (each row on its own, so
      // these are the values encoding sees); positions are sorted.
      uint64_t normalised_row = ~uint64_t{0};
      for (auto it = first; it != last; ++it) {
        const uint64_t local = *it - e * per_expert[k];
        const uint64_t row = local / m.vectors_per_row(), vector = local % m.vectors_per_row();
        if (row != normalised_row) {
          uint16_t scale = 0;
          normalise_rows(w.data() + row * m.cols, 1, m.cols, u.data(), &scale, names[k],
                         static_cast<uint32_t>(row));
          normalised_row = row;
        }
        std::memcpy(&samples[k][static_cast<size_t>(it - positions[k].begin()) * kRvqVecDim],
                    &u[vector * kRvqVecDim], kRvqVecDim * sizeof(float));
      }
    }
  });

  LayerCodebooks codebooks;
  for (MatrixKind kind : kMatrixKinds) {
    const int k = static_cast<int>(kind);
    progress.phase(fmt::format("layer {}: training {}", layer.layer, matrix_kind_name(kind)));
    const KmeansParams params{derive_seed(options.seed, layer.layer, static_cast<uint64_t>(k)),
                              options.kmeans_iterations, options.threads};
    const auto stages = train_rvq(samples[k], params);
    for (int s = 0; s < kRvqStages; ++s) codebooks[k * kRvqStages + s] = stages[s];
  }
  std::string codebook_bytes;
  for (const auto& book : codebooks) codebook_bytes.append(reinterpret_cast<const char*>(book.entries()), kCodebookBytes);
  write_file_atomically(codebook_path, codebook_bytes);

  progress.phase(fmt::format("layer {}: encoding", layer.layer));
  AtomicFile bank(bank_path);
  std::vector<std::array<ErrorSums, 3>> expert_errors(layer.experts);
  parallel_for(layer.experts, options.threads, [&](size_t e) {
    const auto names = expert_names(config, layer.layer, static_cast<uint32_t>(e));
    thread_local std::array<std::vector<float>, 3> w;  // reused across experts, as is the record
    thread_local std::vector<uint8_t> record;
    for (int k = 0; k < 3; ++k) decode_weights_into(checkpoint, names[k], held[e][k], w[k]);
    held[e] = {};  // encoded from here on: the layer's held bytes shrink as it goes
    record.resize(layout.stride);
    expert_errors[e] = encode_expert_record({w[0].data(), w[1].data(), w[2].data()}, names, layout, codebooks,
                                            layer.layer, static_cast<uint32_t>(e), layer.codebook_base, record.data());
    bank.write_at(uint64_t{e} * layout.stride, record.data(), record.size());
    progress.advance(w[0].size() + w[1].size() + w[2].size());
  });
  bank.commit();
  std::array<ErrorSums, 3> errors{};
  for (const auto& e : expert_errors) {
    for (int k = 0; k < 3; ++k) errors[k].add(e[k]);
  }
  return errors;
}

}  // namespace sluice::convert
