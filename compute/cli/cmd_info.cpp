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

namespace sluice::cli {
namespace {

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
      {"index_bits_per_weight", double{kRvqStages} * 8 / kRvqVecDim},
      {"bits_per_weight", static_cast<double>(c.expert_bytes()) * 8 / static_cast<double>(weights)},
      {"tokenizer_files", files},
      {"chat_template", c.chat_template().has_value()},
      {"o_direct", direct_banks == static_cast<int>(layers.size())},
      {"o_direct_banks", direct_banks},
      {"moe_layer_table", table},
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
  fmt::print("trunk          {} in {} tensors\n", human_bytes(c.trunk_bytes()),
             c.trunk_tensors().size());
  fmt::print("experts        {} in {} banks, {} records\n", human_bytes(c.expert_bytes()),
             layers.size(), c.record_count());
  fmt::print("one record     {}\n", human_bytes(d["largest_record_bytes"].get<uint64_t>()));
  fmt::print("codebooks      {}: {} codebooks shared per {}\n", human_bytes(c.codebooks_bytes()),
             c.manifest().codebook_count, c.manifest().codebook_sharing);
  fmt::print("bits/weight    {:.2f} index, {:.3f} with scales and padding\n",
             d["index_bits_per_weight"].get<double>(), d["bits_per_weight"].get<double>());
  fmt::print("tokenizer      {}\n", fmt::join(c.manifest().tokenizer_files, ", "));
  fmt::print("chat template  {}\n", c.chat_template() ? "present" : "none");
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
