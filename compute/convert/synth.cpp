// compute/convert/synth.cpp: `sluice synth` end to end. The shape table
// gives the config; the family spec's inventory gives every tensor and bank;
// trunk.bin goes through the converter's trunk writer, the banks are written
// record by record, and container_writer.h finishes the container. Work
// state lives in OUT/.synth/; each file appears under its final name only
// when complete, so a resume keeps every file of the right size and redoes
// the rest. It never trains anything.
#include "compute/convert/synth.h"

#include <fmt/format.h>

#include <chrono>
#include <filesystem>
#include <optional>
#include <thread>

#include "compute/convert/container_writer.h"
#include "compute/convert/model_plan.h"
#include "compute/convert/parallel.h"
#include "compute/convert/synth_shapes.h"
#include "compute/convert/synth_values.h"
#include "proto/error.h"
#include "proto/manifest.h"

namespace sluice::convert {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using Json = nlohmann::ordered_json;

constexpr const char* kWorkDir = ".synth";
// Bumped whenever the generators change what a seed produces.
constexpr uint32_t kGeneratorVersion = 1;

Json shape_json(const std::string& name) {
  for (const ShapeText& shape : shape_texts()) {
    if (name == shape.name) return Json::parse(shape.json);
  }
  fail("unknown shape \"{}\" (known: {})", name, fmt::join(synth_shape_names(), ", "));
}

uint32_t config_count(const Json& config, const std::string& key, const std::string& shape) {
  if (!config.contains(key) || !config[key].is_number_unsigned())
    fail("shape {}: config has no count {}", shape, key);
  return config[key].get<uint32_t>();
}

// A dotted path ("linear_attn_config.kda_layers") inside the config.
Json* find_path(Json& config, const std::string& path) {
  Json* node = &config;
  size_t start = 0;
  while (node != nullptr) {
    const size_t dot = path.find('.', start);
    const std::string key =
        path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (!node->is_object() || !node->contains(key)) return nullptr;
    node = &(*node)[key];
    if (dot == std::string::npos) return node;
    start = dot + 1;
  }
  return nullptr;
}

void cut_layers(Json& config, const Json& shape, uint32_t layers, const std::string& name) {
  const uint32_t total = config_count(config, "num_hidden_layers", name);
  if (layers > total) fail("--layers {} is more than the {} layers of {}", layers, total, name);
  config["num_hidden_layers"] = layers;
  for (const auto& list : shape.value("layer_lists", Json::array())) {
    const std::string key = list.value("key", "");
    const int64_t base = list.value("base", 0);
    Json* values = find_path(config, key);
    if (values == nullptr || !values->is_array())
      fail("shape {}: layer list {} is not in its config", name, key);
    Json kept = Json::array();
    for (const auto& v : *values) {
      if (v.is_number_integer() && v.get<int64_t>() - base < int64_t{layers}) kept.push_back(v);
    }
    *values = kept;
  }
}

void cut_experts(Json& config, const Json& shape, uint32_t experts, const std::string& name) {
  const std::string experts_key = shape.value("experts_key", ""),
                    top_k_key = shape.value("top_k_key", "");
  const uint32_t total = config_count(config, experts_key, name);
  if (experts > total)
    fail("--experts {} is more than the {} experts per layer of {}", experts, total, name);
  config[experts_key] = experts;
  if (config_count(config, top_k_key, name) > experts) config[top_k_key] = experts;
}

// Token ids past the cut vocabulary move to its last id, in the LM's config
// and (Kimi K3's media placeholder) the outer one.
void cut_vocab(Json& config, Json& lm, uint32_t vocab, const std::string& name) {
  const uint32_t total = config_count(lm, "vocab_size", name);
  if (vocab > total) fail("--vocab {} is more than the vocabulary of {} ({})", vocab, name, total);
  lm["vocab_size"] = vocab;
  const auto clamp = [&](Json& id) {
    if (id.is_number_unsigned() && id.get<uint64_t>() >= vocab) id = vocab - 1;
  };
  for (Json* level : {&config, &lm}) {
    for (auto& [key, value] : level->items()) {
      if (!key.ends_with("_token_id")) continue;
      if (value.is_array()) {
        for (auto& id : value) clamp(id);
      } else {
        clamp(value);
      }
    }
  }
}

ModelPlan plan_of(const SynthOptions& options, const Json& config) {
  ModelPlan plan = plan_model(config, fmt::format("shape {}", options.shape));
  if (plan.moe_layers.empty()) {
    fail("--layers {} keeps no MoE layer of {} (its first layers are dense); keep more layers",
         options.layers, options.shape);
  }
  return plan;
}

uint64_t bank_bytes(const MoeLayerPlan& layer) {
  return uint64_t{layer.experts} * RecordLayout::compute(layer.hidden, layer.expert_width).stride;
}

bool has_size(const fs::path& path, uint64_t bytes) {
  std::error_code ec;
  return fs::file_size(path, ec) == bytes && !ec;
}

void write_bank(const MoeLayerPlan& layer, const SynthOptions& options, const fs::path& path,
                ConvertProgress& progress) {
  const RecordLayout layout = RecordLayout::compute(layer.hidden, layer.expert_width);
  AtomicFile bank(path.string());
  parallel_for(layer.experts, options.threads, [&](size_t e) {
    std::vector<uint8_t> record(layout.stride);
    synth_expert_record(layout, options.seed, layer.layer, static_cast<uint32_t>(e),
                        layer.codebook_base, record.data(),
                        options.fit_routing ? kResidualScale : 1.0f);
    bank.write_at(uint64_t{e} * layout.stride, record.data(), record.size());
    progress.advance(uint64_t{3} * layer.hidden * layer.expert_width);
  });
  bank.commit();
}

}  // namespace

std::vector<std::string> synth_shape_names() {
  std::vector<std::string> names;
  for (const ShapeText& shape : shape_texts()) names.emplace_back(shape.name);
  return names;
}

Json synth_config(const SynthOptions& options) {
  const Json shape = shape_json(options.shape);
  Json config = shape["config"];
  // The LM's keys, nested for models with a vision tower (Kimi K3's text_config).
  const std::string text_key = shape.value("text_config_key", "");
  if (!text_key.empty() && !(config.contains(text_key) && config[text_key].is_object()))
    fail("shape {}: config has no object {}", options.shape, text_key);
  Json& lm = text_key.empty() ? config : config[text_key];
  if (options.layers > 0) cut_layers(lm, shape, options.layers, options.shape);
  if (options.experts > 0) cut_experts(lm, shape, options.experts, options.shape);
  if (options.vocab > 0) cut_vocab(config, lm, options.vocab, options.shape);
  plan_of(options, config);  // the family's refusals, named, before anything is written
  return config;
}

Json synth_container(const SynthOptions& options, ConvertProgress& progress) {
  if (options.threads < 1) fail("--threads must be at least 1 (got {})", options.threads);
  const auto started = Clock::now();
  const Json config = synth_config(options);
  ModelPlan plan = plan_of(options, config);
  set_lm_head_format(plan.trunk, options.lm_head_format);
  const fs::path out(options.output_dir), work = out / kWorkDir;
  Json source{{"synthetic",
               {{"shape", options.shape},
                {"seed", options.seed},
                {"generator", kGeneratorVersion},
                {"layers", options.layers},
                {"experts", options.experts},
                {"vocab", options.vocab}}}};
  if (options.fit_routing) source["synthetic"]["routing"] = "realistic";
  // The format version too: a resume must not keep banks of another layout
  // that happen to have the size of this one's.
  const Json state{{"format", "sluice-synth-state"},
                   {"format_version", kContainerFormatVersion},
                   {"source", source},
                   {"kmeans", nullptr},
                   {"lm_head_format", trunk_format_name(options.lm_head_format)}};
  Json summary{{"shape", options.shape},
               {"output", options.output_dir},
               {"arch", plan.arch},
               {"layers", plan.config.layers},
               {"moe_layers", plan.moe_layers.size()},
               {"seed", options.seed}};

  const Start start = prepare_output(out, kWorkDir, state, options.force);
  if (start == Start::kComplete) {
    summary["already_complete"] = true;
    summary["container_bytes"] = directory_bytes(out);
    return summary;
  }

  uint64_t trunk_bytes = 0;
  const std::vector<TrunkEntry> trunk = layout_trunk(plan, trunk_bytes);
  const bool trunk_done = has_size(out / kTrunkFile, trunk_bytes);
  uint64_t remaining = 0, kept_files = 0;
  if (!trunk_done) {
    for (const auto& t : trunk) remaining += t.plan.elements();
  }
  for (const auto& layer : plan.moe_layers) {
    if (!has_size(out / bank_file_name(layer.layer), bank_bytes(layer))) {
      remaining += uint64_t{layer.experts} * 3 * layer.hidden * layer.expert_width;
    }
  }
  progress.start(remaining);
  if (!trunk_done) {
    progress.phase("trunk");
    const std::optional<RoutingShape> routing =
        options.fit_routing ? std::optional(options.fit_routing(plan.config)) : std::nullopt;
    SynthTrunkValues values(options.seed, routing ? &*routing : nullptr);
    write_trunk(values, trunk, trunk_bytes, (out / kTrunkFile).string(), options.threads, progress);
  } else {
    ++kept_files;
  }
  for (const auto& layer : plan.moe_layers) {
    const fs::path path = out / bank_file_name(layer.layer);
    if (has_size(path, bank_bytes(layer))) {
      ++kept_files;
      continue;
    }
    progress.phase(fmt::format("layer {}", layer.layer));
    write_bank(layer, options, path, progress);
  }

  progress.phase("manifest");
  CodebooksWriter codebooks(out);
  for (const auto& layer : plan.moe_layers) {
    codebooks.append_layer(layer.layer, synth_layer_codebooks(options.seed, layer.layer),
                           "synthetic codebooks");
  }
  const uint32_t codebooks_crc32 = codebooks.commit();
  finish_container({.arch = plan.arch,
                    .config = config,
                    .source = source,
                    .kmeans = nullptr,
                    .trunk = trunk,
                    .trunk_bytes = trunk_bytes,
                    .moe_layers = plan.moe_layers,
                    .tokenizer_files = {{"tokenizer.json", synth_tokenizer_json(plan.config.vocab)},
                                        {"tokenizer_config.json", synth_tokenizer_config()}},
                    .chat_template = nullptr},
                   codebooks_crc32, out);
  fs::remove_all(work);
  progress.finish();

  const double seconds = std::chrono::duration<double>(Clock::now() - started).count();
  const uint64_t bytes = directory_bytes(out);
  summary["already_complete"] = false;
  summary["resumed_files"] = kept_files;
  summary["seconds"] = seconds;
  summary["container_bytes"] = bytes;
  summary["bytes_per_second"] = seconds > 0 ? static_cast<double>(bytes) / seconds : 0.0;
  return summary;
}

}  // namespace sluice::convert
