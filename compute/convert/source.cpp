// compute/convert/source.cpp: reads and checks the source directory up
// front, so a bad checkpoint is refused before any output exists. It reads
// tensor headers here, never tensor data.
#include <cmath>

#include <fmt/format.h>

#include "compute/convert/convert_steps.h"
#include "compute/convert/mxfp4.h"
#include "proto/checksum.h"
#include "proto/error.h"

namespace sluice::convert {
namespace {

constexpr uint64_t kMaxConfigBytes = 16ull << 20;
constexpr uint64_t kMaxTokenizerBytes = 512ull << 20;
// tiktoken.model is Kimi's tokenizer; it is copied only when there is no
// tokenizer.json, which the loader would prefer.
constexpr const char* kTokenizerFiles[] = {"tokenizer.json", "tiktoken.model",
                                           "tokenizer_config.json"};


constexpr uint64_t kFp8Block = 128;

// fp8 weights come with f32 block scales of one value per 128 × 128 block
// (architectures.md §0.9), named after the weight.
std::string scale_name(const std::string& weight) { return weight + "_scale_inv"; }
std::vector<uint64_t> scale_shape(const std::vector<uint64_t>& shape) {
  std::vector<uint64_t> blocks;
  for (uint64_t d : shape) blocks.push_back((d + kFp8Block - 1) / kFp8Block);
  return blocks;
}

// An MXFP4 matrix: U8 packed nibbles [rows, cols/2] and E8M0 scales [rows, cols/32].
void check_mxfp4(const Checkpoint& checkpoint, const std::string& name, const std::vector<uint64_t>& shape) {
  if (shape.size() != 2 || shape[1] % kMxfp4Group != 0) {
    fail("{}: tensor {}: MXFP4 needs a matrix of whole {}-value groups, the config implies {}", checkpoint.listing(),
         name, kMxfp4Group, shape_string(shape));
  }
  const std::pair<std::string, std::vector<uint64_t>> parts[] = {
      {mxfp4_packed_name(name), {shape[0], shape[1] / 2}}, {mxfp4_scale_name(name), {shape[0], shape[1] / kMxfp4Group}}};
  for (const auto& [part, want] : parts) {
    const auto located = checkpoint.find(part);
    if (!located) fail("{}: MXFP4 tensor {} missing (expected U8 {})", checkpoint.listing(), part, shape_string(want));
    if (located->info->dtype != DType::kU8 || located->info->shape != want) {
      fail("{}: tensor {}: {} {} but an MXFP4 {} weight needs U8 {}", located->file->name(), part,
           located->info->dtype_name, shape_string(located->info->shape), shape_string(shape), shape_string(want));
    }
  }
}

bool is_mxfp4(const Checkpoint& checkpoint, const std::string& name) {
  return !checkpoint.find(name) && name.ends_with("weight") && checkpoint.find(mxfp4_packed_name(name));
}

void check_tensor(const Checkpoint& checkpoint, const std::string& name, const std::vector<uint64_t>& shape) {
  if (is_mxfp4(checkpoint, name)) return check_mxfp4(checkpoint, name, shape);
  const auto located = checkpoint.find(name);
  if (!located) fail("{}: tensor {} missing (expected shape {})", checkpoint.listing(), name, shape_string(shape));
  const TensorInfo& info = *located->info;
  if (info.shape != shape) {
    fail("{}: tensor {}: shape {} but the config implies {}", located->file->name(), name, shape_string(info.shape),
         shape_string(shape));
  }
  if (!info.convertible()) fail("{}: tensor {}: unsupported dtype {}", located->file->name(), name, info.dtype_name);
  if (info.dtype != DType::kF8E4M3) return;
  if (shape.size() != 2) fail("{}: tensor {}: fp8 is only supported for matrices", located->file->name(), name);
  const auto scale = checkpoint.find(scale_name(name));
  if (!scale) fail("{}: fp8 tensor {} has no block scale tensor {}", checkpoint.listing(), name, scale_name(name));
  const TensorInfo& s = *scale->info;
  if (s.shape != scale_shape(shape) || (s.dtype != DType::kF32 && s.dtype != DType::kBF16)) {
    fail("{}: tensor {}: {} {} but an fp8 {} weight needs F32 block scales {}", scale->file->name(), s.name,
         s.dtype_name, shape_string(s.shape), shape_string(shape), shape_string(scale_shape(shape)));
  }
}

}  // namespace

Source open_source(FileSystem& fs, const std::string& dir) {
  Source source;
  source.dir = dir;
  const std::string config_path = dir + "/config.json";
  if (!fs.exists(config_path)) fail("{}: missing", config_path);
  const std::string config_text = read_small_file(fs, config_path, kMaxConfigBytes);
  try {
    source.config = nlohmann::ordered_json::parse(config_text);
  } catch (const nlohmann::json::exception& e) {
    fail("{}: not valid JSON: {}", config_path, e.what());
  }
  source.plan = plan_model(source.config, config_path);
  source.checkpoint = Checkpoint::open(fs, dir);
  for (const auto& tensor : source.plan.trunk) check_tensor(source.checkpoint, tensor.name, tensor.checkpoint_shape());
  for (const auto& layer : source.plan.moe_layers) {
    const RecordLayout layout = RecordLayout::compute(layer.hidden, layer.expert_width);
    for (uint32_t e = 0; e < layer.experts; ++e) {
      for (MatrixKind kind : kMatrixKinds) {
        const RvqMatrixShape& m = layout.matrices[static_cast<int>(kind)];
        check_tensor(source.checkpoint, expert_tensor_name(source.plan.config, layer.layer, e, kind), {m.rows, m.cols});
      }
    }
  }
  for (const auto& file : source.checkpoint.files()) {
    for (const TensorInfo& tensor : file->tensors()) {
      source.skipped_tensors += is_skipped_source_tensor(source.plan.config, tensor.name);
      source.unrun_tensors += is_unrun_part_tensor(source.plan.config, tensor.name);
    }
  }
  nlohmann::ordered_json files = nlohmann::ordered_json::array();
  for (const auto& file : source.checkpoint.files()) {
    files.push_back({{"name", file->name()}, {"bytes", file->bytes()}, {"header_crc32", file->header_crc32()}});
  }
  source.identity = {{"files", files}, {"config_crc32", crc32_bytes(config_text.data(), config_text.size())}};

  source.chat_template = nullptr;
  for (const char* name : kTokenizerFiles) {
    const std::string path = dir + "/" + name;
    if (!fs.exists(path)) continue;
    const bool ranks = std::string(name) == "tiktoken.model";
    if (ranks && fs.exists(dir + "/tokenizer.json")) continue;
    std::string bytes = read_small_file(fs, path, kMaxTokenizerBytes);
    if (ranks) {
      source.tokenizer_files.emplace_back(name, std::move(bytes));
      continue;
    }
    nlohmann::json parsed;
    try {
      parsed = nlohmann::json::parse(bytes);
    } catch (const nlohmann::json::exception& e) {
      fail("{}: not valid JSON: {}", path, e.what());
    }
    if (std::string(name) == "tokenizer_config.json" && parsed.is_object() && parsed.contains("chat_template")) {
      const auto& t = parsed["chat_template"];
      if (t.is_string()) {
        source.chat_template = t.get<std::string>();
      } else if (t.is_array()) {
        // Some checkpoints list named templates; the engine wants the default.
        for (const auto& named : t) {
          if (named.is_object() && named.value("name", "") == "default" && named.contains("template") &&
              named["template"].is_string()) {
            source.chat_template = named["template"].get<std::string>();
          }
        }
      }
    }
    source.tokenizer_files.emplace_back(name, std::move(bytes));
  }
  return source;
}

std::vector<std::string> source_parts(const Checkpoint& checkpoint, const std::string& tensor) {
  if (is_mxfp4(checkpoint, tensor)) return {mxfp4_packed_name(tensor), mxfp4_scale_name(tensor)};
  return {tensor};
}

namespace {

Checkpoint::Located located_or_fail(const Checkpoint& checkpoint, const std::string& name) {
  const auto located = checkpoint.find(name);
  if (!located) fail("{}: tensor {} missing", checkpoint.listing(), name);
  return *located;
}

// The stored tensors behind a weight, in the order they are read and summed:
// packed then scales (MXFP4), the weight then its block scales (fp8), or the weight.
std::vector<Checkpoint::Located> stored_parts(const Checkpoint& checkpoint, const std::string& tensor) {
  if (is_mxfp4(checkpoint, tensor)) {
    const auto packed = located_or_fail(checkpoint, mxfp4_packed_name(tensor));
    const auto scales = located_or_fail(checkpoint, mxfp4_scale_name(tensor));
    const uint64_t rows = packed.info->shape.at(0), cols = packed.info->shape.at(1) * 2;
    if (packed.info->dtype != DType::kU8 || scales.info->dtype != DType::kU8 ||
        scales.info->shape != std::vector<uint64_t>{rows, cols / kMxfp4Group}) {
      fail("{}: MXFP4 tensor {}: packed and scale tensors do not match", packed.file->name(), tensor);
    }
    return {packed, scales};
  }
  const auto located = located_or_fail(checkpoint, tensor);
  if (located.info->dtype == DType::kF8E4M3) return {located, located_or_fail(checkpoint, scale_name(tensor))};
  return {located};
}

// An fp8 weight times its 128×128 block scales; then every value checked finite.
void finish_weights(const Checkpoint::Located& weight, const std::vector<float>& block_scales, const std::string& tensor,
                    std::vector<float>& w) {
  if (weight.info->dtype == DType::kF8E4M3) {
    const auto& shape = weight.info->shape;
    const uint64_t rows = shape[0], cols = shape[1], block_cols = scale_shape(shape)[1];
    for (uint64_t r = 0; r < rows; ++r) {
      for (uint64_t c = 0; c < cols; ++c) w[r * cols + c] *= block_scales[(r / kFp8Block) * block_cols + c / kFp8Block];
    }
  }
  for (size_t i = 0; i < w.size(); ++i) {
    if (!std::isfinite(w[i])) fail("{}: tensor {}: non-finite value at element {}", weight.file->name(), tensor, i);
  }
}

std::vector<float> mxfp4_weights(const std::vector<Checkpoint::Located>& parts, const uint8_t* nibbles,
                                 const uint8_t* exponents, const std::string& tensor) {
  const uint64_t rows = parts[0].info->shape.at(0), cols = parts[0].info->shape.at(1) * 2;
  std::vector<float> w(rows * cols);
  decode_mxfp4(nibbles, exponents, rows, cols, tensor, w.data());
  return w;
}

}  // namespace

std::vector<float> read_weights(const Checkpoint& checkpoint, const std::string& tensor, uint32_t* crc) {
  const auto parts = stored_parts(checkpoint, tensor);
  if (is_mxfp4(checkpoint, tensor)) {
    std::vector<uint8_t> nibbles(parts[0].info->bytes), exponents(parts[1].info->bytes);
    parts[0].file->read_bytes(*parts[0].info, nibbles.data());
    parts[1].file->read_bytes(*parts[1].info, exponents.data());
    if (crc) *crc = crc32_bytes(exponents.data(), exponents.size(), crc32_bytes(nibbles.data(), nibbles.size(), *crc));
    return mxfp4_weights(parts, nibbles.data(), exponents.data(), tensor);
  }
  std::vector<float> w(parts[0].info->elements), block_scales;
  parts[0].file->read_f32(*parts[0].info, w.data(), crc);
  if (parts.size() > 1) {
    block_scales.resize(parts[1].info->elements);
    parts[1].file->read_f32(*parts[1].info, block_scales.data(), crc);
  }
  finish_weights(parts[0], block_scales, tensor, w);
  return w;
}

WeightBytes read_weight_bytes(const Checkpoint& checkpoint, const std::string& tensor) {
  WeightBytes bytes;
  for (const auto& part : stored_parts(checkpoint, tensor)) {
    if (part.info->dtype != DType::kU8 && !part.info->convertible())
      fail("{}: tensor {}: unsupported dtype {}", part.file->name(), part.info->name, part.info->dtype_name);
    bytes.parts.emplace_back(part.info->bytes);
    part.file->read_bytes(*part.info, bytes.parts.back().data());
  }
  return bytes;
}

uint32_t crc32_of(const WeightBytes& bytes, uint32_t running) {
  for (const auto& part : bytes.parts) running = crc32_bytes(part.data(), part.size(), running);
  return running;
}

void decode_weights_into(const Checkpoint& checkpoint, const std::string& tensor,
                         const WeightBytes& bytes, std::vector<float>& w) {
  const auto parts = stored_parts(checkpoint, tensor);
  if (bytes.parts.size() != parts.size()) fail("{}: tensor {}: held bytes do not match its parts", checkpoint.listing(), tensor);
  if (is_mxfp4(checkpoint, tensor)) {
    const uint64_t rows = parts[0].info->shape.at(0), cols = parts[0].info->shape.at(1) * 2;
    w.resize(rows * cols);
    decode_mxfp4(bytes.parts[0].data(), bytes.parts[1].data(), rows, cols, tensor, w.data());
    return;
  }
  std::vector<float> block_scales;
  w.resize(parts[0].info->elements);
  stored_to_f32(*parts[0].info, bytes.parts[0].data(), w.size(), w.data());
  if (parts.size() > 1) {
    block_scales.resize(parts[1].info->elements);
    stored_to_f32(*parts[1].info, bytes.parts[1].data(), block_scales.size(), block_scales.data());
  }
  finish_weights(parts[0], block_scales, tensor, w);
}

}  // namespace sluice::convert
