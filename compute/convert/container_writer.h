// compute/convert/container_writer.h: the writing path every container
// producer shares (`sluice convert` and `sluice synth`): claiming or resuming
// the output directory, the codebooks file, and finishing the container with
// manifest.json last, carrying every checksum FORMAT.md lists. It never
// decides what a tensor, codebook or record holds.
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "compute/convert/atomic_file.h"
#include "compute/convert/convert_steps.h"

namespace sluice::convert {

enum class Start { kFresh, kResume, kComplete };

// "L007": the tag of a layer's work files.
std::string layer_tag(uint32_t layer);
// A JSON file of the work state, or nothing when absent or unreadable.
std::optional<nlohmann::ordered_json> read_json_file(const std::filesystem::path& path);

// Claims `out` for a run whose parameters are `state` (its "source",
// "kmeans" and "lm_head_format" are what a finished manifest is compared
// with, the last against the stored format of the LM head; the whole of it is
// compared with `work_dir`/state.json). A finished container of this build's
// format_version and the same state is kComplete (the work directory is
// removed); an unfinished run of the same state is kResume; an empty or new
// directory is kFresh, with the work directory made and its state.json
// written. Anything else is refused naming `out` (a container of another
// format_version by its version), unless `force`, which wipes what a
// producer writes (manifest first) and starts fresh.
Start prepare_output(const std::filesystem::path& out, const std::string& work_dir,
                     const nlohmann::ordered_json& state, bool force);

// Refuses a file of another size, naming it.
void check_size(const std::filesystem::path& path, uint64_t expected);
uint64_t directory_bytes(const std::filesystem::path& out);

// codebooks.bin assembled layer by layer, each layer's codebooks checked
// against the reader's bounds before they are appended.
class CodebooksWriter {
 public:
  explicit CodebooksWriter(const std::filesystem::path& out);
  // `bytes` holds the kCodebooksPerLayer codebooks of `layer`; `where` names
  // their origin in errors.
  void append_layer(uint32_t layer, std::string_view bytes, const std::string& where);
  uint32_t commit();  // returns the crc32 of the whole file

 private:
  AtomicFile file_;
  uint32_t crc32_ = 0;
};

// What the manifest says beyond the files: the producer's identity.
struct ContainerParts {
  std::string arch;
  nlohmann::ordered_json config;  // config.json, verbatim
  nlohmann::ordered_json source;  // manifest "source"
  nlohmann::ordered_json kmeans;  // manifest expert_quant.kmeans (null when no k-means ran)
  std::vector<TrunkEntry> trunk;
  uint64_t trunk_bytes = 0;
  std::vector<MoeLayerPlan> moe_layers;
  std::vector<std::pair<std::string, std::string>> tokenizer_files;  // name, bytes
  nlohmann::ordered_json chat_template;                              // string or null
};

// With trunk.bin, codebooks.bin and every bank already in place: writes the
// tokenizer files, checks each file's size, reads the trunk back (refusing a
// value the format does not allow) and the record headers for their crc32s,
// and writes manifest.json last.
void finish_container(const ContainerParts& parts, uint32_t codebooks_crc32,
                      const std::filesystem::path& out);

}  // namespace sluice::convert
