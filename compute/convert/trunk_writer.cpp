// compute/convert/trunk_writer.cpp: lays out and writes trunk.bin (resident
// tensors, FORMAT.md "Trunk tensor formats") from any TrunkValues. Rows are
// read and quantized in fixed chunks on the worker threads, so no tensor is
// held whole in its stored form; nothing here depends on the thread count.
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

void CheckpointTrunkValues::begin(const TrunkTensorPlan& tensor) { current_ = read_weights(checkpoint_, tensor.name, &crc_); }

void CheckpointTrunkValues::rows(const TrunkTensorPlan& tensor, uint64_t first, uint64_t last, float* out) {
  const uint64_t cols = tensor.shape.back();
  std::copy(current_.begin() + static_cast<ptrdiff_t>(first * cols), current_.begin() + static_cast<ptrdiff_t>(last * cols),
            out);
}

std::map<TrunkFormat, ErrorSums> write_trunk(TrunkValues& values, const std::vector<TrunkEntry>& entries,
                                             uint64_t total, const std::string& path, int threads,
                                             ConvertProgress& progress) {
  AtomicFile file(path);
  std::map<TrunkFormat, ErrorSums> errors;
  for (const auto& entry : entries) {
    values.begin(entry.plan);
    const uint64_t cols = entry.plan.shape.back(), rows = entry.plan.elements() / cols;
    const TrunkFormat format = entry.plan.format;
    const size_t chunks = (rows + kRowChunk - 1) / kRowChunk;
    std::vector<ErrorSums> chunk_errors(chunks);
    parallel_for(chunks, threads, [&](size_t chunk) {
      const uint64_t first = chunk * kRowChunk, last = std::min<uint64_t>(rows, first + kRowChunk), n = last - first;
      std::vector<float> w(n * cols);
      values.rows(entry.plan, first, last, w.data());
      if (format == TrunkFormat::kF32) {
        file.write_at(entry.offset + first * cols * sizeof(float), w.data(), w.size() * sizeof(float));
      } else {
        // Quantization is row by row, so a chunk quantized on its own gives
        // the bytes of the same rows of the whole tensor.
        GroupQuantized q = allocate_grouped(format, n, cols);
        chunk_errors[chunk] = quantize_grouped_rows(format, w.data(), cols, 0, n, q, entry.plan.name);
        const uint64_t row_bytes = q.data.size() / n, row_scales = q.scales.size() / n;
        file.write_at(entry.offset + first * row_bytes, q.data.data(), q.data.size());
        file.write_at(entry.scale_offset + first * row_scales * sizeof(uint16_t), q.scales.data(),
                      q.scales.size() * sizeof(uint16_t));
      }
      progress.advance(n * cols);
    });
    if (format != TrunkFormat::kF32)
      for (const auto& e : chunk_errors) errors[format].add(e);
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
