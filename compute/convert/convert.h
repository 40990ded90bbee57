// compute/convert/convert.h: the converter's public surface: Hugging Face
// checkpoint directory → sluice container, format 2 (proto/FORMAT.md). Other rooms
// call only what is declared here. A run that fails or is killed never
// leaves a manifest.json, so its output never looks complete.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "proto/tensor_inventory.h"

namespace sluice::convert {

struct ConvertOptions {
  std::string source_dir;
  std::string output_dir;
  int threads = 1;                // results never depend on it
  uint64_t seed = 1234;
  uint64_t kmeans_sample = 65536; // vectors per (layer, matrix kind)
  int kmeans_iterations = 12;
  bool force = false;             // start over instead of refusing foreign state
  TrunkFormat lm_head_format = kDefaultLmHeadFormat;  // --head-quant
};

// The LM head's format named by a --head-quant value, "q4", "q6" or "q8";
// any other value is an Error naming the flag.
TrunkFormat parse_head_quant(const std::string& value);
// --head-quant's help, for `convert` and `synth` alike.
inline constexpr const char* kHeadQuantHelp =
    "how the LM head is stored: q8 (q8g128), q6 (q6g128: three quarters of q8's bytes per token, "
    "+0.2% perplexity on the demo model) or q4 (q4g128: half, +2% perplexity)";

// Receives progress from the converter. advance() is called from worker
// threads; implementations must be thread-safe.
class ConvertProgress {
 public:
  virtual ~ConvertProgress() = default;
  virtual void start(uint64_t total_weights) = 0;
  virtual void phase(const std::string& what) = 0;
  virtual void advance(uint64_t weights) = 0;
  virtual void finish() = 0;
  // A one-off remark for the user (something skipped on purpose).
  virtual void note(const std::string& /*what*/) {}
};

// Progress on stderr: a redrawn bar with ETA when stderr is a terminal, a
// plain line every few seconds otherwise, naming `program` ("sluice convert: ...");
// nothing when quiet.
std::unique_ptr<ConvertProgress> make_stderr_progress(bool quiet, const std::string& program = "convert");

// Converts (or resumes converting) and returns the run summary: weights,
// seconds, weights_per_second, container_bytes, relative errors per matrix
// kind and per layer. Throws sluice::Error naming the file, tensor or flag
// at fault.
nlohmann::ordered_json convert_checkpoint(const ConvertOptions& options, ConvertProgress& progress);

}  // namespace sluice::convert
