// compute/model/weights.h: the resident trunk of one model, loaded from the
// container by the tensor roles of its family spec (proto/tensor_inventory.h)
// and checked against the config: every matrix stays in its stored format
// and is applied by the kernels. Routed experts are not here.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "compute/kernels/dispatch.h"
#include "compute/kernels/quant.h"
#include "compute/kernels/rvq.h"
#include "compute/model/embedding.h"
#include "proto/container.h"
#include "proto/model_config.h"
#include "proto/tensor_inventory.h"

namespace sluice {

// A resident [rows, cols] matrix in f32, q8g128 or q4g128.
class Linear {
 public:
  Linear() = default;
  explicit Linear(TrunkTensor tensor);
  uint32_t rows() const { return rows_; }
  uint32_t cols() const { return cols_; }
  bool empty() const { return !tensor_; }
  // y (tokens × rows) = x (tokens × cols) · Wᵀ
  void apply(const float* x, uint32_t tokens, float* y, const kernels::Exec& exec) const;
  // Rows [first, first + count) as a matrix of their own (one head's block):
  // y (tokens × count) = x (tokens × cols) · W[first, first + count)ᵀ.
  void apply_rows(uint32_t first, uint32_t count, const float* x, uint32_t tokens, float* y,
                  const kernels::Exec& exec) const;
  // The transposed product over rows [first, first + count):
  // out[t·out_stride + k] += Σ_i c[t·c_stride + i] · W[first + i][k]
  // (kernels::quant_transposed_matmul), on the calling thread.
  void apply_transposed(uint32_t first, uint32_t count, const float* c, size_t c_stride, uint32_t tokens,
                        float* out, size_t out_stride, kernels::Isa isa) const;
  // Row `row` as f32 (embedding lookup).
  void row(uint32_t row, float* out) const;
  size_t bytes() const;

 private:
  // Throws Error naming the tensor unless rows [first, first + count) are its own.
  void check_rows(uint32_t first, uint32_t count) const;

  std::optional<TrunkTensor> tensor_;
  kernels::QuantMatrixView view_;
  uint32_t rows_ = 0, cols_ = 0;
};

// Loads the tensors of an inventory (the trunk's, the vision tower's) from
// trunk.bin by role and layer, refusing any whose stored shape is not the one
// the config implies, and counts the bytes it made resident.
class TensorLoader {
 public:
  TensorLoader(const Container& container, std::vector<TensorSpec> inventory);
  bool has(TensorRole role, uint32_t layer = kNoLayer) const { return specs_.count({layer, role}) != 0; }
  std::vector<float> vector(TensorRole role, uint32_t layer = kNoLayer);
  std::vector<float> vector_if(TensorRole role, uint32_t layer);
  Linear linear(TensorRole role, uint32_t layer = kNoLayer);
  Linear linear_if(TensorRole role, uint32_t layer);
  size_t bytes() const { return bytes_; }
  // The stored name of a tensor of the inventory.
  const std::string& name(TensorRole role, uint32_t layer = kNoLayer) const;

 private:
  const TensorSpec& find(TensorRole role, uint32_t layer) const;

  const Container& container_;
  std::map<std::pair<uint32_t, TensorRole>, TensorSpec> specs_;
  size_t bytes_ = 0;
};

struct GqaWeights {
  Linear q, k, v, o;
  std::vector<float> q_norm, k_norm;  // empty without q/k norms
};

struct MlaWeights {
  Linear q;                 // when queries come from one projection
  Linear q_a, q_b;          // the low-rank query path
  std::vector<float> q_a_norm;
  Linear kv_a, kv_b, o;
  std::vector<float> kv_a_norm;
  Linear gate;  // K3's output gate (g_proj), empty without one
};

struct KdaWeights {
  Linear q, k, v, o;
  std::vector<float> q_conv, k_conv, v_conv;  // [width][kernel]
  Linear decay_a, decay_b;                    // f_a_proj, f_b_proj
  std::vector<float> decay_log;               // A_log, one per head
  std::vector<float> decay_bias;              // dt_bias, one per channel
  Linear beta;                                // b_proj
  Linear gate_a, gate_b;                      // g_a_proj, g_b_proj
  Linear gate;                                // K3's full-rank g_proj instead of the two
  std::vector<float> o_norm;
};

struct MoeWeights {
  const MoeLayerInfo* bank = nullptr;
  std::vector<float> router;  // f32 [experts, hidden]
  std::vector<float> bias;    // score-correction bias, empty when the router has none
  std::vector<std::unique_ptr<kernels::RvqCodebooks>> codebooks;  // gate, up, down
  Linear shared_gate, shared_up, shared_down;                      // empty without a shared expert
  Linear latent_down, latent_up;  // K3's latent MoE, empty without a latent
  std::vector<float> latent_norm;
};

struct DenseWeights {
  Linear gate, up, down;
};

struct LayerWeights {
  std::vector<float> input_norm, post_attention_norm;
  // K3's Attention Residuals: each site's norm weight and pseudo-query.
  std::vector<float> attn_res_norm, attn_res_proj, mlp_res_norm, mlp_res_proj;
  GqaWeights gqa;  // mixer kGqa
  MlaWeights mla;  // mixer kMla
  KdaWeights kda;  // KDA layers
  std::optional<MoeWeights> moe;  // MoE layers
  DenseWeights dense;             // dense layers
};

struct ModelWeights {
  // The embedding of an untied model, on disk; null when tied (lm_head is it).
  std::unique_ptr<DiskRows> embed_rows;
  std::vector<LayerWeights> layers;
  std::vector<float> final_norm;
  std::vector<float> final_res_norm, final_res_proj;  // K3's output mixture
  Linear lm_head;
  size_t bytes = 0;  // resident: the trunk loaded, less an on-disk embedding, plus its row sums

  // Token `token`'s embedding as f32.
  void embed_row(uint32_t token, float* out) const;

  static ModelWeights load(const Container& container, const ModelConfig& config);
};

}  // namespace sluice
