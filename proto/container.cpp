// proto/container.cpp: opening a container and reading from it. Sizes come
// from the checked manifest and are compared with the real files before any
// read; record headers are checked on every read, the crc32 when asked.
#include "proto/container.h"

#include <fmt/format.h>

#include <bit>
#include <cmath>
#include <filesystem>

#include "proto/aligned_buffer.h"
#include "proto/checksum.h"
#include "proto/error.h"

namespace sluice {
namespace {

static_assert(
    std::endian::native == std::endian::little,
    "containers hold little-endian f32 and f16 arrays that are loaded without byte swapping");

std::string join_path(const std::string& dir, const std::string& name) {
  return dir.empty() || dir.back() == '/' ? dir + name : dir + "/" + name;
}

void check_size(const RandomAccessFile& file, uint64_t expected, std::string_view what) {
  if (file.size() != expected) {
    fail("{}: file is {} bytes but the manifest says {} ({}){}", file.path(), file.size(), expected,
         what, file.size() < expected ? "; the file is truncated" : "");
  }
}

std::string read_whole_file(FileSystem& fs, const std::string& path, uint64_t limit) {
  const auto file = fs.open(path, OpenMode::kBuffered);
  if (file->size() > limit) {
    fail("{}: {} bytes, larger than this file can be (limit {})", path, file->size(), limit);
  }
  std::string bytes(file->size(), '\0');
  read_exact(*file, 0, bytes.data(), bytes.size());
  return bytes;
}

// Why `dir`, which has no manifest, is not a container, as the one thing the
// user should know: what it is instead.
[[noreturn]] void refuse_non_container(FileSystem& fs, const std::string& dir) {
  std::error_code error;
  if (std::filesystem::exists(dir, error) && !std::filesystem::is_directory(dir, error)) {
    fail("{}: not a directory (a sluice container is a directory made by `sluice convert`)", dir);
  }
  const bool checkpoint = fs.exists(join_path(dir, "config.json")) &&
                          (fs.exists(join_path(dir, "model.safetensors")) ||
                           fs.exists(join_path(dir, "model.safetensors.index.json")));
  if (checkpoint) {
    fail(
        "{}: a Hugging Face checkpoint, not a sluice container: convert it with `sluice convert {} "
        "OUT.sluice`",
        dir, dir);
  }
  if (fs.exists(join_path(dir, kTrunkFile))) {
    fail(
        "{}: incomplete container: conversion did not finish (run the same `sluice convert` again "
        "to resume)",
        dir);
  }
  fail("{}: no manifest.json: not a sluice container", dir);
}

}  // namespace

Container Container::open(const std::string& dir, FileSystem& fs, OpenMode bank_mode) {
  if (!fs.exists(dir)) fail("{}: no such container directory", dir);
  const std::string manifest_path = join_path(dir, kManifestFile);
  if (!fs.exists(manifest_path)) refuse_non_container(fs, dir);
  Container c;
  c.dir_ = dir;
  c.fs_ = &fs;
  c.manifest_ = parse_manifest(read_whole_file(fs, manifest_path, kMaxManifestBytes), manifest_path);
  c.trunk_file_ = fs.open(join_path(dir, kTrunkFile), OpenMode::kBuffered);
  check_size(*c.trunk_file_, c.manifest_.trunk_bytes, "trunk.bytes");
  c.codebooks_file_ = fs.open(join_path(dir, kCodebooksFile), OpenMode::kBuffered);
  check_size(*c.codebooks_file_, c.manifest_.codebooks_bytes,
             fmt::format("{} codebooks × {} bytes", c.manifest_.codebook_count, kCodebookBytes));
  for (const MoeLayerInfo& layer : c.manifest_.moe_layers) {
    auto bank = fs.open(join_path(dir, layer.file), bank_mode);
    check_size(*bank, layer.bytes,
               fmt::format("{} experts × stride {}", layer.experts, layer.record_stride));
    c.banks_.push_back(std::move(bank));
  }
  const std::vector<std::string> tokenizer_paths = c.tokenizer_paths();
  for (size_t i = 0; i < tokenizer_paths.size(); ++i) {
    const std::string& path = tokenizer_paths[i];
    if (!fs.exists(path)) fail("{}: tokenizer file named in the manifest is missing", path);
    const std::string bytes = read_whole_file(fs, path, kMaxTokenizerFileBytes);
    const uint32_t sum = crc32_bytes(bytes.data(), bytes.size());
    if (sum != c.manifest_.tokenizer_crc32[i]) {
      fail("{}: checksum mismatch (manifest says {:08x}, file has {:08x})", path,
           c.manifest_.tokenizer_crc32[i], sum);
    }
  }
  return c;
}

size_t Container::moe_index(uint32_t layer) const {
  const MoeLayerInfo* info = find_moe_layer(layer);
  if (info == nullptr) {
    fail("{}: layer {} is not a MoE layer of this container ({} layers, {} MoE)", dir_, layer,
         manifest_.layer_count, manifest_.moe_layers.size());
  }
  return static_cast<size_t>(info - manifest_.moe_layers.data());
}

const MoeLayerInfo* Container::find_moe_layer(uint32_t layer) const {
  for (const MoeLayerInfo& info : manifest_.moe_layers) {
    if (info.layer == layer) return &info;
  }
  return nullptr;
}

const MoeLayerInfo& Container::moe_layer(uint32_t layer) const {
  return manifest_.moe_layers[moe_index(layer)];
}

const TrunkTensorInfo* Container::find_trunk_tensor(std::string_view name) const {
  for (const TrunkTensorInfo& info : manifest_.trunk_tensors) {
    if (info.name == name) return &info;
  }
  return nullptr;
}

std::vector<std::string> Container::tokenizer_paths() const {
  std::vector<std::string> paths;
  for (const std::string& name : manifest_.tokenizer_files) paths.push_back(join_path(dir_, name));
  return paths;
}

uint64_t Container::expert_bytes() const {
  uint64_t total = 0;
  for (const MoeLayerInfo& layer : manifest_.moe_layers) total += layer.bytes;
  return total;
}

uint64_t Container::record_count() const {
  uint64_t total = 0;
  for (const MoeLayerInfo& layer : manifest_.moe_layers) total += layer.experts;
  return total;
}

uint32_t Container::largest_record_stride() const {
  uint32_t stride = 0;
  for (const MoeLayerInfo& layer : manifest_.moe_layers) stride = std::max(stride, layer.record_stride);
  return stride;
}

uint32_t Container::widest_moe_layer() const {
  uint32_t experts = 0;
  for (const MoeLayerInfo& layer : manifest_.moe_layers) experts = std::max(experts, layer.experts);
  return experts;
}

bool Container::bank_direct(uint32_t layer) const {
  return banks_[moe_index(layer)]->direct();
}

Codebooks Container::load_codebooks() const {
  const uint32_t count = manifest_.codebook_count;
  std::vector<float> values(size_t{count} * kRvqEntries * kRvqVecDim);
  read_exact(*codebooks_file_, 0, values.data(), values.size() * sizeof(float));
  const uint32_t sum = crc32_bytes(values.data(), values.size() * sizeof(float));
  if (sum != manifest_.codebooks_crc32) {
    fail("{}: checksum mismatch (manifest says {:08x}, file has {:08x})", codebooks_file_->path(),
         manifest_.codebooks_crc32, sum);
  }
  if (auto problem = codebook_values_problem(values.data(), count)) {
    fail("{}: {}", codebooks_file_->path(), *problem);
  }
  return Codebooks(count, std::move(values));
}

TrunkTensor Container::load_trunk_tensor(std::string_view name) const {
  const TrunkTensorInfo* info = find_trunk_tensor(name);
  if (info == nullptr) fail("{}: the trunk has no tensor \"{}\"", dir_, name);
  AlignedBuffer data(info->bytes, kTrunkAlign);
  AlignedBuffer scales(info->scale_bytes, kTrunkAlign);
  try {
    read_exact(*trunk_file_, info->offset, data.data(), info->bytes);
    if (info->scale_bytes != 0)
      read_exact(*trunk_file_, info->scale_offset, scales.data(), info->scale_bytes);
  } catch (const Error& e) {
    fail("trunk tensor \"{}\": {}", info->name, e.what());
  }
  TrunkTensor tensor(*info, std::move(data), std::move(scales));
  const uint32_t sum = trunk_tensor_crc32(*info, tensor.data(), tensor.scales());
  if (sum != info->crc32) {
    fail("{}: trunk tensor \"{}\": checksum mismatch (manifest says {:08x}, bytes sum to {:08x})",
         trunk_file_->path(), info->name, info->crc32, sum);
  }
  if (auto problem = trunk_values_problem(*info, tensor.data(), tensor.scales())) {
    fail("{}: trunk tensor \"{}\": {}", trunk_file_->path(), info->name, *problem);
  }
  return tensor;
}

void Container::read_trunk_rows(const TrunkTensorInfo& tensor, uint64_t first, uint64_t count, uint8_t* data,
                                uint16_t* scales) const {
  if (tensor.format == TrunkFormat::kF32) fail("trunk tensor \"{}\": f32, not stored in rows of groups", tensor.name);
  if (first > tensor.rows || count > tensor.rows - first) {
    fail("trunk tensor \"{}\": rows {}..{} out of range ({} rows)", tensor.name, first, first + count, tensor.rows);
  }
  const uint64_t row_bytes = trunk_row_bytes(tensor.format, tensor.padded_cols());
  const uint64_t scale_row_bytes = tensor.groups_per_row() * sizeof(uint16_t);
  try {
    read_exact(*trunk_file_, tensor.offset + first * row_bytes, data, count * row_bytes);
    read_exact(*trunk_file_, tensor.scale_offset + first * scale_row_bytes, scales, count * scale_row_bytes);
  } catch (const Error& e) {
    fail("trunk tensor \"{}\": rows {}..{}: {}", tensor.name, first, first + count, e.what());
  }
}

void Container::read_record(uint32_t layer, uint32_t expert, void* buffer, bool verify_crc) const {
  if (auto problem = try_read_record(layer, expert, buffer, verify_crc)) {
    fail("layer {} expert {}: {}", layer, expert, *problem);
  }
}

std::optional<std::string> Container::try_read_record(uint32_t layer, uint32_t expert, void* buffer,
                                                      bool verify_crc) const {
  const size_t index = moe_index(layer);
  const MoeLayerInfo& info = manifest_.moe_layers[index];
  if (expert >= info.experts) {
    fail("layer {} expert {}: no such expert (the layer has {})", layer, expert, info.experts);
  }
  if (reinterpret_cast<uintptr_t>(buffer) % kRecordAlign != 0) {
    fail("layer {} expert {}: record buffer is not {}-byte aligned", layer, expert, kRecordAlign);
  }
  RandomAccessFile& bank = *banks_[index];
  const uint64_t offset = uint64_t{expert} * info.record_stride;
  size_t got = 0;
  try {
    got = bank.read_at(offset, buffer, info.record_stride);
  } catch (const Error& e) {
    return std::string(e.what());
  }
  if (got != info.record_stride) {
    return fmt::format("short read: {} of {} bytes at offset {} of {}", got, info.record_stride,
                       offset, bank.path());
  }
  const auto* bytes = static_cast<const uint8_t*>(buffer);
  const RecordHeader found = RecordHeader::decode(bytes);
  const RecordHeader expected = expected_header(info.layout, layer, expert, info.codebook_base);
  if (auto problem = check_header(found, expected)) {
    // check_header names the record itself; callers want the bare problem.
    const std::string prefix = fmt::format("layer {} expert {}: ", layer, expert);
    if (problem->starts_with(prefix)) problem->erase(0, prefix.size());
    return problem;
  }
  if (verify_crc) {
    const uint32_t computed = payload_crc32(bytes, found.payload_end);
    if (computed != found.crc32) {
      return fmt::format("checksum mismatch (header says {:08x}, payload has {:08x})", found.crc32,
                         computed);
    }
  }
  return std::nullopt;
}

}  // namespace sluice
