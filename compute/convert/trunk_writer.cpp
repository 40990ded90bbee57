// compute/convert/trunk_writer.cpp: lays out and writes trunk.bin (resident
// tensors, FORMAT.md "Trunk tensor formats"). Rows are quantized in fixed
// chunks on the worker threads; nothing here depends on the thread count.
#include <algorithm>

#include "compute/convert/atomic_file.h"
#include "compute/convert/convert_steps.h"
#include "compute/convert/parallel.h"
#include "compute/convert/trunk_quant.h"

namespace sluice::convert {
namespace {

constexpr size_t kRowChunk = 256;

}  // namespace

std::vector<TrunkEntry> layout_trunk(const ModelPlan& plan, uint64_t& total) {
  const std::vector<TrunkPlacement> placements = place_trunk(plan.trunk, total);
  std::vector<TrunkEntry> entries;
  for (size_t i = 0; i < plan.trunk.size(); ++i) {
    const TrunkPlacement& p = placements[i];
    entries.push_back({plan.trunk[i], p.offset, p.bytes, p.scale_offset, p.scale_bytes});
  }
  return entries;
}

std::array<ErrorSums, 2> write_trunk(const Checkpoint& checkpoint, const std::vector<TrunkEntry>& entries,
                                     uint64_t total, const std::string& path, int threads,
                                     ConvertProgress& progress) {
  AtomicFile file(path);
  std::array<ErrorSums, 2> errors{};
  for (const auto& entry : entries) {
    const std::vector<float> w = read_weights(checkpoint, entry.plan.name);
    if (entry.plan.format == TrunkFormat::kF32) {
      file.write_at(entry.offset, w.data(), w.size() * sizeof(float));
      progress.advance(w.size());
      continue;
    }
    const size_t rows = entry.plan.shape[0], cols = entry.plan.shape[1];
    const bool q8 = entry.plan.format == TrunkFormat::kQ8G128;
    GroupQuantized q = q8 ? allocate_q8g128(rows, cols) : allocate_q4g128(rows, cols);
    const size_t chunks = (rows + kRowChunk - 1) / kRowChunk;
    std::vector<ErrorSums> chunk_errors(chunks);
    parallel_for(chunks, threads, [&](size_t chunk) {
      const size_t begin = chunk * kRowChunk, end = std::min(rows, begin + kRowChunk);
      chunk_errors[chunk] = q8 ? quantize_q8g128_rows(w.data(), cols, begin, end, q, entry.plan.name)
                               : quantize_q4g128_rows(w.data(), cols, begin, end, q, entry.plan.name);
      progress.advance((end - begin) * cols);
    });
    for (const auto& e : chunk_errors) errors[q8 ? 0 : 1].add(e);
    file.write_at(entry.offset, q.data.data(), q.data.size());
    file.write_at(entry.scale_offset, q.scales.data(), q.scales.size() * sizeof(uint16_t));
  }
  // Pads the file to its recorded size when the last tensor ends unaligned.
  uint64_t data_end = 0;
  for (const auto& entry : entries) {
    data_end = std::max(data_end, entry.scale_bytes ? entry.scale_offset + entry.scale_bytes : entry.offset + entry.bytes);
  }
  if (total > data_end) {
    const uint8_t zero = 0;
    file.write_at(total - 1, &zero, 1);
  }
  file.commit();
  return errors;
}

}  // namespace sluice::convert
