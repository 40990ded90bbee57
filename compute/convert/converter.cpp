// compute/convert/converter.cpp: runs a conversion end to end and makes it
// resumable. Work state lives in OUT/.convert/ (state.json naming the source
// and parameters; per piece, trunk or layer, its error sums and the crc32 of
// the source tensor bytes it was made from, so a resume redoes a piece whose
// source changed); every output file is renamed into place only when
// complete, and manifest.json comes last, so a container without a manifest
// is simply unfinished.
#include <chrono>
#include <filesystem>
#include <optional>
#include <thread>

#include <fmt/format.h>

#include "compute/convert/atomic_file.h"
#include "compute/convert/codebook.h"
#include "compute/convert/container_writer.h"
#include "compute/convert/convert_steps.h"
#include "proto/error.h"
#include "proto/file_io.h"
#include "proto/manifest.h"
#include "proto/record_format.h"

namespace sluice::convert {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using Json = nlohmann::ordered_json;

constexpr const char* kWorkDir = ".convert";
constexpr const char* kKindNames[] = {"gate", "up", "down"};

// crc32 of the stored bytes of `names`, in order: headers and sizes say
// nothing about values, so this is what tells a resumed source is unchanged.
// An fp8 weight's block scales, and an MXFP4 weight's scales, are part of its value.
uint32_t source_crc32(const Checkpoint& checkpoint, const std::vector<std::string>& names) {
  uint32_t running = 0;
  for (const std::string& weight : names) {
    for (const std::string& name : source_parts(checkpoint, weight)) {
      const auto located = checkpoint.find(name);
      if (!located) fail("tensor {} is missing from the checkpoint", name);
      running = located->file->bytes_crc32(*located->info, running);
      if (located->info->dtype != DType::kF8E4M3) continue;
      const auto scales = checkpoint.find(name + "_scale_inv");  // open_source checked it exists
      running = scales->file->bytes_crc32(*scales->info, running);
    }
  }
  return running;
}

// In trunk.bin's order, the order write_trunk reads them in.
std::vector<std::string> trunk_source_names(const std::vector<TrunkEntry>& trunk) {
  std::vector<std::string> names;
  for (const auto& t : trunk) names.push_back(t.plan.name);
  return names;
}

std::vector<std::string> layer_source_names(const ModelConfig& config, const MoeLayerPlan& layer) {
  std::vector<std::string> names;
  for (uint32_t e = 0; e < layer.experts; ++e) {
    for (const MatrixKind kind : kMatrixKinds) names.push_back(expert_tensor_name(config, layer.layer, e, kind));
  }
  return names;
}

// On resume: keeps a finished piece only when its recorded source crc32 is
// that of the source now; otherwise removes its state, says so, and the
// piece is converted again.
bool still_current(const fs::path& stats_path, uint32_t source_now, const std::string& piece) {
  if (!fs::exists(stats_path)) return false;
  const auto stats = read_json_file(stats_path);
  const bool same = stats && stats->is_object() && stats->contains("source_crc32") &&
                    (*stats)["source_crc32"].is_number_unsigned() &&
                    (*stats)["source_crc32"].get<uint64_t>() == source_now;
  if (same) return true;
  fmt::print(stderr, "sluice convert: {}: the source tensors changed since the interrupted run; converting it again\n",
             piece);
  fs::remove(stats_path);
  return false;
}

Json sums_json(const ErrorSums& sums) { return Json::array({sums.error, sums.norm}); }
ErrorSums sums_from(const Json& json) {
  ErrorSums sums;
  if (json.is_array() && json.size() == 2 && json[0].is_number() && json[1].is_number()) {
    sums.error = json[0].get<double>();
    sums.norm = json[1].get<double>();
  }
  return sums;
}

Json run_conversion(const ConvertOptions& options, ConvertProgress& progress) {
  if (options.threads < 1) fail("--threads must be at least 1 (got {})", options.threads);
  if (options.kmeans_iterations < 1) fail("--kmeans-iters must be at least 1 (got {})", options.kmeans_iterations);
  if (options.kmeans_sample < kRvqEntries) {
    fail("--kmeans-sample must be at least {} (got {})", kRvqEntries, options.kmeans_sample);
  }
  const auto started = Clock::now();
  const Source source = open_source(posix_file_system(), options.source_dir);
  ModelPlan plan = source.plan;
  set_lm_head_format(plan.trunk, options.lm_head_format);
  const fs::path out(options.output_dir), work = out / kWorkDir;
  const Json kmeans{{"seed", options.seed}, {"sample_vectors", options.kmeans_sample},
                    {"iterations", options.kmeans_iterations}, {"init", "kmeans++"}};
  const Json state{{"format", "sluice-convert-state"},
                   {"format_version", kContainerFormatVersion},
                   {"source", source.identity},
                   {"kmeans", kmeans},
                   {"lm_head_format", trunk_format_name(options.lm_head_format)}};

  Json summary{{"source", options.source_dir}, {"output", options.output_dir}, {"arch", plan.arch},
               {"threads", options.threads}, {"search", kernels::isa_name(search_isa())}};
  if (source.skipped_tensors > 0) {
    summary["skipped_tensors"] = source.skipped_tensors;
    progress.note(fmt::format("skipping {} tensors of the multi-token-prediction layer{} (not run by sluice)",
                              source.skipped_tensors, plan.config.skipped_source_layers > 1 ? "s" : ""));
  }
  if (source.unrun_tensors > 0) {
    summary["skipped_vision_tensors"] = source.unrun_tensors;
    progress.note(fmt::format("skipping {} tensors of the vision tower and projector (the config has no vision_config)",
                              source.unrun_tensors));
  }
  const Start start = prepare_output(out, kWorkDir, state, options.force);
  if (start == Start::kComplete) {
    summary["already_complete"] = true;
    summary["container_bytes"] = directory_bytes(out);
    return summary;
  }

  uint64_t trunk_bytes = 0;
  const std::vector<TrunkEntry> trunk = layout_trunk(plan, trunk_bytes);
  // Only a piece finished by an earlier run has its source summed up front
  // (to tell whether it changed); the rest are summed as they are converted,
  // so each source byte is read once.
  Json restarted = Json::array();
  const fs::path trunk_stats_path = work / "trunk.json";
  const bool trunk_done =
      fs::exists(trunk_stats_path) &&
      still_current(trunk_stats_path, source_crc32(source.checkpoint, trunk_source_names(trunk)), "the trunk");
  if (start == Start::kResume && !trunk_done && fs::exists(out / "trunk.bin")) restarted.push_back("trunk");
  for (const auto& layer : plan.moe_layers) {
    const fs::path stats_path = work / fmt::format("layer-{}.json", layer_tag(layer.layer));
    if (fs::exists(stats_path) &&
        !still_current(stats_path, source_crc32(source.checkpoint, layer_source_names(plan.config, layer)),
                       fmt::format("layer {}", layer.layer))) {
      restarted.push_back(layer.layer);
    }
  }
  uint64_t remaining = 0;
  if (!trunk_done) {
    for (const auto& t : trunk) {
      uint64_t n = 1;
      for (uint64_t d : t.plan.shape) n *= d;
      remaining += n;
    }
  }
  for (const auto& layer : plan.moe_layers) {
    if (!fs::exists(work / fmt::format("layer-{}.json", layer_tag(layer.layer)))) {
      remaining += uint64_t{layer.experts} * 3 * layer.hidden * layer.expert_width;
    }
  }
  progress.start(remaining);

  if (!trunk_done) {
    progress.phase("trunk");
    CheckpointTrunkValues values(source.checkpoint);
    const auto errors = write_trunk(values, trunk, trunk_bytes, (out / "trunk.bin").string(), options.threads, progress);
    Json stats{{"source_crc32", values.source_crc32()}};
    for (const auto& [format, sums] : errors) stats[trunk_format_name(format)] = sums_json(sums);
    write_file_atomically((work / "trunk.json").string(), stats.dump());
  }
  const auto trunk_stats = read_json_file(work / "trunk.json");
  if (!trunk_stats || !trunk_stats->is_object()) fail("{}: unreadable; rerun with --force to start over", (work / "trunk.json").string());
  Json layer_summaries = Json::array();
  std::array<ErrorSums, 3> kind_totals{};
  uint64_t resumed_layers = 0;
  for (size_t index = 0; index < plan.moe_layers.size(); ++index) {
    const auto& layer = plan.moe_layers[index];
    const std::string tag = layer_tag(layer.layer);
    const fs::path stats_path = work / fmt::format("layer-{}.json", tag);
    bool resumed = true;
    if (!fs::exists(stats_path)) {
      resumed = false;
      uint32_t layer_source = 0;
      const auto errors = convert_layer(source.checkpoint, plan.config, layer, options, (work / fmt::format("codebooks-{}.bin", tag)).string(),
                                        (out / bank_file_name(layer.layer)).string(), progress, layer_source);
      Json stats;
      for (int k = 0; k < 3; ++k) stats[kKindNames[k]] = sums_json(errors[k]);
      stats["source_crc32"] = layer_source;
      write_file_atomically(stats_path.string(), stats.dump());
    }
    resumed_layers += resumed;
    const auto stats = read_json_file(stats_path);
    if (!stats || !stats->is_object()) fail("{}: unreadable; rerun with --force to start over", stats_path.string());
    Json entry{{"layer", layer.layer}, {"resumed", resumed}};
    for (int k = 0; k < 3; ++k) {
      const ErrorSums sums = sums_from(stats->value(kKindNames[k], Json()));
      kind_totals[k].add(sums);
      entry[kKindNames[k]] = sums.relative();
    }
    layer_summaries.push_back(entry);
  }

  progress.phase("manifest");
  CodebooksWriter codebooks(out);
  for (const auto& layer : plan.moe_layers) {
    const fs::path part = work / fmt::format("codebooks-{}.bin", layer_tag(layer.layer));
    check_size(part, kCodebooksPerLayer * kCodebookBytes);
    codebooks.append_layer(layer.layer, read_small_file(posix_file_system(), part.string(), kCodebooksPerLayer * kCodebookBytes),
                           part.string());
  }
  const uint32_t codebooks_crc32 = codebooks.commit();
  finish_container({.arch = plan.arch, .config = source.config, .source = source.identity, .kmeans = kmeans,
                    .trunk = trunk, .trunk_bytes = trunk_bytes, .moe_layers = plan.moe_layers,
                    .tokenizer_files = source.tokenizer_files, .chat_template = source.chat_template},
                   codebooks_crc32, out);
  fs::remove_all(work);
  progress.finish();

  const double seconds = std::chrono::duration<double>(Clock::now() - started).count();
  summary["already_complete"] = false;
  summary["weights"] = remaining;
  summary["seconds"] = seconds;
  summary["weights_per_second"] = seconds > 0 ? static_cast<double>(remaining) / seconds : 0.0;
  summary["container_bytes"] = directory_bytes(out);
  // Every byte read from the safetensors files (headers included) against
  // their size: 1.0 plus the headers and the tensors a model does not run.
  summary["source_bytes"] = source.checkpoint.bytes();
  summary["source_bytes_read"] = source.checkpoint.bytes_read();
  summary["resumed_layers"] = resumed_layers;
  summary["restarted"] = restarted;  // pieces redone because their source changed
  ErrorSums all;
  Json relative;
  for (int k = 0; k < 3; ++k) {
    relative[kKindNames[k]] = kind_totals[k].relative();
    all.add(kind_totals[k]);
  }
  relative["experts"] = all.relative();
  summary["relative_error"] = relative;
  summary["layers"] = layer_summaries;
  Json trunk_relative = Json::object();
  for (const TrunkFormat format : {TrunkFormat::kQ8G128, TrunkFormat::kQ6G128, TrunkFormat::kQ4G128}) {
    if (trunk_stats->contains(trunk_format_name(format)))
      trunk_relative[trunk_format_name(format)] = sums_from((*trunk_stats)[trunk_format_name(format)]).relative();
  }
  summary["trunk_relative_error"] = trunk_relative;
  return summary;
}

}  // namespace

TrunkFormat parse_head_quant(const std::string& value) {
  if (value == "q4") return TrunkFormat::kQ4G128;
  if (value == "q6") return TrunkFormat::kQ6G128;
  if (value == "q8") return TrunkFormat::kQ8G128;
  fail("--head-quant {}: expected q4, q6 or q8", value);
}

Json convert_checkpoint(const ConvertOptions& options, ConvertProgress& progress) {
  try {
    return run_conversion(options, progress);
  } catch (const fs::filesystem_error& e) {
    fail("{}", e.what());  // names the path; reaches the user as one line
  }
}

}  // namespace sluice::convert
