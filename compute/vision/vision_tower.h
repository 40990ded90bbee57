// compute/vision/vision_tower.h: Kimi K3's vision tower and projector (k3.md
// §4.2): one image's normalised pixels in, the projector rows that stand in
// for its media pad out. Owns only the tower's weights (loaded from trunk.bin
// when a prompt has images); it never touches the text model or a sequence.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "compute/kernels/dispatch.h"
#include "compute/model/weights.h"
#include "proto/container.h"
#include "proto/model_config.h"

namespace sluice {

// An image's size in patches, both sides even (the 2×2 merge).
struct PatchGrid {
  uint32_t height = 0, width = 0;
  uint32_t patches() const { return height * width; }
  // Positions the image takes in the prompt: one per merged 2×2 block.
  uint32_t tokens() const { return (height / 2) * (width / 2); }
};

// The most patches one image may have: the release's in_patch_limit
// (k3.md §4.4); preprocessing caps it lower.
inline constexpr uint32_t kMaxTowerPatches = 65536;

struct VisionWeights {
  Linear patch_embed;  // [hidden, 3p²]: the conv kernel, one row per output channel
  Linear pos_emb;      // [pos_height·pos_width, hidden]: the learned grid, row-major
  struct Block {
    std::vector<float> norm0, norm1;
    Linear qkv, o, fc0, fc1;
  };
  std::vector<Block> blocks;
  std::vector<float> final_norm;
  Linear projector_in, projector_out;
  std::vector<float> projector_norm;
  size_t bytes = 0;

  // Throws Error naming the container and tensor when the model has no
  // vision tower or a tensor's shape is not the config's.
  static VisionWeights load(const Container& container, const ModelConfig& config);
};

class VisionTower {
 public:
  VisionTower(const VisionConfig& config, const VisionWeights& weights, kernels::Exec exec);

  // `pixels` is [3][p·grid.height][p·grid.width], already resized and
  // normalised. Returns grid.tokens() rows of the text model's hidden size,
  // in merge order (row-major over the 2×2 blocks).
  std::vector<float> encode(std::span<const float> pixels, PatchGrid grid) const;
  uint32_t text_hidden() const { return weights_.projector_out.rows(); }

 private:
  void patch_embed(std::span<const float> pixels, PatchGrid grid, float* x) const;
  void add_positions(PatchGrid grid, float* x) const;
  void block(const VisionWeights::Block& b, PatchGrid grid, std::vector<float>& x) const;
  void attention(PatchGrid grid, float* qkv, float* out) const;
  std::vector<float> project(PatchGrid grid, const std::vector<float>& x) const;

  const VisionConfig& config_;
  const VisionWeights& weights_;
  kernels::Exec exec_;
};

}  // namespace sluice
