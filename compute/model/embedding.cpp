// compute/model/embedding.cpp: verifying an on-disk table block by block at
// load, and reading, checking and dequantizing one row of it per token.
#include "compute/model/embedding.h"

#include "proto/checksum.h"
#include "proto/error.h"

namespace sluice {
namespace {

kernels::QuantFormat quant_format(const TrunkTensorInfo& tensor) {
  switch (tensor.format) {
    case TrunkFormat::kQ8G128: return kernels::QuantFormat::kQ8G128;
    case TrunkFormat::kQ6G128: return kernels::QuantFormat::kQ6G128;
    case TrunkFormat::kQ4G128: return kernels::QuantFormat::kQ4G128;
    case TrunkFormat::kF32: break;
  }
  fail("trunk tensor \"{}\": f32, not a table read by rows", tensor.name);
}

// The info of rows [first, first + count) alone, for the value checks.
TrunkTensorInfo block_info(const TrunkTensorInfo& tensor, uint64_t count) {
  TrunkTensorInfo block = tensor;
  block.rows = count;
  block.shape = {count, tensor.cols};
  block.bytes = block.expected_bytes();
  block.scale_bytes = block.expected_scale_bytes();
  return block;
}

}  // namespace

DiskRows::DiskRows(const Container& container, const TrunkTensorInfo& tensor, uint64_t block_rows)
    : container_(container), tensor_(tensor) {
  view_.format = quant_format(tensor);
  view_.rows = 1;
  view_.cols = cols();
  const uint64_t row_bytes = trunk_row_bytes(tensor.format, tensor.padded_cols());
  const uint64_t scale_count = tensor.groups_per_row();
  block_rows = std::max<uint64_t>(block_rows, 1);
  AlignedBuffer data(block_rows * row_bytes, kTrunkAlign);
  // Every row's scales, held until the whole sum is taken: the manifest's
  // covers all the data, then all the scales (K3: 18 MB, for the load only).
  std::vector<uint16_t> scales(tensor.rows * scale_count);
  row_crc_.resize(tensor.rows);
  uint32_t whole = 0;
  for (uint64_t first = 0; first < tensor.rows; first += block_rows) {
    const uint64_t count = std::min(block_rows, tensor.rows - first);
    uint16_t* block_scales = &scales[first * scale_count];
    container.read_trunk_rows(tensor, first, count, data.data(), block_scales);
    if (auto problem = trunk_values_problem(block_info(tensor, count), data.data(), block_scales)) {
      fail("{}: trunk tensor \"{}\" rows {}..{}: {}", container.trunk_path(), tensor.name, first, first + count,
           *problem);
    }
    whole = crc32_bytes(data.data(), count * row_bytes, whole);
    for (uint64_t r = 0; r < count; ++r) {
      const uint32_t data_sum = crc32_bytes(data.data() + r * row_bytes, row_bytes);
      row_crc_[first + r] = crc32_bytes(block_scales + r * scale_count, scale_count * sizeof(uint16_t), data_sum);
    }
  }
  whole = crc32_bytes(scales.data(), scales.size() * sizeof(uint16_t), whole);
  if (whole != tensor.crc32) {
    fail("{}: trunk tensor \"{}\": checksum mismatch (manifest says {:08x}, bytes sum to {:08x})",
         container.trunk_path(), tensor.name, tensor.crc32, whole);
  }
  data_ = AlignedBuffer(row_bytes, kTrunkAlign);
  scales_ = AlignedBuffer(scale_count * sizeof(uint16_t), kTrunkAlign);
  view_.data = data_.data();
  view_.scales = reinterpret_cast<const uint16_t*>(scales_.data());
}

void DiskRows::row(uint32_t row, float* out) const {
  if (row >= tensor_.rows) fail("tensor {}: row {} out of range ({} rows)", tensor_.name, row, tensor_.rows);
  std::lock_guard lock(mutex_);
  auto* scales = reinterpret_cast<uint16_t*>(scales_.data());
  container_.read_trunk_rows(tensor_, row, 1, data_.data(), scales);
  const uint32_t sum = crc32_bytes(scales, scales_.size(), crc32_bytes(data_.data(), data_.size()));
  if (sum != row_crc_[row]) {
    fail("{}: trunk tensor \"{}\" row {}: checksum mismatch (at load {:08x}, now {:08x}): the file changed",
         container_.trunk_path(), tensor_.name, row, row_crc_[row], sum);
  }
  kernels::quant_dequantize_row(view_, 0, out);
}

size_t DiskRows::resident_bytes() const {
  return row_crc_.size() * sizeof(uint32_t) + data_.size() + scales_.size();
}

}  // namespace sluice
