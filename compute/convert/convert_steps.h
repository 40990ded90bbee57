// compute/convert/convert_steps.h: the converter's internal steps, shared
// by converter.cpp and the tests; not part of the room's public surface.
// Each step either completes its output file or leaves only a .tmp behind.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "compute/convert/convert.h"
#include "compute/convert/error_sums.h"
#include "compute/convert/expert_record.h"
#include "compute/convert/model_plan.h"
#include "compute/convert/safetensors.h"

namespace sluice::convert {

// Everything taken from the source directory, checked before any output is
// written: config, plan, every needed tensor's presence, shape and dtype,
// tokenizer files.
struct Source {
  std::string dir;
  nlohmann::ordered_json config;
  ModelPlan plan;
  Checkpoint checkpoint;
  nlohmann::ordered_json identity;  // manifest "source"
  std::vector<std::pair<std::string, std::string>> tokenizer_files;  // name, bytes
  nlohmann::ordered_json chat_template;                               // string or null
  // Source tensors the model does not run (multi-token prediction layers).
  uint64_t skipped_tensors = 0;
  uint64_t unrun_tensors = 0;  // K3's vision tower when the config has no vision_config
};
Source open_source(FileSystem& fs, const std::string& dir);

// Reads a tensor as f32, refusing NaN or infinite values by tensor name. An
// fp8 tensor is multiplied by its 128×128 block scales (`…_scale_inv`).
// With `crc`, continues that crc32 over the stored bytes read, in the order
// source_crc32 (converter.cpp) sums them.
std::vector<float> read_weights(const Checkpoint& checkpoint, const std::string& tensor, uint32_t* crc = nullptr);

// A weight's stored bytes (each stored part: MXFP4's packed and scales, or an
// fp8 weight and its block scales), read once so that a layer is sampled and
// encoded from memory rather than read twice.
struct WeightBytes {
  std::vector<std::vector<uint8_t>> parts;
};
WeightBytes read_weight_bytes(const Checkpoint& checkpoint, const std::string& tensor);
uint32_t crc32_of(const WeightBytes& bytes, uint32_t running);
// What read_weights would return, from bytes read_weight_bytes gave, into
// `w`, whose storage is reused when large enough.
void decode_weights_into(const Checkpoint& checkpoint, const std::string& tensor,
                         const WeightBytes& bytes, std::vector<float>& w);
// The stored tensors a weight is read from: itself, or an MXFP4 weight's packed and scale tensors.
std::vector<std::string> source_parts(const Checkpoint& checkpoint, const std::string& tensor);

struct TrunkEntry {
  TrunkTensorPlan plan;
  uint64_t offset = 0, bytes = 0, scale_offset = 0, scale_bytes = 0;
};
// Places every trunk tensor on a 64-byte boundary; `total` gets the file size.
std::vector<TrunkEntry> layout_trunk(const ModelPlan& plan, uint64_t& total);
// Where trunk.bin's values come from, as f32 rows of a tensor's stored
// geometry (rows of its last dimension): a checkpoint, or `sluice synth`'s
// generator. write_trunk calls begin() once per tensor, in container order,
// then rows() for fixed chunks of rows from several threads at once.
class TrunkValues {
 public:
  virtual ~TrunkValues() = default;
  virtual void begin(const TrunkTensorPlan& tensor) = 0;
  // Rows [first, last) into `out`, (last - first) × cols values.
  virtual void rows(const TrunkTensorPlan& tensor, uint64_t first, uint64_t last, float* out) = 0;
};

// A checkpoint's tensors (read_weights: checked finite, fp8 dequantized).
class CheckpointTrunkValues final : public TrunkValues {
 public:
  explicit CheckpointTrunkValues(const Checkpoint& checkpoint) : checkpoint_(checkpoint) {}
  void begin(const TrunkTensorPlan& tensor) override;
  void rows(const TrunkTensorPlan& tensor, uint64_t first, uint64_t last, float* out) override;
  // crc32 of the stored bytes of every tensor begun so far, in order.
  uint32_t source_crc32() const { return crc_; }

 private:
  const Checkpoint& checkpoint_;
  std::vector<float> current_;
  uint32_t crc_ = 0;
};

// Writes trunk.bin, quantizing chunk by chunk (the bytes are the same for
// any thread count); returns the relative-error sums of the tensors of
// each grouped format it wrote.
std::map<TrunkFormat, ErrorSums> write_trunk(TrunkValues& values, const std::vector<TrunkEntry>& entries,
                                             uint64_t total, const std::string& path, int threads,
                                             ConvertProgress& progress);

// Reads the layer's source bytes once (holding them until each expert is
// encoded), samples, trains the layer's codebooks (one per matrix kind and
// stage), writes them to `codebook_path`, then encodes every expert into
// `bank_path`. Returns per-kind error sums; `source_crc32` gets the crc32 of
// the bytes read, in expert and matrix order.
std::array<ErrorSums, 3> convert_layer(const Checkpoint& checkpoint, const ModelConfig& config, const MoeLayerPlan& layer,
                                       const ConvertOptions& options, const std::string& codebook_path,
                                       const std::string& bank_path, ConvertProgress& progress,
                                       uint32_t& source_crc32);

// The sample of one layer's vector positions for one matrix kind: sorted,
// distinct indices into [0, total), all of them when total <= wanted.
std::vector<uint64_t> sample_positions(uint64_t total, uint64_t wanted, uint64_t seed);

}  // namespace sluice::convert
