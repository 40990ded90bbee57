// compute/cli/cmd_info.cpp: `sluice info MODEL [--json]`, what a container
// holds and what it costs. Reads only the manifest and file sizes (through
// Container::open); never reads a record or loads the trunk.
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "compute/cli/commands.h"
#include "ioworker/memory_plan.h"
#include "proto/container.h"
#include "proto/family_spec.h"
#include "proto/model_config.h"
#include "proto/tensor_inventory.h"

namespace sluice::cli {
namespace {

// "xtml" when the family writes its prompts in code, "template" for a Jinja
// chat template, else null.
nlohmann::json chat_format_name(const Container& c) {
  const FamilySpec* family = find_family(c.arch());
  if (family && family->chat_format == ChatFormatKind::kXtml) return "xtml";
  return c.chat_template() ? nlohmann::json("template") : nlohmann::json(nullptr);
}

// format_bytes, with the exact count beside anything of a KiB or more.
std::string human_bytes(uint64_t bytes) {
  return bytes < 1024 ? format_bytes(bytes) : fmt::format("{} ({} bytes)", format_bytes(bytes), bytes);
}

// "5" when every MoE layer agrees, "4-8" when they differ.
template <typename Get>
std::string layer_range(const std::vector<MoeLayerInfo>& layers, Get get) {
  uint64_t lo = UINT64_MAX, hi = 0;
  for (const MoeLayerInfo& layer : layers) {
    lo = std::min<uint64_t>(lo, get(layer));
    hi = std::max<uint64_t>(hi, get(layer));
  }
  return lo == hi ? fmt::format("{}", lo) : fmt::format("{}-{}", lo, hi);
}

// The layer pattern as its family spec reads it, so a user sees which
// mixer, router and variant (e.g. the group mask) is in effect.
nlohmann::json describe_model(const ModelConfig& m) {
  nlohmann::json mixer;
  if (m.mixer == MixerKind::kGqa) {
    const char* norms[] = {"none", "whole vector", "per head"};
    mixer = {{"kind", "gqa"}, {"heads", m.gqa.heads}, {"kv_heads", m.gqa.kv_heads}, {"head_dim", m.gqa.head_dim},
             {"qk_norm", norms[static_cast<int>(m.gqa.qk_norm)]}};
  } else {
    mixer = {{"kind", "mla"}, {"heads", m.mla.heads}, {"q_lora_rank", m.mla.q_lora_rank},
             {"kv_lora_rank", m.mla.kv_lora_rank}, {"rope_dim", m.mla.rope_dim}, {"nope_dim", m.mla.nope_dim},
             {"v_dim", m.mla.v_dim}};
  }
  mixer["rope_theta"] = m.rope.theta;
  mixer["yarn_factor"] = m.rope.yarn ? nlohmann::json(m.rope.yarn->factor) : nlohmann::json();
  const RouterConfig& r = m.router;
  nlohmann::json router = {{"kind", r.kind == RouterKind::kSoftmax ? "softmax" : "sigmoid"},
                           {"experts", r.experts}, {"top_k", r.top_k}, {"renormalize", r.normalize},
                           {"scaling", r.scaling}, {"score_bias", r.score_bias}};
  if (r.kind == RouterKind::kSigmoid) {
    router["groups"] = r.groups;
    router["topk_groups"] = r.topk_groups;
    router["excluded_groups_score"] = r.group_mask == GroupMask::kZero ? "0" : "-inf";
    router["weights"] = r.weights_from_biased ? "biased scores (the released modeling code)" : "unbiased scores";
  }
  nlohmann::json dense = nlohmann::json::array(), kda = nlohmann::json::array();
  for (uint32_t i = 0; i < m.layers; ++i) {
    if (!m.layer_is_moe[i]) dense.push_back(i);
    if (m.is_kda(i)) kda.push_back(i);
  }
  nlohmann::json vision;  // null: text only
  if (m.vision) {
    const VisionConfig& v = *m.vision;
    vision = {{"blocks", v.blocks}, {"hidden", v.hidden}, {"heads", v.heads}, {"head_dim", v.head_dim()},
              {"patch", v.patch}, {"media_pad_id", v.media_pad_id}};
  }
  return {{"mixer", mixer}, {"router", router}, {"dense_layers", dense}, {"kda_layers", kda}, {"vision", vision},
          {"shared_expert_width", m.shared_width},
          {"state_bytes_per_token", m.state_floats_per_token() * sizeof(float)},
          {"state_bytes_fixed", m.state_floats_fixed() * sizeof(float)}};
}

std::string mixer_line(const nlohmann::json& mixer) {
  std::string line = mixer["kind"] == "gqa"
                         ? fmt::format("GQA, {} heads, {} KV heads of {}, q/k norm {}", mixer["heads"].get<int>(),
                                       mixer["kv_heads"].get<int>(), mixer["head_dim"].get<int>(),
                                       mixer["qk_norm"].get<std::string>())
                         : fmt::format("MLA (absorbed), {} heads, latent {} + rope {}, query rank {}",
                                       mixer["heads"].get<int>(), mixer["kv_lora_rank"].get<int>(),
                                       mixer["rope_dim"].get<int>(), mixer["q_lora_rank"].get<int>());
  if (!mixer["yarn_factor"].is_null()) line += fmt::format(", YaRN x{:.4g}", mixer["yarn_factor"].get<double>());
  return line;
}

std::string router_line(const nlohmann::json& r) {
  std::string line = fmt::format("{} top-{} of {}", r["kind"].get<std::string>(), r["top_k"].get<int>(),
                                 r["experts"].get<int>());
  if (r["score_bias"].get<bool>()) line += ", bias for selection";
  if (r.contains("groups") && r["groups"].get<int>() > 1) {
    line += fmt::format(", best {} of {} groups (others score {})", r["topk_groups"].get<int>(), r["groups"].get<int>(),
                        r["excluded_groups_score"].get<std::string>());
  }
  if (r.contains("weights")) line += ", weighted by " + r["weights"].get<std::string>();
  line += r["renormalize"].get<bool>() ? ", renormalised" : ", not renormalised";
  if (r["scaling"].get<double>() != 1.0) line += fmt::format(", x{:.4g}", r["scaling"].get<double>());
  return line;
}

nlohmann::json describe(const Container& c) {
  const auto& layers = c.moe_layers();
  uint64_t weights = 0;
  const uint64_t largest_record = c.largest_record_stride();
  int direct_banks = 0;
  nlohmann::json table = nlohmann::json::array();
  for (const MoeLayerInfo& layer : layers) {
    weights += uint64_t{layer.experts} * 3 * layer.hidden * layer.expert_width;
    const bool direct = c.bank_direct(layer.layer);
    direct_banks += direct;
    table.push_back({{"layer", layer.layer},
                     {"file", layer.file},
                     {"experts", layer.experts},
                     {"hidden", layer.hidden},
                     {"expert_width", layer.expert_width},
                     {"record_bytes", layer.record_stride},
                     {"bytes", layer.bytes},
                     {"codebook_base", layer.codebook_base},
                     {"o_direct", direct}});
  }
  const ModelConfig config = ModelConfig::from_json(c.arch(), c.config());
  uint64_t vision_bytes = 0;
  for (const TrunkTensorInfo& t : c.trunk_tensors()) {
    if (is_vision_tensor(config, t.name)) vision_bytes += t.bytes + t.scale_bytes;
  }
  nlohmann::json files = nlohmann::json::array();
  for (const std::string& name : c.manifest().tokenizer_files) files.push_back(name);
  const MoeLayerInfo& first = layers.front();
  return {
      {"path", c.dir()},
      {"arch", c.arch()},
      {"identity", fmt::format("{:016x}", c.identity())},
      {"layers", c.layer_count()},
      {"moe_layers", layers.size()},
      {"experts", first.experts},
      {"top_k", c.top_k()},
      {"hidden", c.hidden_size()},
      {"expert_hidden", first.hidden},
      {"expert_width", first.expert_width},
      {"vocab_size", c.vocab_size()},
      {"trunk_bytes", c.trunk_bytes()},
      {"trunk_tensors", c.trunk_tensors().size()},
      {"expert_bytes", c.expert_bytes()},
      {"records", c.record_count()},
      {"record_bytes", first.record_stride},
      {"largest_record_bytes", largest_record},
      {"codebooks_bytes", c.codebooks_bytes()},
      {"codebook_count", c.manifest().codebook_count},
      {"codebook_sharing", c.manifest().codebook_sharing},
      // One unit of index bytes holds the codes of a row block's vector.
      {"index_bits_per_weight", double{kRvqUnitBytes} * 8 / (kRowBlock * kRvqVecDim)},
      {"bits_per_weight", static_cast<double>(c.expert_bytes()) * 8 / static_cast<double>(weights)},
      {"tokenizer_files", files},
      {"chat_template", c.chat_template().has_value()},
      {"chat_format", chat_format_name(c)},
      {"o_direct", direct_banks == static_cast<int>(layers.size())},
      {"o_direct_banks", direct_banks},
      {"moe_layer_table", table},
      {"model", describe_model(config)},
      {"vision_bytes", vision_bytes},
  };
}

void print_text(const Container& c, const nlohmann::json& d) {
  const auto& layers = c.moe_layers();
  const int direct = d["o_direct_banks"].get<int>();
  fmt::print("container      {}\n", c.dir());
  fmt::print("architecture   {}\n", c.arch());
  fmt::print("identity       {}\n", d["identity"].get<std::string>());
  fmt::print("layers         {} ({} MoE)\n", c.layer_count(), layers.size());
  fmt::print("experts        {} per MoE layer, top-k {}\n",
             layer_range(layers, [](const MoeLayerInfo& l) { return l.experts; }), c.top_k());
  fmt::print("hidden         {} (experts see {})\n", c.hidden_size(),
             layer_range(layers, [](const MoeLayerInfo& l) { return l.hidden; }));
  fmt::print("expert width   {}\n",
             layer_range(layers, [](const MoeLayerInfo& l) { return l.expert_width; }));
  fmt::print("vocabulary     {}\n", c.vocab_size());
  const nlohmann::json& model = d["model"];
  fmt::print("attention      {}\n", mixer_line(model["mixer"]));
  fmt::print("routing        {}\n", router_line(model["router"]));
  if (!model["dense_layers"].empty()) {
    fmt::print("dense layers   {}\n", fmt::join(model["dense_layers"].get<std::vector<uint32_t>>(), ", "));
  }
  if (model["shared_expert_width"].get<int>() > 0) {
    fmt::print("shared expert  width {}\n", model["shared_expert_width"].get<int>());
  }
  if (!model["kda_layers"].empty()) {
    fmt::print("KDA layers     {} (the others: the attention above)\n",
               fmt::join(model["kda_layers"].get<std::vector<uint32_t>>(), ", "));
  }
  fmt::print("state          {} per token of context, {} fixed\n",
             human_bytes(model["state_bytes_per_token"].get<uint64_t>()),
             human_bytes(model["state_bytes_fixed"].get<uint64_t>()));
  fmt::print("trunk          {} in {} tensors\n", human_bytes(c.trunk_bytes()),
             c.trunk_tensors().size());
  fmt::print("experts        {} in {} banks, {} records\n", human_bytes(c.expert_bytes()),
             layers.size(), c.record_count());
  fmt::print("one record     {}\n", human_bytes(d["largest_record_bytes"].get<uint64_t>()));
  fmt::print("codebooks      {}: {} codebooks shared per {}\n", human_bytes(c.codebooks_bytes()),
             c.manifest().codebook_count, c.manifest().codebook_sharing);
  fmt::print("bits/weight    {:.2f} index, {:.3f} with scales and padding\n",
             d["index_bits_per_weight"].get<double>(), d["bits_per_weight"].get<double>());
  if (const nlohmann::json& v = model["vision"]; !v.is_null()) {
    fmt::print("vision         present: {} blocks of width {}, {} heads of {}; {} in trunk.bin, loaded only for images\n",
               v["blocks"].get<uint32_t>(), v["hidden"].get<uint32_t>(), v["heads"].get<uint32_t>(),
               v["head_dim"].get<uint32_t>(), human_bytes(d["vision_bytes"].get<uint64_t>()));
  } else {
    fmt::print("vision         none\n");
  }
  fmt::print("tokenizer      {}\n", fmt::join(c.manifest().tokenizer_files, ", "));
  fmt::print("chat template  {}\n", c.chat_template() ? "present" : "none");
  if (d["chat_format"] == "xtml") {
    fmt::print("chat format    XTML, written as code after encoding_k3.py (k3.md §5)\n");
  }
  fmt::print("O_DIRECT       {}\n", direct == static_cast<int>(layers.size()) ? "yes"
                                    : direct == 0
                                        ? "no (the filesystem refused it; reads use the page cache)"
                                        : fmt::format("{} of {} banks", direct, layers.size()));
}

}  // namespace

void add_info_command(CLI::App& app) {
  auto* cmd =
      app.add_subcommand("info", "Describe a converted container: shape, sizes, bits per weight");
  auto model = std::make_shared<std::string>();
  auto json = std::make_shared<bool>(false);
  cmd->add_option("MODEL", *model, "container directory (MODEL.sluice)")->required();
  cmd->add_flag("--json", *json, "print one JSON object instead of text");
  cmd->callback([model, json] {
    const Container c = Container::open(*model);
    const nlohmann::json d = describe(c);
    if (*json) {
      fmt::print("{}\n", d.dump(2));
    } else {
      print_text(c, d);
    }
  });
}

}  // namespace sluice::cli
