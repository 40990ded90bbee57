// compute/model/embedding.h: an untied embedding table left in trunk.bin
// (ModelWeights::embed_row): one row is read per token, checked against a
// crc32 of that row taken when the whole tensor was verified at load, and
// dequantized. It costs a few KiB of RAM instead of the table.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "compute/kernels/quant.h"
#include "proto/aligned_buffer.h"
#include "proto/container.h"

namespace sluice {

// Rows of a grouped-format trunk tensor read from the container on demand.
class DiskRows {
 public:
  // Streams the tensor once, `block_rows` rows at a time: its crc32 must be
  // the manifest's and its values in range (as load_trunk_tensor checks),
  // and each row's crc32 (its data, then its scales) is kept. Throws Error
  // naming the tensor otherwise. `container` must outlive the rows.
  DiskRows(const Container& container, const TrunkTensorInfo& tensor, uint64_t block_rows = 1024);
  uint32_t rows() const { return static_cast<uint32_t>(tensor_.rows); }
  uint32_t cols() const { return static_cast<uint32_t>(tensor_.cols); }
  // Row `row` as f32, the same values a resident Linear's row() gives.
  // Throws Error naming the tensor and row when it is out of range or its
  // bytes no longer match their sum (the file changed under a running model).
  void row(uint32_t row, float* out) const;
  // What stays in RAM: the row sums and one row's buffers.
  size_t resident_bytes() const;

 private:
  const Container& container_;
  TrunkTensorInfo tensor_;
  std::vector<uint32_t> row_crc_;
  mutable std::mutex mutex_;  // the row buffers below
  mutable AlignedBuffer data_, scales_;
  kernels::QuantMatrixView view_;  // one row, over the buffers
};

}  // namespace sluice
