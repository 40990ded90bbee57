// compute/convert/safetensors.cpp: header parsing, bounds checks and dtype
// conversion for safetensors files. It trusts nothing the header says until
// it has been checked against the file size.
#include "compute/convert/safetensors.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <cstring>
#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "proto/checksum.h"
#include "proto/error.h"
#include "proto/f16.h"

namespace sluice::convert {
namespace {

static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian");

struct DTypeName {
  const char* name;
  DType dtype;
  uint32_t size;
};
constexpr DTypeName kDTypes[] = {
    {"BF16", DType::kBF16, 2}, {"F16", DType::kF16, 2},         {"F32", DType::kF32, 4},
    {"F64", DType::kF64, 8},   {"F8_E4M3", DType::kF8E4M3, 1}, {"F8_E5M2", DType::kF8E5M2, 1},
    {"I8", DType::kI8, 1},     {"I16", DType::kI16, 2},         {"I32", DType::kI32, 4},
    {"I64", DType::kI64, 8},   {"U8", DType::kU8, 1},           {"U16", DType::kU16, 2},
    {"U32", DType::kU32, 4},   {"U64", DType::kU64, 8},         {"BOOL", DType::kBool, 1},
};

uint32_t dtype_size(DType dtype) {
  for (const auto& d : kDTypes) {
    if (d.dtype == dtype) return d.size;
  }
  return 0;
}

// A header entry checked field by field; `file` and `tensor` name the culprit.
TensorInfo parse_entry(const std::string& file, const std::string& tensor, const nlohmann::json& entry,
                       uint64_t data_bytes, uint64_t data_start) {
  if (!entry.is_object()) fail("{}: tensor {}: header entry is not an object", file, tensor);
  TensorInfo info;
  info.name = tensor;
  const auto dtype = entry.find("dtype");
  if (dtype == entry.end() || !dtype->is_string()) fail("{}: tensor {}: dtype missing", file, tensor);
  info.dtype_name = dtype->get<std::string>();
  uint32_t size = 0;
  for (const auto& d : kDTypes) {
    if (info.dtype_name == d.name) {
      info.dtype = d.dtype;
      size = d.size;
    }
  }
  if (size == 0) fail("{}: tensor {}: unknown dtype {}", file, tensor, info.dtype_name);
  const auto shape = entry.find("shape");
  if (shape == entry.end() || !shape->is_array() || shape->size() > 8) {
    fail("{}: tensor {}: shape missing or not a list of at most 8 dimensions", file, tensor);
  }
  info.elements = 1;
  for (const auto& dim : *shape) {
    if (!dim.is_number_unsigned()) fail("{}: tensor {}: shape entry {} is not a size", file, tensor, dim.dump());
    const uint64_t d = dim.get<uint64_t>();
    if (d != 0 && info.elements > (uint64_t{1} << 60) / d) fail("{}: tensor {}: shape too large", file, tensor);
    info.elements *= d;
    info.shape.push_back(d);
  }
  const auto offsets = entry.find("data_offsets");
  if (offsets == entry.end() || !offsets->is_array() || offsets->size() != 2 ||
      !(*offsets)[0].is_number_unsigned() || !(*offsets)[1].is_number_unsigned()) {
    fail("{}: tensor {}: data_offsets missing or not two sizes", file, tensor);
  }
  const uint64_t begin = (*offsets)[0].get<uint64_t>();
  const uint64_t end = (*offsets)[1].get<uint64_t>();
  if (begin > end || end > data_bytes) {
    fail("{}: tensor {}: data_offsets [{}, {}] outside the {} data bytes of the file", file, tensor, begin,
         end, data_bytes);
  }
  info.bytes = end - begin;
  if (info.elements * size != info.bytes) {
    fail("{}: tensor {}: shape {} of {} needs {} bytes but data_offsets span {}", file, tensor,
         shape_string(info.shape), info.dtype_name, info.elements * size, info.bytes);
  }
  info.offset = data_start + begin;
  return info;
}

}  // namespace

std::string shape_string(const std::vector<uint64_t>& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

SafetensorsFile::SafetensorsFile(std::unique_ptr<RandomAccessFile> file, std::string name)
    : file_(std::move(file)), name_(std::move(name)) {
  const uint64_t size = file_->size();
  if (size < 8) fail("{}: file is {} bytes, too short for a safetensors header", name_, size);
  uint8_t length_bytes[8];
  read_counted(0, length_bytes, 8);
  uint64_t header_bytes = 0;
  for (int i = 0; i < 8; ++i) header_bytes |= uint64_t{length_bytes[i]} << (8 * i);
  if (header_bytes > size - 8) {
    fail("{}: header length {} exceeds the file size {} (truncated file?)", name_, header_bytes, size);
  }
  if (header_bytes > kMaxHeaderBytes) fail("{}: header length {} exceeds {} bytes", name_, header_bytes, kMaxHeaderBytes);
  std::string header(header_bytes, '\0');
  read_counted(8, header.data(), header.size());
  header_crc32_ = crc32_bytes(header.data(), header.size(), crc32_bytes(length_bytes, 8));
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(header);
  } catch (const nlohmann::json::exception& e) {
    fail("{}: header is not valid JSON: {}", name_, e.what());
  }
  if (!json.is_object()) fail("{}: header is not a JSON object", name_);
  const uint64_t data_start = 8 + header_bytes;
  for (const auto& [tensor, entry] : json.items()) {
    if (tensor == "__metadata__") continue;
    tensors_.push_back(parse_entry(name_, tensor, entry, size - data_start, data_start));
  }
  std::sort(tensors_.begin(), tensors_.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return a.offset != b.offset ? a.offset < b.offset : a.name < b.name;
  });
  for (size_t i = 1; i < tensors_.size(); ++i) {
    const TensorInfo& prev = tensors_[i - 1];
    if (tensors_[i].offset < prev.offset + prev.bytes) {
      fail("{}: tensor {}: data overlaps tensor {}", name_, tensors_[i].name, prev.name);
    }
  }
}

const TensorInfo* SafetensorsFile::find(std::string_view tensor) const {
  for (const auto& info : tensors_) {
    if (info.name == tensor) return &info;
  }
  return nullptr;
}

float e4m3_to_f32(uint8_t byte) {
  const float sign = byte & 0x80 ? -1.0f : 1.0f;
  const int exponent = (byte >> 3) & 0x0f, mantissa = byte & 0x07;
  if (exponent == 0x0f && mantissa == 0x07) return std::numeric_limits<float>::quiet_NaN();
  if (exponent == 0) return sign * std::ldexp(static_cast<float>(mantissa) / 8.0f, -6);
  return sign * std::ldexp(1.0f + static_cast<float>(mantissa) / 8.0f, exponent - 7);
}

void SafetensorsFile::read_counted(uint64_t offset, void* out, uint64_t bytes) const {
  read_exact(*file_, offset, out, bytes);
  bytes_read_.fetch_add(bytes, std::memory_order_relaxed);
}

uint32_t SafetensorsFile::bytes_crc32(const TensorInfo& info, uint32_t running) const {
  constexpr uint64_t kSlice = uint64_t{4} << 20;
  std::vector<uint8_t> raw(std::min(info.bytes, kSlice));
  for (uint64_t done = 0; done < info.bytes; done += kSlice) {
    const uint64_t count = std::min(kSlice, info.bytes - done);
    read_counted(info.offset + done, raw.data(), count);
    running = crc32_bytes(raw.data(), count, running);
  }
  return running;
}

void stored_to_f32(const TensorInfo& info, const uint8_t* raw, uint64_t count, float* out) {
  if (info.dtype == DType::kF32) {
    std::memcpy(out, raw, count * 4);
  } else if (info.dtype == DType::kF8E4M3) {
    for (uint64_t i = 0; i < count; ++i) out[i] = e4m3_to_f32(raw[i]);
  } else {
    for (uint64_t i = 0; i < count; ++i) {
      const uint16_t bits = static_cast<uint16_t>(raw[2 * i] | raw[2 * i + 1] << 8);
      out[i] = info.dtype == DType::kBF16 ? std::bit_cast<float>(uint32_t{bits} << 16) : f16_to_f32(bits);
    }
  }
}

void SafetensorsFile::read_f32(const TensorInfo& info, float* out, uint32_t* crc) const {
  if (!info.convertible()) fail("{}: tensor {}: unsupported dtype {}", name_, info.name, info.dtype_name);
  const uint32_t size = dtype_size(info.dtype);
  // Read in slices so a large tensor never needs a second full-size buffer.
  constexpr uint64_t kSliceElements = uint64_t{1} << 20;
  std::vector<uint8_t> raw(std::min(info.elements, kSliceElements) * size);
  for (uint64_t first = 0; first < info.elements; first += kSliceElements) {
    const uint64_t count = std::min(kSliceElements, info.elements - first);
    read_counted(info.offset + first * size, raw.data(), count * size);
    if (crc) *crc = crc32_bytes(raw.data(), count * size, *crc);
    stored_to_f32(info, raw.data(), count, out + first);
  }
}

void SafetensorsFile::read_bytes(const TensorInfo& info, uint8_t* out) const {
  read_counted(info.offset, out, info.bytes);
}

std::string read_small_file(FileSystem& fs, const std::string& path, uint64_t cap) {
  auto file = fs.open(path, OpenMode::kBuffered);
  if (file->size() > cap) fail("{}: file is {} bytes, more than the {} allowed", path, file->size(), cap);
  std::string text(file->size(), '\0');
  read_exact(*file, 0, text.data(), text.size());
  return text;
}

Checkpoint Checkpoint::open(FileSystem& fs, const std::string& dir) {
  Checkpoint checkpoint;
  const std::string index_path = dir + "/model.safetensors.index.json";
  std::map<std::string, std::string> weight_map;  // tensor -> shard
  if (fs.exists(index_path)) {
    checkpoint.listing_ = "model.safetensors.index.json";
    nlohmann::json index;
    try {
      index = nlohmann::json::parse(read_small_file(fs, index_path, kMaxHeaderBytes));
    } catch (const nlohmann::json::exception& e) {
      fail("{}: not valid JSON: {}", index_path, e.what());
    }
    if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object()) {
      fail("{}: no weight_map object", index_path);
    }
    for (const auto& [tensor, shard] : index["weight_map"].items()) {
      if (!shard.is_string()) fail("{}: tensor {}: shard name is not a string", index_path, tensor);
      const std::string name = shard.get<std::string>();
      if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos) {
        fail("{}: tensor {}: shard name '{}' is not a plain file name", index_path, tensor, name);
      }
      weight_map[tensor] = name;
    }
  } else if (fs.exists(dir + "/model.safetensors")) {
    checkpoint.listing_ = "model.safetensors";
    checkpoint.files_.push_back(
        std::make_unique<SafetensorsFile>(fs.open(dir + "/model.safetensors", OpenMode::kBuffered), "model.safetensors"));
  } else {
    fail("{}: holds neither model.safetensors nor model.safetensors.index.json", dir);
  }
  if (!weight_map.empty()) {
    std::map<std::string, const SafetensorsFile*> shards;
    for (const auto& [tensor, shard] : weight_map) shards.emplace(shard, nullptr);
    for (auto& [shard, opened] : shards) {
      checkpoint.files_.push_back(std::make_unique<SafetensorsFile>(fs.open(dir + "/" + shard, OpenMode::kBuffered), shard));
      opened = checkpoint.files_.back().get();
    }
    for (const auto& [tensor, shard] : weight_map) {
      const SafetensorsFile* file = shards.at(shard);
      const TensorInfo* info = file->find(tensor);
      if (!info) fail("model.safetensors.index.json: tensor {} is mapped to {}, which does not hold it", tensor, shard);
      checkpoint.index_.emplace_back(tensor, Located{file, info});
    }
  } else {
    for (const auto& info : checkpoint.files_[0]->tensors()) {
      checkpoint.index_.emplace_back(info.name, Located{checkpoint.files_[0].get(), &info});
    }
    std::sort(checkpoint.index_.begin(), checkpoint.index_.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
  }
  return checkpoint;
}

std::optional<Checkpoint::Located> Checkpoint::find(std::string_view tensor) const {
  auto it = std::lower_bound(index_.begin(), index_.end(), tensor,
                             [](const auto& entry, std::string_view key) { return entry.first < key; });
  if (it == index_.end() || it->first != tensor) return std::nullopt;
  return it->second;
}

uint64_t Checkpoint::bytes() const {
  uint64_t total = 0;
  for (const auto& file : files_) total += file->bytes();
  return total;
}

uint64_t Checkpoint::bytes_read() const {
  uint64_t total = 0;
  for (const auto& file : files_) total += file->bytes_read();
  return total;
}

std::vector<float> Checkpoint::read_f32(std::string_view tensor) const {
  const auto located = find(tensor);
  if (!located) fail("{}: tensor {} missing", listing_, tensor);
  std::vector<float> out(located->info->elements);
  located->file->read_f32(*located->info, out.data());
  return out;
}

}  // namespace sluice::convert
