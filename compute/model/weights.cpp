// compute/model/weights.cpp: loading and shape-checking the trunk. Names and
// shapes come from the tensor inventory; nothing here spells a tensor name.
#include "compute/model/weights.h"

#include <cmath>
#include <map>

#include "proto/error.h"
#include "proto/tensor_inventory.h"

namespace sluice {
namespace {

void load_moe(TensorLoader& t, const Container& container, const Codebooks& codebooks, const ModelConfig& config,
              uint32_t i, LayerWeights& layer) {
  MoeWeights& moe = layer.moe.emplace();
  moe.bank = container.find_moe_layer(i);
  if (moe.bank == nullptr) fail("{}: layer {} is a MoE layer but has no expert bank", container.dir(), i);
  if (moe.bank->experts != config.experts || moe.bank->hidden != config.expert_hidden() ||
      moe.bank->expert_width != config.expert_width) {
    fail("{}: bank of layer {} holds {} experts of {}x{}, the config implies {} of {}x{}", container.dir(), i,
         moe.bank->experts, moe.bank->hidden, moe.bank->expert_width, config.experts, config.expert_hidden(),
         config.expert_width);
  }
  moe.router = t.vector(TensorRole::kRouter, i);
  moe.bias = t.vector_if(TensorRole::kRouterBias, i);
  for (MatrixKind kind : kMatrixKinds) {
    moe.codebooks.push_back(std::make_unique<kernels::RvqCodebooks>(
        codebooks.entry(codebook_id(moe.bank->codebook_base, kind, 0), 0),
        codebooks.entry(codebook_id(moe.bank->codebook_base, kind, 1), 0)));
  }
  moe.shared_gate = t.linear_if(TensorRole::kSharedGate, i);
  moe.shared_up = t.linear_if(TensorRole::kSharedUp, i);
  moe.shared_down = t.linear_if(TensorRole::kSharedDown, i);
  moe.latent_down = t.linear_if(TensorRole::kLatentDown, i);
  moe.latent_norm = t.vector_if(TensorRole::kLatentNorm, i);
  moe.latent_up = t.linear_if(TensorRole::kLatentUp, i);
}

}  // namespace

Linear::Linear(TrunkTensor tensor) : rows_(static_cast<uint32_t>(tensor.rows())), cols_(static_cast<uint32_t>(tensor.cols())) {
  tensor_.emplace(std::move(tensor));
  if (tensor_->format() != TrunkFormat::kF32) {
    view_.format = tensor_->format() == TrunkFormat::kQ8G128   ? kernels::QuantFormat::kQ8G128
                   : tensor_->format() == TrunkFormat::kQ6G128 ? kernels::QuantFormat::kQ6G128
                                                               : kernels::QuantFormat::kQ4G128;
    view_.rows = rows_;
    view_.cols = cols_;
    view_.data = tensor_->data();
    view_.scales = tensor_->scales();
  }
}

void Linear::apply(const float* x, uint32_t tokens, float* y, const kernels::Exec& exec) const {
  if (tensor_->format() == TrunkFormat::kF32) {
    const auto* w = reinterpret_cast<const float*>(tensor_->data());
    for (uint32_t t = 0; t < tokens; ++t) {
      kernels::f32_matvec(w, rows_, cols_, x + size_t{t} * cols_, y + size_t{t} * rows_, exec);
    }
    return;
  }
  kernels::quant_matmul(view_, x, tokens, y, exec);
}

void Linear::check_rows(uint32_t first, uint32_t count) const {
  if (first > rows_ || count > rows_ - first)
    fail("tensor {}: rows [{}, {}) out of range ({} rows)", tensor_->name(), first, size_t{first} + count, rows_);
}

void Linear::apply_rows(uint32_t first, uint32_t count, const float* x, uint32_t tokens, float* y,
                        const kernels::Exec& exec) const {
  check_rows(first, count);
  if (tensor_->format() == TrunkFormat::kF32) {
    const auto* w = reinterpret_cast<const float*>(tensor_->data()) + size_t{first} * cols_;
    for (uint32_t t = 0; t < tokens; ++t)
      kernels::f32_matvec(w, count, cols_, x + size_t{t} * cols_, y + size_t{t} * count, exec);
    return;
  }
  kernels::QuantMatrixView block = view_;
  block.rows = count;
  block.data += size_t{first} * view_.row_bytes();
  block.scales += size_t{first} * view_.groups();
  kernels::quant_matmul(block, x, tokens, y, exec);
}

void Linear::apply_transposed(uint32_t first, uint32_t count, const float* c, size_t c_stride, uint32_t tokens,
                              float* out, size_t out_stride, kernels::Isa isa) const {
  check_rows(first, count);
  if (tensor_->format() != TrunkFormat::kF32) {
    kernels::quant_transposed_matmul(view_, first, count, c, c_stride, tokens, out, out_stride, isa);
    return;
  }
  const auto* w = reinterpret_cast<const float*>(tensor_->data());
  for (uint32_t t = 0; t < tokens; ++t)
    for (uint32_t i = 0; i < count; ++i) {
      const float* row = w + size_t{first + i} * cols_;
      for (uint32_t k = 0; k < cols_; ++k) out[t * out_stride + k] = std::fma(c[t * c_stride + i], row[k], out[t * out_stride + k]);
    }
}

void Linear::row(uint32_t row, float* out) const {
  if (row >= rows_) fail("tensor {}: row {} out of range ({} rows)", tensor_->name(), row, rows_);
  if (tensor_->format() == TrunkFormat::kF32) {
    const auto* w = reinterpret_cast<const float*>(tensor_->data()) + size_t{row} * cols_;
    std::copy(w, w + cols_, out);
    return;
  }
  kernels::quant_dequantize_row(view_, row, out);
}

size_t Linear::bytes() const {
  return tensor_ ? tensor_->info().bytes + tensor_->info().scale_bytes : 0;
}

TensorLoader::TensorLoader(const Container& container, std::vector<TensorSpec> inventory) : container_(container) {
  for (TensorSpec& spec : inventory) {
    const auto key = std::make_pair(spec.layer, spec.role);
    specs_.emplace(key, std::move(spec));
  }
}

std::vector<float> TensorLoader::vector(TensorRole role, uint32_t layer) {
  const TensorSpec& spec = find(role, layer);
  const TrunkTensor tensor = container_.load_trunk_tensor(spec.name);
  if (tensor.rows() * tensor.cols() != spec.elements()) {
    fail("{}: tensor {} has {} values, the config implies {}", container_.dir(), spec.name,
         tensor.rows() * tensor.cols(), spec.elements());
  }
  bytes_ += tensor.info().bytes;
  return dequantize(tensor);
}

std::vector<float> TensorLoader::vector_if(TensorRole role, uint32_t layer) {
  return has(role, layer) ? vector(role, layer) : std::vector<float>{};
}

Linear TensorLoader::linear(TensorRole role, uint32_t layer) {
  const TensorSpec& spec = find(role, layer);
  TrunkTensor tensor = container_.load_trunk_tensor(spec.name);
  if (tensor.info().shape.size() != 2 || tensor.rows() != spec.shape[0] || tensor.cols() != spec.shape[1]) {
    fail("{}: tensor {} has shape [{}, {}], the config implies [{}, {}]", container_.dir(), spec.name, tensor.rows(),
         tensor.cols(), spec.shape[0], spec.shape[1]);
  }
  Linear linear(std::move(tensor));
  bytes_ += linear.bytes();
  return linear;
}

Linear TensorLoader::linear_if(TensorRole role, uint32_t layer) {
  return has(role, layer) ? linear(role, layer) : Linear();
}

const std::string& TensorLoader::name(TensorRole role, uint32_t layer) const { return find(role, layer).name; }

const TensorSpec& TensorLoader::find(TensorRole role, uint32_t layer) const {
  const auto it = specs_.find({layer, role});
  if (it == specs_.end()) fail("{}: the model has no tensor of role {} in layer {}", container_.dir(), int(role), layer);
  return it->second;
}

ModelWeights ModelWeights::load(const Container& container, const ModelConfig& config) {
  ModelWeights w;
  TensorLoader t(container, trunk_inventory(config));
  // Untied, the embedding stays on disk: a row a token is all that decode reads of it.
  if (t.has(TensorRole::kLmHead)) {
    const TrunkTensorInfo* table = container.find_trunk_tensor(t.name(TensorRole::kEmbed));
    if (table == nullptr) fail("{}: the trunk has no embedding table", container.dir());
    if (table->rows != config.vocab || table->cols != config.hidden) {
      fail("{}: tensor {} has shape [{}, {}], the config implies [{}, {}]", container.dir(), table->name, table->rows,
           table->cols, config.vocab, config.hidden);
    }
    w.embed_rows = std::make_unique<DiskRows>(container, *table);
  }
  w.final_norm = t.vector(TensorRole::kFinalNorm);
  w.final_res_norm = t.vector_if(TensorRole::kFinalResNorm, kNoLayer);
  w.final_res_proj = t.vector_if(TensorRole::kFinalResProj, kNoLayer);
  // Tied embeddings: the LM head is the embedding matrix ([vocab, hidden] both).
  w.lm_head = t.linear(t.has(TensorRole::kLmHead) ? TensorRole::kLmHead : TensorRole::kEmbed);

  const Codebooks codebooks = container.load_codebooks();
  for (uint32_t i = 0; i < config.layers; ++i) {
    LayerWeights layer;
    layer.input_norm = t.vector(TensorRole::kInputNorm, i);
    layer.post_attention_norm = t.vector(TensorRole::kPostAttentionNorm, i);
    layer.attn_res_norm = t.vector_if(TensorRole::kAttnResNorm, i);
    layer.attn_res_proj = t.vector_if(TensorRole::kAttnResProj, i);
    layer.mlp_res_norm = t.vector_if(TensorRole::kMlpResNorm, i);
    layer.mlp_res_proj = t.vector_if(TensorRole::kMlpResProj, i);
    if (config.is_kda(i)) {
      KdaWeights& k = layer.kda;
      k.q = t.linear(TensorRole::kQ, i);
      k.k = t.linear(TensorRole::kK, i);
      k.v = t.linear(TensorRole::kV, i);
      k.o = t.linear(TensorRole::kO, i);
      k.q_conv = t.vector(TensorRole::kQConv, i);
      k.k_conv = t.vector(TensorRole::kKConv, i);
      k.v_conv = t.vector(TensorRole::kVConv, i);
      k.decay_a = t.linear(TensorRole::kDecayA, i);
      k.decay_b = t.linear(TensorRole::kDecayB, i);
      k.decay_log = t.vector(TensorRole::kDecayLog, i);
      k.decay_bias = t.vector(TensorRole::kDecayBias, i);
      k.beta = t.linear(TensorRole::kBeta, i);
      k.gate_a = t.linear_if(TensorRole::kGateA, i);
      k.gate_b = t.linear_if(TensorRole::kGateB, i);
      k.gate = t.linear_if(TensorRole::kGate, i);
      k.o_norm = t.vector(TensorRole::kOutputNorm, i);
    } else if (config.mixer == MixerKind::kGqa) {
      GqaWeights& g = layer.gqa;
      g.q = t.linear(TensorRole::kQ, i);
      g.k = t.linear(TensorRole::kK, i);
      g.v = t.linear(TensorRole::kV, i);
      g.o = t.linear(TensorRole::kO, i);
      g.q_norm = t.vector_if(TensorRole::kQNorm, i);
      g.k_norm = t.vector_if(TensorRole::kKNorm, i);
    } else {
      MlaWeights& m = layer.mla;
      m.q = t.linear_if(TensorRole::kQ, i);
      m.q_a = t.linear_if(TensorRole::kQA, i);
      m.q_a_norm = t.vector_if(TensorRole::kQANorm, i);
      m.q_b = t.linear_if(TensorRole::kQB, i);
      m.kv_a = t.linear(TensorRole::kKVA, i);
      m.kv_a_norm = t.vector(TensorRole::kKVANorm, i);
      m.kv_b = t.linear(TensorRole::kKVB, i);
      m.o = t.linear(TensorRole::kO, i);
      m.gate = t.linear_if(TensorRole::kGate, i);
    }
    if (config.layer_is_moe[i]) {
      load_moe(t, container, codebooks, config, i, layer);
    } else {
      if (container.find_moe_layer(i) != nullptr) fail("{}: dense layer {} has an expert bank", container.dir(), i);
      layer.dense.gate = t.linear(TensorRole::kDenseGate, i);
      layer.dense.up = t.linear(TensorRole::kDenseUp, i);
      layer.dense.down = t.linear(TensorRole::kDenseDown, i);
    }
    w.layers.push_back(std::move(layer));
  }
  w.bytes = t.bytes() + codebooks.values().size() * sizeof(float) + (w.embed_rows ? w.embed_rows->resident_bytes() : 0);
  return w;
}

void ModelWeights::embed_row(uint32_t token, float* out) const {
  if (embed_rows) {
    embed_rows->row(token, out);
  } else {
    lm_head.row(token, out);
  }
}

}  // namespace sluice
