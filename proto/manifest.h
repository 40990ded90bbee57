// proto/manifest.h: manifest.json of a container (FORMAT.md), parsed as
// untrusted input into checked numbers. It checks everything the manifest can
// say about itself; it never opens the files it names (container.h does).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "proto/record_format.h"
#include "proto/trunk_format.h"

namespace sluice {

// The manifest's format_version this build reads and writes. Version 2 added
// the checksums (trunk tensors, codebooks, tokenizer files, the manifest
// itself); version 3 stores experts as codes of 4 weights in 2 stages of 64
// entries (record version 2) instead of 8 weights in 3 stages of 256.
inline constexpr uint64_t kContainerFormatVersion = 3;

// FORMAT.md bounds.
inline constexpr uint64_t kMaxLayers = 256;
inline constexpr uint64_t kMaxExpertsPerLayer = 4096;
inline constexpr uint64_t kMaxTopK = 64;
inline constexpr uint64_t kMaxHidden = 65536;
inline constexpr uint64_t kMaxExpertWidth = 65536;
inline constexpr uint64_t kMaxVocab = 1048576;
inline constexpr uint64_t kMaxRecordStride = uint64_t{1} << 30;
inline constexpr uint32_t kCodebooksPerLayer = 3 * kRvqStages;  // per matrix kind and stage
// Our own sanity bounds, so no product of manifest numbers can overflow.
inline constexpr uint64_t kMaxTrunkDim = uint64_t{1} << 24;
inline constexpr uint64_t kMaxCodebookCount = 65536;
inline constexpr uint64_t kMaxManifestBytes = uint64_t{64} << 20;
inline constexpr uint64_t kMaxTokenizerFileBytes = uint64_t{256} << 20;

inline constexpr const char* kManifestFile = "manifest.json";
inline constexpr const char* kTrunkFile = "trunk.bin";
inline constexpr const char* kCodebooksFile = "codebooks.bin";

// "experts-L007.bin" for layer 7.
std::string bank_file_name(uint32_t layer);

struct MoeLayerInfo {
  uint32_t layer = 0;  // index among all the model's layers
  std::string file;
  uint32_t experts = 0;
  uint32_t record_stride = 0;
  uint64_t bytes = 0;
  uint32_t codebook_base = 0;
  uint32_t hidden = 0;
  uint32_t expert_width = 0;
  uint32_t records_crc32 = 0;  // crc32 of the records' header crc32s, in expert order
  RecordLayout layout;  // derived from hidden and expert_width
};

struct Manifest {
  std::string arch;
  nlohmann::json config;  // the source config.json, verbatim
  uint32_t layer_count = 0;
  uint32_t top_k = 0;
  uint32_t vocab_size = 0;
  uint32_t hidden_size = 0;
  double bits_per_weight = 0.0;  // as the manifest states it
  std::string codebook_sharing;
  uint64_t trunk_bytes = 0;
  std::vector<TrunkTensorInfo> trunk_tensors;
  uint64_t codebooks_bytes = 0;
  uint32_t codebook_count = 0;
  uint32_t codebooks_crc32 = 0;
  std::vector<MoeLayerInfo> moe_layers;  // ascending layer index
  std::vector<std::string> tokenizer_files;
  std::vector<uint32_t> tokenizer_crc32;  // parallel to tokenizer_files
  std::optional<std::string> chat_template;
  uint64_t identity = 0;  // hash of the manifest bytes
};

// Architectures this build can run.
bool known_arch(std::string_view arch);

// Parses and checks manifest bytes; `path` names the file in every error.
Manifest parse_manifest(std::string_view bytes, const std::string& path);

// What the manifest's "manifest_crc32" must be: the crc32 of the manifest
// without that key, serialised compactly with sorted keys (nlohmann::json
// dump()), so no edit of any value, however well-formed, goes unnoticed.
uint32_t manifest_crc32(const nlohmann::json& root);

// The crc32 of a bank's record crc32s (each 4 little-endian bytes, in expert
// order): FORMAT.md records_crc32.
uint32_t records_digest(const std::vector<uint32_t>& record_crcs);

// 64-bit FNV-1a; the container identity is this hash of the manifest bytes.
uint64_t fnv1a64(std::string_view bytes);

}  // namespace sluice
