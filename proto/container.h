// proto/container.h: an opened sluice container (FORMAT.md): the checked
// manifest, its files checked against it, resident data loaded on request and
// expert records read and header-checked one pread at a time. It never trusts
// a byte it read from disk before checking it, and never caches records.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "proto/file_io.h"
#include "proto/manifest.h"
#include "proto/rvq_decode.h"
#include "proto/trunk_format.h"

namespace sluice {

class Container {
 public:
  // Parses manifest.json and checks every file it names: trunk.bin and
  // codebooks.bin sizes, each bank's size (experts × stride), tokenizer files.
  // Banks stay open in `bank_mode` (kDirect falls back to buffered where the
  // filesystem refuses O_DIRECT; bank_direct() tells). `fs` must outlive the
  // container.
  static Container open(const std::string& dir, FileSystem& fs = posix_file_system(),
                        OpenMode bank_mode = OpenMode::kDirect);

  const std::string& dir() const { return dir_; }
  // trunk.bin's path, for messages about what was read from it.
  const std::string& trunk_path() const { return trunk_file_->path(); }
  const Manifest& manifest() const { return manifest_; }
  const std::string& arch() const { return manifest_.arch; }
  const nlohmann::json& config() const { return manifest_.config; }
  uint32_t layer_count() const { return manifest_.layer_count; }
  uint32_t top_k() const { return manifest_.top_k; }
  uint32_t vocab_size() const { return manifest_.vocab_size; }
  uint32_t hidden_size() const { return manifest_.hidden_size; }
  const std::vector<MoeLayerInfo>& moe_layers() const { return manifest_.moe_layers; }
  // The MoE entry of model layer `layer`, or nullptr for a dense layer.
  const MoeLayerInfo* find_moe_layer(uint32_t layer) const;
  // Same, but throws Error naming the layer when it is not a MoE layer.
  const MoeLayerInfo& moe_layer(uint32_t layer) const;
  const std::vector<TrunkTensorInfo>& trunk_tensors() const { return manifest_.trunk_tensors; }
  const TrunkTensorInfo* find_trunk_tensor(std::string_view name) const;
  // Full paths of the tokenizer files, in manifest order.
  std::vector<std::string> tokenizer_paths() const;
  const std::optional<std::string>& chat_template() const { return manifest_.chat_template; }
  // Hash of the manifest bytes: two containers with the same identity hold
  // the same model, so a client can refuse a daemon serving another one.
  uint64_t identity() const { return manifest_.identity; }
  uint64_t trunk_bytes() const { return manifest_.trunk_bytes; }
  uint64_t codebooks_bytes() const { return manifest_.codebooks_bytes; }
  uint64_t expert_bytes() const;  // all banks
  uint64_t record_count() const;  // all banks
  uint32_t largest_record_stride() const;  // of any bank: the size of a cache slot
  uint32_t widest_moe_layer() const;       // most experts of any MoE layer
  // Whether reads of layer `layer`'s bank bypass the page cache.
  bool bank_direct(uint32_t layer) const;

  // Reads codebooks.bin; refuses non-finite entries (naming the codebook).
  Codebooks load_codebooks() const;
  // Reads one trunk tensor (data and scales) into 64-byte aligned buffers;
  // throws Error naming the tensor if it is missing or cannot be read.
  TrunkTensor load_trunk_tensor(std::string_view name) const;
  // Reads rows [first, first + count) of a grouped-format trunk tensor: their
  // data into `data` (count × its row bytes) and their f16 group scales into
  // `scales` (count × groups_per_row). Unchecked: the caller holds the sums
  // (what the manifest's crc32 covers is the whole tensor). Throws Error
  // naming the tensor for an f32 tensor, rows out of range, or a failed read.
  // Safe to call from several threads at once.
  void read_trunk_rows(const TrunkTensorInfo& tensor, uint64_t first, uint64_t count, uint8_t* data,
                       uint16_t* scales) const;

  // Reads record (layer, expert) into `buffer` (4096-aligned, at least the
  // layer's record_stride bytes) with one read of the whole record, then
  // checks its header against expected_header() and, when `verify_crc`, the
  // payload crc32. Throws Error "layer L expert E: <problem>". Safe to call
  // from several threads at once (each with its own buffer).
  void read_record(uint32_t layer, uint32_t expert, void* buffer, bool verify_crc) const;
  // Same read and checks, but a damaged or unreadable record is reported as
  // its problem ("checksum mismatch", "header magic mismatch (...)", ...)
  // instead of thrown. Bad arguments (no such layer or expert) still throw.
  std::optional<std::string> try_read_record(uint32_t layer, uint32_t expert, void* buffer,
                                             bool verify_crc) const;

 private:
  Container() = default;
  // Index into moe_layers() / banks_ of model layer `layer`; throws if dense.
  size_t moe_index(uint32_t layer) const;

  std::string dir_;
  FileSystem* fs_ = nullptr;
  Manifest manifest_;
  std::unique_ptr<RandomAccessFile> trunk_file_;
  std::unique_ptr<RandomAccessFile> codebooks_file_;
  std::vector<std::unique_ptr<RandomAccessFile>> banks_;  // parallel to manifest_.moe_layers
};

}  // namespace sluice
