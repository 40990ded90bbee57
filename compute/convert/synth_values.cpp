// compute/convert/synth_values.cpp: `sluice synth`'s generators (see
// synth_values.h). Each row, codebook and record has its own SplitMix64
// stream seeded from (seed, tensor name or layer, row or expert).
#include "compute/convert/synth_values.h"

#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>

#include "compute/convert/codebook.h"
#include "compute/convert/expert_record.h"
#include "compute/convert/kmeans.h"
#include "proto/f16.h"
#include "proto/manifest.h"

namespace sluice::convert {
namespace {

constexpr uint64_t kCodebookSalt = 0xc0de;
constexpr uint64_t kRecordSalt = 0x5ec0;
constexpr float kWeightStd = 0.02f;
const float kSqrt3 = std::sqrt(3.0f);

// How one tensor's values are drawn: uniform in center ± half_width, or
// ln U(low, high) when log_uniform.
struct Draw {
  float center = 0.0f, half_width = 0.0f;
  bool log_uniform = false;
  float low = 0.0f, high = 0.0f;
};

Draw draw_for(const TrunkTensorPlan& tensor) {
  switch (tensor.role) {
    case TensorRole::kInputNorm:
    case TensorRole::kPostAttentionNorm:
    case TensorRole::kQNorm:
    case TensorRole::kKNorm:
    case TensorRole::kQANorm:
    case TensorRole::kKVANorm:
    case TensorRole::kOutputNorm:
    case TensorRole::kFinalNorm:
    case TensorRole::kLatentNorm:
    case TensorRole::kAttnResNorm:
    case TensorRole::kMlpResNorm:
    case TensorRole::kFinalResNorm:
      return {.center = 1.0f, .half_width = 0.1f};
    // Kimi K3's depth-mixture queries, as K3-tiny draws them (k3.md §6):
    // a softmax over depth that is neither flat nor one-hot.
    case TensorRole::kAttnResProj:
    case TensorRole::kMlpResProj:
    case TensorRole::kFinalResProj:
    case TensorRole::kRouterBias:
      return {.half_width = 0.05f};
    case TensorRole::kDecayBias:
      return {.half_width = 1.0f};
    case TensorRole::kDecayLog:
      return {.log_uniform = true, .low = 1.0f, .high = 16.0f};
    case TensorRole::kQConv:
    case TensorRole::kKConv:
    case TensorRole::kVConv:
      return {.half_width = 0.5f};
    case TensorRole::kRouter:
      return {.half_width = kSqrt3 * 2.0f / std::sqrt(static_cast<float>(tensor.shape.back()))};
    default:
      return {.half_width = kSqrt3 * kWeightStd};
  }
}

// [-1, 1) from 32 random bits.
float signed_unit(uint32_t bits) {
  return static_cast<float>(bits >> 8) * 0x1p-23f - 1.0f;
}

void fill_random_bytes(SplitMix64& rng, uint8_t* out, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const uint64_t r = rng.next();
    std::memcpy(out + i, &r, 8);
  }
  if (i < n) {
    const uint64_t r = rng.next();
    std::memcpy(out + i, &r, n - i);
  }
}

// GPT-2's byte-level alphabet: printable bytes stand for themselves, the
// others for U+0100 onwards in byte order; as UTF-8.
std::string byte_char(uint8_t byte) {
  uint32_t code = byte;
  if (!((byte >= 33 && byte <= 126) || (byte >= 161 && byte <= 172) || byte >= 174)) {
    uint32_t shifted = 0;
    for (uint32_t b = 0; b < byte; ++b) {
      if (!((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174)) ++shifted;
    }
    code = 256 + shifted;
  }
  std::string s;
  if (code < 0x80) {
    s += static_cast<char>(code);
  } else {
    s += static_cast<char>(0xC0 | (code >> 6));
    s += static_cast<char>(0x80 | (code & 0x3F));
  }
  return s;
}

bool writes_residual(TensorRole role) {
  return role == TensorRole::kO || role == TensorRole::kSharedDown ||
         role == TensorRole::kDenseDown || role == TensorRole::kLatentUp;
}

bool is_norm(TensorRole role) {
  return draw_for(TrunkTensorPlan{.role = role, .shape = {1}}).center == 1.0f;
}

}  // namespace

// Rows a routing shape draws itself; false for every other tensor.
bool SynthTrunkValues::shaped_rows(const TrunkTensorPlan& tensor, uint64_t first, uint64_t last,
                                   float* out) const {
  const uint64_t cols = tensor.shape.back();
  for (uint64_t row = first; row < last; ++row) {
    float* values = out + (row - first) * cols;
    const uint32_t r = static_cast<uint32_t>(row);
    switch (tensor.role) {
      case TensorRole::kEmbed:
        shaped_embedding_row(*routing_, r, values);
        break;
      case TensorRole::kLmHead:
        shaped_lm_head_row(*routing_, r, values);
        break;
      case TensorRole::kRouter:
        shaped_router_row(*routing_, routing_->moe_ordinal.at(tensor.layer), r, values);
        break;
      case TensorRole::kRouterBias:
        std::fill(values, values + cols, 0.0f);
        break;
      default:
        if (!is_norm(tensor.role)) return false;
        std::fill(values, values + cols, 1.0f);
    }
  }
  return true;
}

void SynthTrunkValues::rows(const TrunkTensorPlan& tensor, uint64_t first, uint64_t last,
                            float* out) {
  if (routing_ != nullptr && shaped_rows(tensor, first, last, out)) return;
  Draw draw = draw_for(tensor);
  if (routing_ != nullptr && writes_residual(tensor.role)) draw.half_width *= kResidualScale;
  const uint64_t cols = tensor.shape.back(), name_hash = fnv1a64(tensor.name);
  for (uint64_t row = first; row < last; ++row) {
    SplitMix64 rng(derive_seed(seed_, name_hash, row));
    float* values = out + (row - first) * cols;
    for (uint64_t c = 0; c < cols; c += 2) {
      const uint64_t r = rng.next();
      for (uint64_t k = 0; k < 2 && c + k < cols; ++k) {
        const uint32_t bits = static_cast<uint32_t>(r >> (32 * k));
        if (draw.log_uniform) {
          const float u = static_cast<float>(bits >> 8) * 0x1p-24f;
          values[c + k] = std::log(draw.low + u * (draw.high - draw.low));
        } else {
          values[c + k] = draw.center + draw.half_width * signed_unit(bits);
        }
      }
    }
  }
}

std::string synth_layer_codebooks(uint64_t seed, uint32_t layer) {
  std::string bytes(kCodebooksPerLayer * kCodebookBytes, '\0');
  std::vector<float> values(kRvqEntries * kRvqVecDim);
  for (uint32_t book = 0; book < kCodebooksPerLayer; ++book) {
    SplitMix64 rng(derive_seed(seed, layer, book, kCodebookSalt));
    const float range = std::ldexp(1.0f, -2 * static_cast<int>(book % kRvqStages));
    for (float& v : values) v = range * signed_unit(static_cast<uint32_t>(rng.next()));
    std::memcpy(bytes.data() + book * kCodebookBytes, values.data(), kCodebookBytes);
  }
  return bytes;
}

void synth_expert_record(const RecordLayout& layout, uint64_t seed, uint32_t layer, uint32_t expert,
                         uint32_t codebook_base, uint8_t* record, float down_scale) {
  std::memset(record, 0, layout.stride);
  SplitMix64 rng(derive_seed(seed, layer, expert, kRecordSalt));
  // The two stages' entries sum to a standard deviation of about 0.6
  // (uniform in ±1 and ±1/4).
  const float base_scale = kWeightStd / 0.6f;
  for (MatrixKind kind : kMatrixKinds) {
    const RvqMatrixShape& m = layout.matrices[static_cast<int>(kind)];
    uint8_t* indices = record + layout.matrix_offset(kind);
    // Every bit pattern is a valid code, so random bytes are random codes.
    fill_random_bytes(rng, indices, m.index_bytes());
    for (uint32_t r = m.rows; r < m.rows_padded(); ++r) {
      for (uint32_t v = 0; v < m.vectors_per_row(); ++v) {
        for (int s = 0; s < kRvqStages; ++s) m.set_code(indices, r, v, s, 0);
      }
    }
    uint8_t* scales = record + layout.scales_offset(kind);
    const float kind_scale = kind == MatrixKind::kDown ? base_scale * down_scale : base_scale;
    for (uint32_t r = 0; r < m.rows; ++r) {
      const float jitter = 1.0f + 0.2f * signed_unit(static_cast<uint32_t>(rng.next()));
      const uint16_t h = f32_to_f16(kind_scale * jitter);
      scales[2 * r] = static_cast<uint8_t>(h);
      scales[2 * r + 1] = static_cast<uint8_t>(h >> 8);
    }
  }
  seal_record(layout, layer, expert, codebook_base, record);
}

std::string synth_tokenizer_json(uint32_t vocab) {
  // A sorted map: an ordered_json object looks keys up linearly.
  nlohmann::json tokens = nlohmann::json::object();
  std::string alphabet[256];
  for (int b = 0; b < 256; ++b) alphabet[b] = byte_char(static_cast<uint8_t>(b));
  for (uint32_t id = 0; id < vocab; ++id) {
    std::string text;
    if (id < 256) {
      text = alphabet[id];
    } else if (id < 256 + 65536) {
      const uint32_t j = id - 256;
      text = alphabet[j >> 8] + alphabet[j & 0xFF];
    } else {
      const uint32_t j = id - 256 - 65536;
      text = alphabet[(j >> 16) & 0xFF] + alphabet[(j >> 8) & 0xFF] + alphabet[j & 0xFF];
    }
    tokens[text] = id;
  }
  const nlohmann::json byte_level{{"type", "ByteLevel"},
                                  {"add_prefix_space", false},
                                  {"trim_offsets", true},
                                  {"use_regex", true}};
  const nlohmann::json tokenizer{{"version", "1.0"},
                                 {"truncation", nullptr},
                                 {"padding", nullptr},
                                 {"added_tokens", nlohmann::json::array()},
                                 {"normalizer", nullptr},
                                 {"pre_tokenizer", byte_level},
                                 {"post_processor", byte_level},
                                 {"decoder", byte_level},
                                 {"model",
                                  {{"type", "BPE"},
                                   {"dropout", nullptr},
                                   {"unk_token", nullptr},
                                   {"continuing_subword_prefix", nullptr},
                                   {"end_of_word_suffix", nullptr},
                                   {"fuse_unk", false},
                                   {"byte_fallback", false},
                                   {"vocab", tokens},
                                   {"merges", nlohmann::json::array()}}}};
  return tokenizer.dump() + "\n";
}

std::string synth_tokenizer_config() {
  return nlohmann::ordered_json{{"add_bos_token", false},
                                {"add_eos_token", false},
                                {"bos_token", nullptr},
                                {"eos_token", nullptr},
                                {"chat_template", nullptr}}
             .dump(2) +
         "\n";
}

}  // namespace sluice::convert
