// proto/tensor_inventory.h: every tensor a model's container holds, derived
// from its config and family spec: the trunk tensors with their shape and
// storage format, and the source names of the routed experts. The converter
// writes exactly this list, the loader and the predictor find tensors by
// role through it, and the memory plan sizes the trunk from it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "proto/model_config.h"
#include "proto/record_format.h"
#include "proto/trunk_format.h"

namespace sluice {

enum class TensorRole {
  kEmbed, kFinalNorm, kLmHead,
  kInputNorm, kPostAttentionNorm,
  // GQA
  kQ, kK, kV, kO, kQNorm, kKNorm,
  // MLA (kQ when queries come from one projection)
  kQA, kQANorm, kQB, kKVA, kKVANorm, kKVB,
  // KDA (with kQ, kK, kV, kO)
  kQConv, kKConv, kVConv, kDecayA, kDecayB, kDecayLog, kDecayBias, kBeta, kGateA, kGateB, kOutputNorm,
  // Kimi K3: the full-rank output gate of KDA and MLA (g_proj)
  kGate,
  // Kimi K3's Attention Residuals: per-site norm and pseudo-query (k3.md §2.1)
  kAttnResNorm, kAttnResProj, kMlpResNorm, kMlpResProj, kFinalResNorm, kFinalResProj,
  // FFN
  kDenseGate, kDenseUp, kDenseDown,
  kRouter, kRouterBias, kSharedGate, kSharedUp, kSharedDown,
  // Kimi K3's latent MoE: routed experts live in a narrower space (k3.md §2.4)
  kLatentDown, kLatentNorm, kLatentUp,
  // Kimi K3's vision tower (layer = block) and projector (k3.md §4.1)
  kVisionPatchEmbed, kVisionPosEmb, kVisionNorm0, kVisionQkv, kVisionO, kVisionNorm1, kVisionFc0, kVisionFc1,
  kVisionFinalNorm, kProjectorIn, kProjectorOut, kProjectorNorm,
};

inline constexpr uint32_t kNoLayer = UINT32_MAX;

struct TensorSpec {
  std::string name;   // the Hugging Face name, kept in the container
  TensorRole role;
  uint32_t layer = kNoLayer;
  std::vector<uint64_t> shape;  // as stored: [n], [rows, cols], or more (f32 only)
  TrunkFormat format = TrunkFormat::kF32;
  // The checkpoint's shape when it differs from `shape`, the same values in
  // the same order (the vision patch kernel [out, 3, p, p] stored as [out,
  // 3p²], the position grid [h, w, width] as [h·w, width]); empty: `shape`.
  std::vector<uint64_t> source_shape;
  const std::vector<uint64_t>& checkpoint_shape() const { return source_shape.empty() ? shape : source_shape; }
  uint64_t elements() const;
};

struct MoeLayerSpec {
  uint32_t layer = 0;
  uint32_t experts = 0;
  uint32_t hidden = 0;        // the experts' input and output width
  uint32_t expert_width = 0;
  uint32_t codebook_base = 0;  // 6 codebooks per MoE layer, in layer order
};

// The LM head's format unless the converter is told otherwise (FORMAT.md,
// "Which format a tensor gets"); q4g128 is the other choice (measured: +2.1%
// perplexity on the demo model, against +0.03% for int8 activations).
inline constexpr TrunkFormat kDefaultLmHeadFormat = TrunkFormat::kQ8G128;

// The trunk in container order (lm_head absent when embeddings are tied),
// the LM head in kDefaultLmHeadFormat.
std::vector<TensorSpec> trunk_inventory(const ModelConfig& config);
// Stores lm_head.weight of `trunk` (when it has one) as `format`, which must
// be q8g128, q6g128 or q4g128; embeddings a tied head reads stay q8g128.
void set_lm_head_format(std::vector<TensorSpec>& trunk, TrunkFormat format);
std::vector<MoeLayerSpec> moe_inventory(const ModelConfig& config);
// K3's vision tower and projector, stored after the trunk in trunk.bin
// (empty without a vision_config). Not resident unless a prompt has images,
// so trunk_inventory leaves them out.
std::vector<TensorSpec> vision_inventory(const ModelConfig& config);
bool is_vision_tensor(const ModelConfig& config, std::string_view name);

// The name of the tensor with `role` in `layer` (kNoLayer for global ones).
std::string tensor_name(const ModelConfig& config, TensorRole role, uint32_t layer = kNoLayer);
// "model.layers.3.mlp.experts.17.down_proj.weight" (the family's spelling).
std::string expert_tensor_name(const ModelConfig& config, uint32_t layer, uint32_t expert, MatrixKind kind);
// Layers of the source the model does not run (multi-token prediction).
bool is_skipped_source_tensor(const ModelConfig& config, std::string_view name);
// Vision tensors of a checkpoint whose config has no vision_config: not stored.
bool is_unrun_part_tensor(const ModelConfig& config, std::string_view name);

// How trunk.bin stores a tensor: rows of its last dimension.
TrunkTensorInfo stored_geometry(const TensorSpec& tensor);
// Bytes a trunk tensor takes in trunk.bin (data and scales, before padding).
uint64_t trunk_tensor_bytes(const TensorSpec& tensor);
// Where each tensor of `trunk` goes in trunk.bin: its data, then (quantized)
// its scales, each on a 64-byte boundary, in order. `total` gets the file size.
struct TrunkPlacement {
  uint64_t offset = 0, bytes = 0, scale_offset = 0, scale_bytes = 0;
};
std::vector<TrunkPlacement> place_trunk(const std::vector<TensorSpec>& trunk, uint64_t& total);
// trunk.bin's size (place_trunk's total).
uint64_t trunk_file_bytes(const std::vector<TensorSpec>& trunk);

}  // namespace sluice
