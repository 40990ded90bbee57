// compute/convert/container_writer.cpp: output-directory claims and the
// last steps of a container (see container_writer.h). The manifest is
// written only after every file it describes has its final name and size, so
// a directory without manifest.json is simply unfinished.
#include "compute/convert/container_writer.h"

#include <fmt/format.h>

#include <cstring>

#include "compute/convert/atomic_file.h"
#include "compute/tokenizer/tokenizer.h"
#include "proto/checksum.h"
#include "proto/error.h"
#include "proto/file_io.h"
#include "proto/manifest.h"
#include "proto/record_format.h"
#include "proto/rvq_decode.h"
#include "proto/trunk_format.h"

namespace sluice::convert {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

constexpr const char* kCompiledTokenizerFile = "tokenizer.bin";

bool is_container_file(const std::string& name) {
  return name == "manifest.json" || name == "trunk.bin" || name == "codebooks.bin" ||
         name == "tokenizer.json" || name == "tiktoken.model" || name == "tokenizer_config.json" ||
         name == kCompiledTokenizerFile ||
         (name.starts_with("experts-L") && name.ends_with(".bin")) || name.ends_with(".tmp");
}

// Removes what a producer writes (the manifest first, so the directory never
// looks complete while mixed) and nothing else.
void wipe(const fs::path& out, const std::string& work_dir) {
  fs::remove(out / "manifest.json");
  for (const auto& entry : fs::directory_iterator(out)) {
    if (entry.is_regular_file() && is_container_file(entry.path().filename().string()))
      fs::remove(entry.path());
  }
  fs::remove_all(out / work_dir);
}

// records_crc32 of a bank (FORMAT.md): it makes the manifest, and so the
// container identity, differ whenever any expert's content does.
uint32_t bank_records_crc32(const fs::path& bank, uint32_t experts, uint32_t stride) {
  const auto file = posix_file_system().open(bank.string(), OpenMode::kBuffered);
  std::vector<uint32_t> crcs;
  uint8_t header[kRecordHeaderBytes];
  for (uint32_t e = 0; e < experts; ++e) {
    read_exact(*file, uint64_t{e} * stride, header, sizeof header);
    crcs.push_back(RecordHeader::decode(header).crc32);
  }
  return records_digest(crcs);
}

// Reads each tensor back from trunk.bin, refuses a value the format does not
// allow (the same check every loader applies) and records its crc32.
Json trunk_tensors_json(const std::vector<TrunkEntry>& trunk, const fs::path& trunk_path) {
  const auto file = posix_file_system().open(trunk_path.string(), OpenMode::kBuffered);
  Json tensors = Json::array();
  for (const auto& t : trunk) {
    TrunkTensorInfo info = stored_geometry(t.plan);
    info.name = t.plan.name;
    info.shape = t.plan.shape;
    info.offset = t.offset;
    info.bytes = t.bytes;
    info.scale_offset = t.scale_offset;
    info.scale_bytes = t.scale_bytes;
    std::vector<uint8_t> data(t.bytes);
    std::vector<uint16_t> scales(t.scale_bytes / sizeof(uint16_t));
    read_exact(*file, t.offset, data.data(), data.size());
    if (t.scale_bytes != 0) read_exact(*file, t.scale_offset, scales.data(), t.scale_bytes);
    if (auto problem = trunk_values_problem(info, data.data(), scales.data())) {
      fail("{}: trunk tensor \"{}\": {}", trunk_path.string(), info.name, *problem);
    }
    tensors.push_back({{"name", t.plan.name},
                       {"format", trunk_format_name(t.plan.format)},
                       {"shape", t.plan.shape},
                       {"offset", t.offset},
                       {"bytes", t.bytes},
                       {"scale_offset", t.scale_offset},
                       {"scale_bytes", t.scale_bytes},
                       {"crc32", trunk_tensor_crc32(info, data.data(), scales.data())}});
  }
  return tensors;
}

using NamedFiles = std::vector<std::pair<std::string, std::string>>;

// The tokenizer files plus tokenizer.bin compiled from them (FORMAT.md), which
// loads in milliseconds where a large tokenizer.json takes a second. A
// tokenizer this build cannot load gets no compiled form: the container is
// written as before and loading it reports what is wrong.
NamedFiles with_compiled_tokenizer(const NamedFiles& files) {
  const std::string* json = nullptr;
  const std::string* ranks = nullptr;
  const std::string* config = nullptr;
  for (const auto& [name, bytes] : files) {
    if (name == "tokenizer.json") json = &bytes;
    if (name == "tiktoken.model") ranks = &bytes;
    if (name == "tokenizer_config.json") config = &bytes;
  }
  NamedFiles out = files;
  if (!json && !ranks) return out;
  const std::string_view config_text = config ? std::string_view(*config) : std::string_view();
  try {
    const tokenizer::Tokenizer tok =
        json ? tokenizer::Tokenizer::from_json(*json, "tokenizer.json", config_text, "tokenizer_config.json")
             : tokenizer::Tokenizer::from_tiktoken(*ranks, "tiktoken.model", config_text, "tokenizer_config.json");
    out.emplace_back(kCompiledTokenizerFile, tok.compile());
  } catch (const Error& e) {
    fmt::print(stderr, "warning: the tokenizer is stored without its compiled form: {}\n", e.what());
  }
  return out;
}

Json build_manifest(const ContainerParts& parts, const NamedFiles& tokenizer_files_in, uint32_t codebooks_crc32,
                    const fs::path& out) {
  const Json tensors = trunk_tensors_json(parts.trunk, out / "trunk.bin");
  Json layers = Json::array();
  for (const auto& layer : parts.moe_layers) {
    const RecordLayout layout = RecordLayout::compute(layer.hidden, layer.expert_width);
    const std::string file = bank_file_name(layer.layer);
    layers.push_back(
        {{"layer", layer.layer},
         {"file", file},
         {"experts", layer.experts},
         {"record_stride", layout.stride},
         {"bytes", uint64_t{layer.experts} * layout.stride},
         {"codebook_base", layer.codebook_base},
         {"hidden", layer.hidden},
         {"expert_width", layer.expert_width},
         {"records_crc32", bank_records_crc32(out / file, layer.experts, layout.stride)}});
  }
  Json tokenizer_files = Json::array(), tokenizer_crcs = Json::array();
  for (const auto& [name, bytes] : tokenizer_files_in) {
    tokenizer_files.push_back(name);
    tokenizer_crcs.push_back(crc32_bytes(bytes.data(), bytes.size()));
  }
  const uint64_t codebook_count = parts.moe_layers.size() * kCodebooksPerLayer;
  Json manifest{
      {"format", "sluice"},
      {"format_version", kContainerFormatVersion},
      {"arch", parts.arch},
      {"config", parts.config},
      {"source", parts.source},
      {"expert_quant",
       {{"method", "rvq"},
        {"stages", kRvqStages},
        {"entries", kRvqEntries},
        {"vec_dim", kRvqVecDim},
        {"index_bits", kRvqCodeBits},
        {"bits_per_weight", 3.0},
        {"row_block", kRowBlock},
        {"index_layout", kRvqIndexLayout},
        {"scale", "f16_row_absmax"},
        {"codebook_sharing", "layer.matrix.stage"},
        {"kmeans", parts.kmeans}}},
      {"trunk", {{"file", "trunk.bin"}, {"bytes", parts.trunk_bytes}, {"tensors", tensors}}},
      {"codebooks",
       {{"file", "codebooks.bin"},
        {"bytes", codebook_count * kCodebookBytes},
        {"count", codebook_count},
        {"crc32", codebooks_crc32}}},
      {"moe_layers", layers},
      {"tokenizer",
       {{"files", tokenizer_files},
        {"crc32", tokenizer_crcs},
        {"chat_template", parts.chat_template}}},
  };
  manifest["manifest_crc32"] = manifest_crc32(nlohmann::json::parse(manifest.dump()));
  return manifest;
}

}  // namespace

std::string layer_tag(uint32_t layer) {
  return fmt::format("L{:03}", layer);
}

std::optional<Json> read_json_file(const fs::path& path) {
  try {
    return Json::parse(read_small_file(posix_file_system(), path.string(), 64ull << 20));
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

namespace {

// A fresh run's work directory, holding the state a resume compares with.
Start start_fresh(const fs::path& out, const std::string& work_dir, const Json& state) {
  fs::create_directories(out / work_dir);
  write_file_atomically((out / work_dir / "state.json").string(), state.dump(2));
  return Start::kFresh;
}

// Whether the manifest stores its LM head (if it has one) as `state` asks.
bool same_lm_head_format(const Json& manifest, const Json& state) {
  const Json tensors = manifest.value("trunk", Json::object()).value("tensors", Json::array());
  if (!tensors.is_array()) return false;
  for (const Json& tensor : tensors) {
    const std::string name = tensor.is_object() ? tensor.value("name", "") : "";
    if (name.ends_with("lm_head.weight"))
      return tensor.value("format", Json()) == state["lm_head_format"];
  }
  return true;  // a tied head: the embeddings' format is not a parameter
}

}  // namespace

Start prepare_output(const fs::path& out, const std::string& work_dir, const Json& state,
                     bool force) {
  if (!fs::exists(out)) return start_fresh(out, work_dir, state);
  if (!fs::is_directory(out)) fail("{}: exists and is not a directory", out.string());
  const fs::path manifest_path = out / "manifest.json";
  const fs::path state_path = out / work_dir / "state.json";
  std::string problem;
  if (fs::exists(manifest_path)) {
    const auto manifest = read_json_file(manifest_path);
    const bool readable = manifest && manifest->is_object();
    const Json version = readable ? manifest->value("format_version", Json()) : Json();
    // An older format's container is never complete for this build, however
    // the rest of it matches: its records would be read in the wrong layout.
    const bool same = readable && version == kContainerFormatVersion &&
                      manifest->value("source", Json()) == state["source"] &&
                      manifest->value("expert_quant", Json::object()).value("kmeans", Json()) ==
                          state["kmeans"] &&
                      same_lm_head_format(*manifest, state);
    if (same && !force) {
      fs::remove_all(out / work_dir);
      return Start::kComplete;
    }
    problem = readable && version != kContainerFormatVersion
                  ? fmt::format("holds a container of format_version {} (this build writes {})",
                                version.dump(), kContainerFormatVersion)
                  : "holds a finished container from a different source or with different "
                    "parameters";
  } else if (fs::exists(state_path)) {
    const auto previous = read_json_file(state_path);
    if (previous && *previous == state && !force) return Start::kResume;
    problem = "holds an unfinished run of a different source or with different parameters";
  } else if (fs::is_empty(out)) {
    return start_fresh(out, work_dir, state);
  } else {
    problem = "is not empty and holds no conversion state";
  }
  if (!force && !problem.empty()) fail("{}: {}; use --force to start over", out.string(), problem);
  wipe(out, work_dir);
  return start_fresh(out, work_dir, state);
}

void check_size(const fs::path& path, uint64_t expected) {
  std::error_code ec;
  const uint64_t found = fs::file_size(path, ec);
  if (ec || found != expected) {
    fail("{}: {} (expected {} bytes); rerun with --force to start over", path.string(),
         ec ? "missing" : fmt::format("{} bytes", found), expected);
  }
}

uint64_t directory_bytes(const fs::path& out) {
  uint64_t total = 0;
  for (const auto& entry : fs::directory_iterator(out)) {
    if (entry.is_regular_file()) total += entry.file_size();
  }
  return total;
}

CodebooksWriter::CodebooksWriter(const fs::path& out) : file_((out / kCodebooksFile).string()) {}

void CodebooksWriter::append_layer(uint32_t layer, std::string_view bytes,
                                   const std::string& where) {
  if (bytes.size() != kCodebooksPerLayer * kCodebookBytes) {
    fail("{}: layer {}: {} bytes of codebooks, expected {}", where, layer, bytes.size(),
         kCodebooksPerLayer * kCodebookBytes);
  }
  std::vector<float> values(bytes.size() / sizeof(float));
  std::memcpy(values.data(), bytes.data(), bytes.size());
  if (auto problem = codebook_values_problem(values.data(), kCodebooksPerLayer)) {
    fail("{}: layer {}: {}", where, layer, *problem);
  }
  file_.append(bytes.data(), bytes.size());
  crc32_ = crc32_bytes(bytes.data(), bytes.size(), crc32_);
}

uint32_t CodebooksWriter::commit() {
  file_.commit();
  return crc32_;
}

void finish_container(const ContainerParts& parts, uint32_t codebooks_crc32, const fs::path& out) {
  const NamedFiles tokenizer_files = with_compiled_tokenizer(parts.tokenizer_files);
  for (const auto& [name, bytes] : tokenizer_files) write_file_atomically((out / name).string(), bytes);
  check_size(out / kTrunkFile, parts.trunk_bytes);
  check_size(out / kCodebooksFile, parts.moe_layers.size() * kCodebooksPerLayer * kCodebookBytes);
  for (const auto& layer : parts.moe_layers) {
    const RecordLayout layout = RecordLayout::compute(layer.hidden, layer.expert_width);
    check_size(out / bank_file_name(layer.layer), uint64_t{layer.experts} * layout.stride);
  }
  write_file_atomically((out / kManifestFile).string(),
                        build_manifest(parts, tokenizer_files, codebooks_crc32, out).dump(2) + "\n");
}

}  // namespace sluice::convert
