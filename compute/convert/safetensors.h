// compute/convert/safetensors.h: reads Hugging Face safetensors checkpoints
// (single file or sharded through model.safetensors.index.json) as untrusted
// input. Every length, offset and shape is checked before it is used; it
// never hands out bytes outside the tensor's own span.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "proto/file_io.h"

namespace sluice::convert {

// Safetensors dtypes the reader knows. BF16, F16, F32 and F8_E4M3 convert to
// f32 (fp8 without its block scales: the checkpoint applies them); the
// others are recognised so they can be refused by name.
enum class DType { kBF16, kF16, kF32, kF64, kF8E4M3, kF8E5M2, kI8, kI16, kI32, kI64, kU8, kU16, kU32, kU64, kBool };

struct TensorInfo {
  std::string name;
  DType dtype = DType::kF32;
  std::string dtype_name;        // as spelled in the header
  std::vector<uint64_t> shape;
  uint64_t elements = 0;
  uint64_t offset = 0;           // absolute byte offset in the file
  uint64_t bytes = 0;
  bool convertible() const {
    return dtype == DType::kBF16 || dtype == DType::kF16 || dtype == DType::kF32 || dtype == DType::kF8E4M3;
  }
};

std::string shape_string(const std::vector<uint64_t>& shape);  // "[64, 128]"

// An fp8 e4m3fn byte as f32 (no infinities; 0x7f and 0xff are NaN).
float e4m3_to_f32(uint8_t byte);

// `count` elements of a convertible tensor's stored bytes `raw` as f32.
void stored_to_f32(const TensorInfo& info, const uint8_t* raw, uint64_t count, float* out);

inline constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

class SafetensorsFile {
 public:
  // Parses and checks the header. `name` is what messages call the file
  // (the name inside the checkpoint directory). Throws Error naming the file
  // and, where one is at fault, the tensor.
  SafetensorsFile(std::unique_ptr<RandomAccessFile> file, std::string name);

  const std::string& name() const { return name_; }
  uint64_t bytes() const { return file_->size(); }
  // crc32 of the 8-byte length and the header JSON: the file's identity.
  uint32_t header_crc32() const { return header_crc32_; }
  const std::vector<TensorInfo>& tensors() const { return tensors_; }  // by offset
  const TensorInfo* find(std::string_view tensor) const;

  // Converts the tensor to f32 into `out` (info.elements floats). Refuses
  // dtypes other than BF16, F16, F32, F8_E4M3 naming file, tensor and dtype.
  // With `crc`, continues that crc32 over the stored bytes as they are read.
  void read_f32(const TensorInfo& info, float* out, uint32_t* crc = nullptr) const;
  // The tensor's stored bytes (info.bytes) into `out` (MXFP4's U8 tensors).
  void read_bytes(const TensorInfo& info, uint8_t* out) const;
  // crc32 of the tensor's stored bytes, continuing `running`: what a resumed
  // conversion compares to tell a changed source from the one it started on.
  uint32_t bytes_crc32(const TensorInfo& info, uint32_t running) const;
  // Every byte read from the file so far, header included (thread-safe):
  // what shows a conversion reads each source byte once.
  uint64_t bytes_read() const { return bytes_read_.load(std::memory_order_relaxed); }

 private:
  void read_counted(uint64_t offset, void* out, uint64_t bytes) const;

  std::unique_ptr<RandomAccessFile> file_;
  mutable std::atomic<uint64_t> bytes_read_{0};
  std::string name_;
  uint32_t header_crc32_ = 0;
  std::vector<TensorInfo> tensors_;
};

// Reads a whole small file (config, index, tokenizer) or throws naming it.
std::string read_small_file(FileSystem& fs, const std::string& path, uint64_t cap);

class Checkpoint {
 public:
  // Opens DIR/model.safetensors.index.json and its shards when present, else
  // DIR/model.safetensors.
  static Checkpoint open(FileSystem& fs, const std::string& dir);

  struct Located {
    const SafetensorsFile* file;
    const TensorInfo* info;
  };
  std::optional<Located> find(std::string_view tensor) const;
  // Shards sorted by name.
  const std::vector<std::unique_ptr<SafetensorsFile>>& files() const { return files_; }
  // Reads a tensor as f32; throws when absent.
  std::vector<float> read_f32(std::string_view tensor) const;
  // The file that lists the tensors: model.safetensors or the index.
  const std::string& listing() const { return listing_; }
  // The shards' sizes, and what has been read from them so far.
  uint64_t bytes() const;
  uint64_t bytes_read() const;

 private:
  std::string listing_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::vector<std::pair<std::string, Located>> index_;  // sorted by tensor name
};

}  // namespace sluice::convert
