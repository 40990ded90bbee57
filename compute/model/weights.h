// compute/model/weights.h: the resident trunk of one model, loaded from the
// container and checked against the config: every matrix stays in its stored
// format and is applied by the kernels. Routed experts are not here.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "compute/kernels/dispatch.h"
#include "compute/kernels/quant.h"
#include "compute/kernels/rvq.h"
#include "proto/container.h"
#include "proto/model_config.h"

namespace sluice {

// A resident [rows, cols] matrix in f32, q8g128 or q4g128.
class Linear {
 public:
  Linear() = default;
  explicit Linear(TrunkTensor tensor);
  uint32_t rows() const { return rows_; }
  uint32_t cols() const { return cols_; }
  // y (tokens × rows) = x (tokens × cols) · Wᵀ
  void apply(const float* x, uint32_t tokens, float* y, const kernels::Exec& exec) const;
  // Row `row` as f32 (embedding lookup).
  void row(uint32_t row, float* out) const;
  size_t bytes() const;

 private:
  std::optional<TrunkTensor> tensor_;
  kernels::QuantMatrixView view_;
  uint32_t rows_ = 0, cols_ = 0;
};

struct LayerWeights {
  std::vector<float> input_norm, post_attention_norm, q_norm, k_norm;
  Linear q, k, v, o;
  // MoE layers: the router (f32 [experts, hidden]) and the expert codebooks.
  std::vector<float> router;
  std::vector<std::unique_ptr<kernels::RvqCodebooks>> codebooks;  // gate, up, down
  const MoeLayerInfo* moe = nullptr;
  // Dense layers (Qwen3 mlp_only_layers).
  Linear dense_gate, dense_up, dense_down;
};

struct ModelWeights {
  Linear embed;
  std::vector<LayerWeights> layers;
  std::vector<float> final_norm;
  Linear lm_head;
  size_t bytes = 0;

  static ModelWeights load(const Container& container, const ModelConfig& config);
};

}  // namespace sluice
