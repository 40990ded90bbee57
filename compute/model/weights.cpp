// compute/model/weights.cpp: loading and shape-checking the trunk.
#include "compute/model/weights.h"

#include <fmt/format.h>

#include "proto/error.h"
#include "proto/f16.h"

namespace sluice {
namespace {

std::vector<float> load_vector(const Container& container, const std::string& name, uint64_t length) {
  const TrunkTensor tensor = container.load_trunk_tensor(name);
  if (tensor.rows() * tensor.cols() != length) {
    fail("{}: tensor {} has {} values, the config implies {}", container.dir(), name,
         tensor.rows() * tensor.cols(), length);
  }
  return dequantize(tensor);
}

Linear load_linear(const Container& container, const std::string& name, uint64_t rows, uint64_t cols) {
  TrunkTensor tensor = container.load_trunk_tensor(name);
  if (tensor.info().shape.size() != 2 || tensor.rows() != rows || tensor.cols() != cols) {
    fail("{}: tensor {} has shape [{}, {}], the config implies [{}, {}]", container.dir(), name, tensor.rows(),
         tensor.cols(), rows, cols);
  }
  return Linear(std::move(tensor));
}

}  // namespace

Linear::Linear(TrunkTensor tensor) : rows_(static_cast<uint32_t>(tensor.rows())), cols_(static_cast<uint32_t>(tensor.cols())) {
  tensor_.emplace(std::move(tensor));
  if (tensor_->format() != TrunkFormat::kF32) {
    view_.format = tensor_->format() == TrunkFormat::kQ8G128 ? kernels::QuantFormat::kQ8G128
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
  } else {
    kernels::quant_matmul(view_, x, tokens, y, exec);
  }
}

void Linear::row(uint32_t row, float* out) const {
  if (row >= rows_) fail("tensor {}: row {} out of range ({} rows)", tensor_->name(), row, rows_);
  const uint8_t* data = tensor_->data();
  const uint64_t padded = tensor_->padded_cols();
  switch (tensor_->format()) {
    case TrunkFormat::kF32: {
      const auto* w = reinterpret_cast<const float*>(data) + size_t{row} * cols_;
      std::copy(w, w + cols_, out);
      return;
    }
    case TrunkFormat::kQ8G128: {
      const auto* q = reinterpret_cast<const int8_t*>(data) + row * padded;
      const uint16_t* scales = tensor_->scales() + row * (padded / kTrunkGroup);
      for (uint32_t c = 0; c < cols_; ++c) out[c] = static_cast<float>(q[c]) * f16_to_f32(scales[c / kTrunkGroup]);
      return;
    }
    case TrunkFormat::kQ4G128: {
      const uint8_t* q = data + row * (padded / 2);
      const uint16_t* scales = tensor_->scales() + row * (padded / kTrunkGroup);
      for (uint32_t c = 0; c < cols_; ++c) {
        const int nibble = c % 2 == 0 ? q[c / 2] & 0x0f : q[c / 2] >> 4;
        out[c] = static_cast<float>(nibble - 8) * f16_to_f32(scales[c / kTrunkGroup]);
      }
      return;
    }
  }
}

size_t Linear::bytes() const {
  return tensor_ ? tensor_->info().bytes + tensor_->info().scale_bytes : 0;
}

ModelWeights ModelWeights::load(const Container& container, const ModelConfig& config) {
  ModelWeights w;
  const uint64_t hidden = config.hidden;
  const uint64_t q_width = uint64_t{config.heads} * config.head_dim;
  const uint64_t kv_width = uint64_t{config.kv_heads} * config.head_dim;
  w.embed = load_linear(container, "model.embed_tokens.weight", config.vocab, hidden);
  w.final_norm = load_vector(container, "model.norm.weight", hidden);
  const bool has_head = container.find_trunk_tensor("lm_head.weight") != nullptr;
  if (!has_head && !config.tie_embeddings) fail("{}: tensor lm_head.weight is missing", container.dir());
  w.lm_head = load_linear(container, has_head ? "lm_head.weight" : "model.embed_tokens.weight", config.vocab, hidden);

  const Codebooks codebooks = container.load_codebooks();
  for (uint32_t i = 0; i < config.layers; ++i) {
    const std::string p = fmt::format("model.layers.{}.", i);
    LayerWeights layer;
    layer.input_norm = load_vector(container, p + "input_layernorm.weight", hidden);
    layer.post_attention_norm = load_vector(container, p + "post_attention_layernorm.weight", hidden);
    const bool whole = config.qk_norm == QkNorm::kWholeVector;
    layer.q_norm = load_vector(container, p + "self_attn.q_norm.weight", whole ? q_width : config.head_dim);
    layer.k_norm = load_vector(container, p + "self_attn.k_norm.weight", whole ? kv_width : config.head_dim);
    layer.q = load_linear(container, p + "self_attn.q_proj.weight", q_width, hidden);
    layer.k = load_linear(container, p + "self_attn.k_proj.weight", kv_width, hidden);
    layer.v = load_linear(container, p + "self_attn.v_proj.weight", kv_width, hidden);
    layer.o = load_linear(container, p + "self_attn.o_proj.weight", hidden, q_width);
    if (config.layer_is_moe[i]) {
      layer.moe = container.find_moe_layer(i);
      if (layer.moe == nullptr) fail("{}: layer {} is a MoE layer but has no expert bank", container.dir(), i);
      if (layer.moe->experts != config.experts || layer.moe->hidden != hidden ||
          layer.moe->expert_width != config.expert_width) {
        fail("{}: bank of layer {} holds {} experts of {}x{}, the config implies {} of {}x{}", container.dir(), i,
             layer.moe->experts, layer.moe->hidden, layer.moe->expert_width, config.experts, hidden,
             config.expert_width);
      }
      layer.router = load_vector(container, p + "mlp.gate.weight", uint64_t{config.experts} * hidden);
      for (MatrixKind kind : kMatrixKinds) {
        layer.codebooks.push_back(std::make_unique<kernels::RvqCodebooks>(
            codebooks.entry(codebook_id(layer.moe->codebook_base, kind, 0), 0),
            codebooks.entry(codebook_id(layer.moe->codebook_base, kind, 1), 0),
            codebooks.entry(codebook_id(layer.moe->codebook_base, kind, 2), 0)));
      }
    } else {
      if (container.find_moe_layer(i) != nullptr) fail("{}: dense layer {} has an expert bank", container.dir(), i);
      layer.dense_gate = load_linear(container, p + "mlp.gate_proj.weight", config.dense_width, hidden);
      layer.dense_up = load_linear(container, p + "mlp.up_proj.weight", config.dense_width, hidden);
      layer.dense_down = load_linear(container, p + "mlp.down_proj.weight", hidden, config.dense_width);
    }
    w.layers.push_back(std::move(layer));
  }

  w.bytes = w.embed.bytes() + w.lm_head.bytes() + codebooks.values().size() * sizeof(float);
  for (const LayerWeights& l : w.layers) {
    w.bytes += l.q.bytes() + l.k.bytes() + l.v.bytes() + l.o.bytes() + l.dense_gate.bytes() + l.dense_up.bytes() +
               l.dense_down.bytes() + l.router.size() * sizeof(float);
  }
  return w;
}

}  // namespace sluice
