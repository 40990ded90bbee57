// ioworker/memory_plan.cpp: the floor, working set and budget rule of
// design.md ("Memory: floor, budget, cache") and the cgroup walk behind usable
// RAM. Pure arithmetic over the manifest and a few small /proc and /sys files.
#include "ioworker/memory_plan.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <fstream>
#include <map>
#include <sstream>
#include <vector>

#include "ioworker/worker.h"
#include "proto/container.h"
#include "proto/error.h"
#include "proto/model_config.h"
#include "proto/record_format.h"
#include "proto/tensor_inventory.h"

namespace sluice {
namespace {

// v1 reports "no limit" as PAGE_COUNTER_MAX × page size, just under 2^63;
// anything this large is not a limit anyone set.
constexpr uint64_t kUnlimitedThreshold = uint64_t{1} << 62;

std::optional<std::string> read_small_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string trim(std::string_view text) {
  size_t begin = 0, end = text.size();
  while (begin < end && std::isspace(static_cast<unsigned char>(text[begin]))) ++begin;
  while (end > begin && std::isspace(static_cast<unsigned char>(text[end - 1]))) --end;
  return std::string(text.substr(begin, end - begin));
}

std::vector<std::string> split(std::string_view text, char separator) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (true) {
    const size_t at = text.find(separator, start);
    parts.emplace_back(text.substr(start, at == std::string_view::npos ? std::string_view::npos : at - start));
    if (at == std::string_view::npos) break;
    start = at + 1;
  }
  return parts;
}

// mountinfo escapes space, tab, newline and backslash as \ooo.
std::string unescape_mount_path(std::string_view text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\\' && i + 3 < text.size()) {
      const std::string_view digits = text.substr(i + 1, 3);
      if (std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '7'; })) {
        out.push_back(static_cast<char>((digits[0] - '0') * 64 + (digits[1] - '0') * 8 + (digits[2] - '0')));
        i += 3;
        continue;
      }
    }
    out.push_back(text[i]);
  }
  return out;
}

struct CgroupMount {
  std::string root;         // the hierarchy path mounted there
  std::string mount_point;  // where it is mounted
};

// Finds the mount of the v2 hierarchy (`v2`) or of the v1 hierarchy carrying
// the memory controller.
std::optional<CgroupMount> find_cgroup_mount(const std::string& mountinfo, bool v2) {
  std::istringstream lines(mountinfo);
  std::string line;
  while (std::getline(lines, line)) {
    const size_t dash = line.find(" - ");
    if (dash == std::string::npos) continue;
    const auto left = split(line.substr(0, dash), ' ');
    const auto right = split(line.substr(dash + 3), ' ');
    if (left.size() < 5 || right.size() < 3) continue;
    const std::string& fstype = right[0];
    if (v2 ? fstype != "cgroup2" : fstype != "cgroup") continue;
    if (!v2) {
      const auto options = split(right[2], ',');
      if (std::find(options.begin(), options.end(), "memory") == options.end()) continue;
    }
    return CgroupMount{unescape_mount_path(left[3]), unescape_mount_path(left[4])};
  }
  return std::nullopt;
}

// The directory of `cgroup_path` under `mount`, and every ancestor up to the
// mount point, innermost first.
std::vector<std::string> cgroup_dirs(const CgroupMount& mount, const std::string& cgroup_path) {
  std::string relative = cgroup_path;
  if (mount.root != "/" && relative.rfind(mount.root, 0) == 0) {
    relative = relative.substr(mount.root.size());
  } else if (mount.root != "/") {
    relative.clear();  // our cgroup lies outside what is mounted: only the mount itself is visible
  }
  std::vector<std::string> components;
  for (const auto& part : split(relative, '/')) {
    if (!part.empty() && part != ".") components.push_back(part);
  }
  std::vector<std::string> dirs;
  for (size_t depth = components.size() + 1; depth-- > 0;) {
    std::string dir = mount.mount_point;
    for (size_t i = 0; i < depth; ++i) dir += "/" + components[i];
    dirs.push_back(dir);
  }
  return dirs;
}

std::optional<uint64_t> parse_limit(const std::string& text) {
  const std::string value = trim(text);
  if (value.empty() || value == "max") return std::nullopt;
  uint64_t parsed = 0;
  const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), parsed);
  if (ec != std::errc() || end != value.data() + value.size()) return std::nullopt;
  if (parsed >= kUnlimitedThreshold) return std::nullopt;
  return parsed;
}

}  // namespace

UsableRam read_usable_ram(const std::string& root) {
  UsableRam ram;
  const std::string meminfo_path = root + "/proc/meminfo";
  const auto meminfo = read_small_file(meminfo_path);
  if (!meminfo) fail("{}: cannot read physical memory size", meminfo_path);
  {
    std::istringstream lines(*meminfo);
    std::string line;
    while (std::getline(lines, line)) {
      if (line.rfind("MemTotal:", 0) != 0) continue;
      std::istringstream fields(line.substr(9));
      uint64_t kib = 0;
      if (fields >> kib) ram.physical_bytes = kib * 1024;
    }
  }
  if (ram.physical_bytes == 0) fail("{}: no MemTotal line", meminfo_path);
  ram.usable_bytes = ram.physical_bytes;
  ram.source = "physical memory";

  const auto cgroups = read_small_file(root + "/proc/self/cgroup");
  const auto mountinfo = read_small_file(root + "/proc/self/mountinfo");
  if (!cgroups || !mountinfo) return ram;  // no cgroups here: physical memory is the limit

  auto consider = [&](const std::string& file) {
    const auto text = read_small_file(file);
    if (!text) return;
    const auto limit = parse_limit(*text);
    if (limit && *limit < ram.usable_bytes) {
      ram.usable_bytes = *limit;
      ram.source = file.substr(root.size());
    }
  };
  std::istringstream lines(*cgroups);
  std::string line;
  while (std::getline(lines, line)) {
    // hierarchy-id:controllers:path; the path may itself contain ':'.
    const size_t first = line.find(':');
    const size_t second = first == std::string::npos ? first : line.find(':', first + 1);
    if (second == std::string::npos) continue;
    const std::string hierarchy = line.substr(0, first);
    const auto controllers = split(line.substr(first + 1, second - first - 1), ',');
    const std::string path = line.substr(second + 1);
    const bool v2 = hierarchy == "0" && controllers.size() == 1 && controllers[0].empty();
    if (!v2 && std::find(controllers.begin(), controllers.end(), "memory") == controllers.end()) continue;
    const auto mount = find_cgroup_mount(*mountinfo, v2);
    if (!mount) continue;
    for (const auto& dir : cgroup_dirs(*mount, path)) {
      if (v2) {
        consider(root + dir + "/memory.max");
        consider(root + dir + "/memory.high");
      } else {
        consider(root + dir + "/memory.limit_in_bytes");
      }
    }
  }
  return ram;
}

namespace {

// One token's RVQ lookup table over `cols` inputs (compute/kernels/rvq.h):
// codes per 4 columns × stage × entry, int16 (two byte planes) at most, and
// an f32 scale per 128 columns. Its build works in a fixed stack buffer.
uint64_t rvq_table_bytes_per_token(uint64_t cols) {
  const uint64_t vectors = cols / kRvqVecDim;
  const uint64_t groups = (vectors + kPlanTableGroupVectors - 1) / kPlanTableGroupVectors;
  return vectors * kRvqStages * kRvqEntries * sizeof(int16_t) + groups * sizeof(float);
}

// A decode-once f32 tile (compute/kernels/rvq_decoded.cpp): about 256 KiB of
// decoded rows, 32 to 64 rows whole. An int8 tile is never larger.
uint64_t decoded_tile_bytes(uint64_t cols) {
  const uint64_t fit = (uint64_t{256} << 10) / (cols * sizeof(float)) / kRowBlock * kRowBlock;
  return std::clamp<uint64_t>(fit, kRowBlock, 2 * kRowBlock) * cols * sizeof(float);
}

// The int8 inputs one decode-once call quantizes for its int8 tiles
// (rvq_decoded.cpp): a byte per column, up to whole 128-column groups, and
// each group's f32 scale, for every row.
uint64_t decoded_inputs_bytes(uint64_t rows, uint64_t cols) {
  const uint64_t groups = (cols + 127) / 128;
  return rows * groups * (128 + sizeof(float));
}

}  // namespace

uint64_t plan_scratch_bytes(const ModelConfig& config, uint32_t context,
                            const ScratchShape& shape) {
  const uint64_t rows = std::max<uint64_t>({shape.chunk, shape.sequences, 1});
  const uint64_t threads = std::max<uint32_t>(shape.threads, 1);
  const uint64_t hidden = config.hidden, expert_in = config.expert_hidden(),
                 width = config.expert_width;
  const uint64_t dense = config.layers > config.moe_layers() ? config.dense_width : 0;
  const uint64_t ffn = std::max<uint64_t>(dense, config.shared_width);
  // K3's Attention Residuals keep every stored block and one mixture per row.
  const uint64_t blocks =
      config.attn_res_block > 0 ? ((config.layers + config.attn_res_block - 1) / config.attn_res_block + 1) * hidden : 0;
  const uint64_t latent = config.expert_latent > 0 ? expert_in : 0;
  const uint64_t row_floats = 3 * hidden + 2 * ffn + (uint64_t{config.top_k} + 2) * expert_in +
                              latent + blocks + config.mixer_scratch_floats();
  // Each row's routing at each MoE layer: the ids and weights of its top-k
  // (two vectors, 16 bytes of allocator header each).
  const uint64_t routing_bytes =
      config.moe_layers() * (2 * 3 * sizeof(void*) + 2 * 16 + 8 * uint64_t{config.top_k});
  const uint64_t widest = std::max({hidden, ffn, width, expert_in});
  const uint64_t int8_activations = rows * widest + rows * (widest / 32) * sizeof(float);
  const uint64_t shared =
      (rows * row_floats + config.experts + config.shared_attention_floats(context)) *
          sizeof(float) +
      rows * routing_bytes + int8_activations + 2 * rows * rvq_table_bytes_per_token(expert_in);
  const uint64_t per_thread =
      rows * (2 * expert_in + 3 * width) * sizeof(float) + rows * sizeof(uint32_t) +
      std::min(rows, kPlanTableTokensPerExpert) * rvq_table_bytes_per_token(width) +
      std::max(decoded_tile_bytes(expert_in), decoded_tile_bytes(width)) +
      decoded_inputs_bytes(rows, std::max(expert_in, width)) +
      config.attention_worker_floats(context, rows) * sizeof(float);
  const uint64_t logits = (rows + shape.sequences) * uint64_t{config.vocab} * sizeof(float);
  return shared + threads * per_thread + logits;
}

uint64_t plan_process_bytes(const ModelConfig& config) {
  return kProcessBaseBytes + uint64_t{config.vocab} * kTokenizerBytesPerEntry;
}

namespace {

// The segment of a slot for every one of `records` experts, and the slots a
// worker makes of a segment of a given size.
void add_cache_limits(PlanInputs& inputs, const ioworker::CacheShape& shape, uint64_t records,
                      uint32_t max_clients, uint32_t mailbox_rows) {
  if (records >= 2 * inputs.top_k && records <= UINT32_MAX) {
    inputs.full_cache_bytes = ioworker::cache_bytes_for_slots(shape, static_cast<uint32_t>(records),
                                                              max_clients, mailbox_rows);
  }
  inputs.slots_in = [shape, max_clients, mailbox_rows](uint64_t cache_bytes) -> uint64_t {
    return ioworker::plan_cache_geometry(shape, cache_bytes, max_clients, mailbox_rows).slot_count;
  };
}

// trunk.bin up to K3's vision tower, which the converter puts last: the
// tower is resident only for prompts with images.
uint64_t text_trunk_bytes(const Container& container) {
  const ModelConfig config = ModelConfig::from_json(container.arch(), container.config());
  uint64_t end = container.trunk_bytes();
  for (const TrunkTensorInfo& tensor : container.trunk_tensors()) {
    if (is_vision_tensor(config, tensor.name)) end = std::min(end, tensor.offset);
  }
  return end;
}

// An untied embedding stays on disk; its loader keeps a crc32 per row.
void leave_embedding_on_disk(PlanInputs& inputs, const ModelConfig& config, uint64_t table_bytes) {
  if (config.tie_embeddings) return;
  inputs.embedding_disk_bytes = table_bytes;
  inputs.resident_bytes = inputs.resident_bytes - table_bytes + uint64_t{config.vocab} * sizeof(uint32_t);
}

}  // namespace

uint64_t plan_vision_bytes(const ModelConfig& config) {
  if (!config.vision) return 0;
  uint64_t weights = 0;
  for (const TensorSpec& tensor : vision_inventory(config)) weights += trunk_tensor_bytes(tensor);
  return weights + config.vision->activation_floats(kMaxImagePatches, config.hidden) * sizeof(float);
}

PlanInputs plan_inputs(const Container& container, uint32_t max_clients, uint32_t mailbox_rows) {
  PlanInputs inputs;
  inputs.model = container.dir();
  inputs.resident_bytes = text_trunk_bytes(container) + container.codebooks_bytes();
  const ModelConfig config = ModelConfig::from_json(container.arch(), container.config());
  if (const TrunkTensorInfo* table = container.find_trunk_tensor(tensor_name(config, TensorRole::kEmbed))) {
    leave_embedding_on_disk(inputs, config, table->bytes + table->scale_bytes);
  }
  inputs.top_k = container.top_k();
  inputs.moe_layers = container.moe_layers().size();
  inputs.record_stride = container.largest_record_stride();
  if (inputs.moe_layers > 0) {
    inputs.cache_tables_bytes =
        ioworker::min_cache_bytes(container, max_clients, mailbox_rows) - 2 * inputs.top_k * inputs.record_stride;
    add_cache_limits(inputs, ioworker::cache_shape(container), container.record_count(),
                     max_clients, mailbox_rows);
  }
  return inputs;
}

PlanInputs plan_inputs(const ModelConfig& config, const std::string& name, uint32_t max_clients,
                       uint32_t mailbox_rows) {
  PlanInputs inputs;
  inputs.model = name;
  const std::vector<MoeLayerSpec> moe = moe_inventory(config);
  const std::vector<TensorSpec> trunk = trunk_inventory(config);
  inputs.resident_bytes = trunk_file_bytes(trunk) + moe.size() * kMatrixKinds.size() * kRvqStages * kCodebookBytes;
  for (const TensorSpec& t : trunk) {
    if (t.role == TensorRole::kEmbed) leave_embedding_on_disk(inputs, config, trunk_tensor_bytes(t));
  }
  inputs.top_k = config.top_k;
  inputs.moe_layers = moe.size();
  if (!moe.empty()) {
    inputs.record_stride = RecordLayout::compute(config.expert_hidden(), config.expert_width).stride;
    const ioworker::CacheShape shape{static_cast<uint32_t>(inputs.record_stride), config.experts, config.hidden,
                                     config.top_k};
    inputs.cache_tables_bytes = ioworker::cache_bytes_for_slots(shape, 2 * config.top_k, max_clients, mailbox_rows) -
                                2 * inputs.top_k * inputs.record_stride;
    add_cache_limits(inputs, shape, uint64_t{config.experts} * moe.size(), max_clients,
                     mailbox_rows);
  }
  return inputs;
}

nlohmann::json model_breakdown(const ModelConfig& config) {
  std::map<std::string, uint64_t> bytes;
  uint64_t trunk_params = 0;
  for (const TensorSpec& t : trunk_inventory(config)) {
    const char* component = "attention";
    switch (t.role) {
      case TensorRole::kEmbed: component = "embeddings"; break;
      case TensorRole::kLmHead: component = "lm_head"; break;
      case TensorRole::kDenseGate: case TensorRole::kDenseUp: case TensorRole::kDenseDown: component = "dense_ffn"; break;
      case TensorRole::kRouter: case TensorRole::kRouterBias: component = "routers"; break;
      case TensorRole::kSharedGate: case TensorRole::kSharedUp: case TensorRole::kSharedDown: component = "shared_experts"; break;
      case TensorRole::kInputNorm: case TensorRole::kPostAttentionNorm: case TensorRole::kFinalNorm: component = "norms"; break;
      case TensorRole::kLatentDown: case TensorRole::kLatentNorm: case TensorRole::kLatentUp: component = "latent_moe"; break;
      case TensorRole::kAttnResNorm: case TensorRole::kAttnResProj: case TensorRole::kMlpResNorm:
      case TensorRole::kMlpResProj: case TensorRole::kFinalResNorm: case TensorRole::kFinalResProj: component = "attn_res"; break;
      default: break;
    }
    bytes[component] += trunk_tensor_bytes(t);
    trunk_params += t.elements();
  }
  const uint64_t expert_params = 3ull * config.expert_hidden() * config.expert_width;
  const uint64_t routed = expert_params * config.experts * config.moe_layers();
  nlohmann::json trunk = nlohmann::json::object();
  for (const auto& [component, n] : bytes) trunk[component] = n;
  return {{"trunk_bytes_by_component", trunk},
          {"params_total", trunk_params + routed},
          {"params_routed_experts", routed},
          {"params_active_per_token", trunk_params + expert_params * config.top_k * config.moe_layers()}};
}

MemoryPlan plan_memory(const Container& container, const ModelConfig& config, const PlanRequest& request,
                       const UsableRam& ram) {
  return plan_memory(plan_inputs(container, request.max_clients, request.mailbox_rows), config, request, ram);
}

MemoryPlan plan_memory(const PlanInputs& inputs, const ModelConfig& config, const PlanRequest& request,
                       const UsableRam& ram) {
  if (request.context == 0) fail("--ctx: the context length must be at least 1");
  if (inputs.moe_layers == 0 || inputs.record_stride == 0) {
    fail("{}: the container has no MoE layers to plan a cache for", inputs.model);
  }
  MemoryPlan plan;
  plan.context = request.context;
  plan.trunk_bytes = inputs.resident_bytes;
  plan.embedding_disk_bytes = inputs.embedding_disk_bytes;
  plan.sequence_state_bytes =
      (config.state_floats_per_token(request.half_latents) * request.context + config.state_floats_fixed()) *
      sizeof(float);
  plan.sequences = std::max<uint32_t>(request.scratch.sequences, 1);
  plan.saved_states = request.saved_states;
  plan.threads = std::max<uint32_t>(request.scratch.threads, 1);
  plan.chunk = request.scratch.chunk;
  plan.kv_bytes = plan.sequence_state_bytes * (plan.sequences + plan.saved_states);
  plan.scratch_bytes = plan_scratch_bytes(config, request.context, request.scratch);
  plan.process_bytes = plan_process_bytes(config);
  plan.record_stride = inputs.record_stride;
  const uint64_t top_k = inputs.top_k;
  plan.cache_tables_bytes = inputs.cache_tables_bytes;
  plan.min_cache_bytes = 2 * top_k * plan.record_stride + plan.cache_tables_bytes;
  plan.vision_bytes = plan_vision_bytes(config);
  plan.images = request.images;
  if (request.images && plan.vision_bytes == 0) {
    fail("{}: the model has no vision tower (its config has no vision_config), so it cannot take images", inputs.model);
  }
  plan.floor_bytes = plan.trunk_bytes + plan.kv_bytes + plan.scratch_bytes + plan.process_bytes + plan.min_cache_bytes +
                     (request.images ? plan.vision_bytes : 0);
  plan.working_set_bytes = top_k * inputs.moe_layers * plan.record_stride;
  plan.physical_bytes = ram.physical_bytes;
  plan.usable_bytes = ram.usable_bytes;
  plan.usable_source = ram.source;

  plan.full_cache_bytes = inputs.full_cache_bytes;
  // The budget of a cache holding every expert: nothing above it is ever used.
  const uint64_t all_experts_budget =
      plan.full_cache_bytes > plan.min_cache_bytes
          ? plan.floor_bytes - plan.min_cache_bytes + plan.full_cache_bytes
          : 0;
  const uint64_t cap = plan.usable_bytes / 8 * 7;
  if (request.budget_bytes) {
    if (*request.budget_bytes < plan.floor_bytes) {
      fail("--budget {} is under the floor of {}; the plan at context {}:\n{}", format_bytes(*request.budget_bytes),
           format_bytes(plan.floor_bytes), plan.context, describe_plan(plan));
    }
    // The kernel keeps a cgroup limit in whole pages: a budget written as
    // the limit reads back rounded down, and is that limit.
    const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
    const bool within_a_page = *request.budget_bytes > plan.usable_bytes &&
                               *request.budget_bytes - plan.usable_bytes < page;
    if (*request.budget_bytes > plan.usable_bytes && !within_a_page && !request.force) {
      fail(
          "--budget {} is above the usable memory of {} (from {}); --force takes it anyway. The "
          "plan at "
          "context {}:\n{}",
          format_bytes(*request.budget_bytes), format_bytes(plan.usable_bytes), plan.usable_source,
          plan.context, describe_plan(plan));
    }
    plan.budget_bytes = within_a_page ? plan.usable_bytes : *request.budget_bytes;
    plan.budget_given = true;
    plan.forced = plan.budget_bytes > plan.usable_bytes;
    if (plan.budget_bytes < plan.floor_bytes) {
      fail(
          "--budget {} is the usable memory of {} (from {}, in whole pages), under the floor of "
          "{}; the plan at "
          "context {}:\n{}",
          format_bytes(*request.budget_bytes), format_bytes(plan.usable_bytes), plan.usable_source,
          format_bytes(plan.floor_bytes), plan.context, describe_plan(plan));
    }
  } else if (all_experts_budget != 0 && all_experts_budget <= cap) {
    plan.budget_bytes = all_experts_budget;
  } else {
    plan.budget_bytes = plan.floor_bytes;
    for (uint32_t sets = 3; sets >= 1; --sets) {
      const uint64_t candidate = plan.floor_bytes + sets * plan.working_set_bytes;
      if (candidate <= cap) {
        plan.budget_bytes = candidate;
        plan.working_sets = sets;
        break;
      }
    }
  }
  plan.cache_bytes = plan.budget_bytes - plan.floor_bytes + plan.min_cache_bytes;
  if (all_experts_budget != 0 && plan.cache_bytes >= plan.full_cache_bytes) {
    plan.cache_bytes = plan.full_cache_bytes;
    plan.all_experts = true;
  }
  plan.cache_slots = inputs.slots_in
                         ? inputs.slots_in(plan.cache_bytes)
                         : (plan.cache_bytes - plan.cache_tables_bytes) / plan.record_stride;
  return plan;
}

uint64_t parse_size(std::string_view text, std::string_view flag) {
  const std::string value = trim(text);
  auto bad = [&]() -> uint64_t {
    fail("{}: bad size '{}' (expected a number with an optional K, M, G or T suffix, 1024-based)", flag, value);
  };
  size_t digits = 0;
  while (digits < value.size() && (std::isdigit(static_cast<unsigned char>(value[digits])) || value[digits] == '.')) {
    ++digits;
  }
  if (digits == 0) return bad();
  double number = 0;
  const auto [end, ec] = std::from_chars(value.data(), value.data() + digits, number);
  if (ec != std::errc() || end != value.data() + digits || !std::isfinite(number) || number < 0) return bad();
  std::string suffix = value.substr(digits);
  for (char& c : suffix) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  uint64_t unit = 1;
  if (!suffix.empty() && suffix != "B") {
    const std::string_view units = "KMGT";
    const size_t power = units.find(suffix[0]);
    const std::string_view rest = std::string_view(suffix).substr(1);
    if (power == std::string_view::npos || !(rest.empty() || rest == "B" || rest == "IB")) return bad();
    unit = uint64_t{1} << (10 * (power + 1));
  }
  const double bytes = std::floor(number * static_cast<double>(unit));
  if (bytes >= 18446744073709549568.0) return bad();
  return static_cast<uint64_t>(bytes);
}

std::string format_bytes(uint64_t bytes) {
  constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  size_t unit = 0;
  while (value >= 1024.0 && unit + 1 < std::size(kUnits)) {
    value /= 1024.0;
    ++unit;
  }
  return unit == 0 ? fmt::format("{} B", bytes) : fmt::format("{:.2f} {}", value, kUnits[unit]);
}

std::string describe_plan(const MemoryPlan& plan) {
  std::string out;
  auto line = [&](std::string_view label, uint64_t bytes, std::string note = "") {
    out += fmt::format("  {:<20} {:>12}{}\n", label, format_bytes(bytes), note.empty() ? "" : "  " + note);
  };
  out += fmt::format("floor at context {}:\n", plan.context);
  line("trunk + codebooks", plan.trunk_bytes,
       plan.embedding_disk_bytes == 0
           ? ""
           : fmt::format("(the embedding table stays on disk, a row read per token: saves {})",
                         format_bytes(plan.embedding_disk_bytes)));
  const uint32_t states = plan.sequences + plan.saved_states;
  line("kv cache", plan.kv_bytes,
       states == 1
           ? ""
           : fmt::format(
                 "({} x {}: {} sequence{}{})", states, format_bytes(plan.sequence_state_bytes),
                 plan.sequences, plan.sequences == 1 ? "" : "s",
                 plan.saved_states == 0 ? "" : fmt::format(", {} saved", plan.saved_states)));
  line("scratch", plan.scratch_bytes,
       fmt::format("(a {}-token chunk, {} thread{})", plan.chunk, plan.threads,
                   plan.threads == 1 ? "" : "s"));
  line("process", plan.process_bytes, "(code, libraries, stacks and the tokenizer)");
  line("minimum cache", plan.min_cache_bytes,
       fmt::format("(2 x top-k slots of {}, and {} of cache tables)", format_bytes(plan.record_stride),
                   format_bytes(plan.cache_tables_bytes)));
  if (plan.vision_bytes > 0) {
    line("vision tower", plan.vision_bytes,
         plan.images ? "(weights and one image's activations: prompts with images)"
                     : "(not in the floor: only prompts with images load it; plan --images or "
                       "--parallel counts it)");
  }
  line("floor", plan.floor_bytes);
  line("working set", plan.working_set_bytes, "(one token's experts: top-k x MoE layers x record)");
  line("physical memory", plan.physical_bytes);
  line("usable memory", plan.usable_bytes, fmt::format("(from {})", plan.usable_source));
  std::string how;
  if (plan.forced) {
    how = "(as given, with --force: above the usable memory)";
  } else if (plan.budget_given) {
    how = "(as given)";
  } else if (plan.all_experts) {
    how = "(the floor and a cache of every expert, under 7/8 of usable)";
  } else if (plan.working_sets > 0) {
    how = fmt::format("(floor + {} working set{}, under 7/8 of usable)", plan.working_sets,
                      plan.working_sets == 1 ? "" : "s");
  } else if (plan.floor_bytes > plan.usable_bytes / 8 * 7) {
    how = "(the floor; it does not fit under 7/8 of usable memory)";
  } else {
    how = "(the floor; no whole working set fits above it)";
  }
  if (plan.budget_bytes != 0) {
    line("budget", plan.budget_bytes, how);
    line("cache", plan.cache_bytes,
         fmt::format("({} slots{})", plan.cache_slots,
                     plan.all_experts ? ": every expert of the container" : ""));
  }
  return out;
}

nlohmann::json plan_to_json(const MemoryPlan& plan) {
  return {{"context", plan.context},
          {"trunk_bytes", plan.trunk_bytes},
          {"embedding_disk_bytes", plan.embedding_disk_bytes},
          {"kv_bytes", plan.kv_bytes},
          {"sequence_state_bytes", plan.sequence_state_bytes},
          {"sequences", plan.sequences},
          {"saved_states", plan.saved_states},
          {"threads", plan.threads},
          {"chunk", plan.chunk},
          {"scratch_bytes", plan.scratch_bytes},
          {"process_bytes", plan.process_bytes},
          {"record_stride", plan.record_stride},
          {"min_cache_bytes", plan.min_cache_bytes},
          {"cache_tables_bytes", plan.cache_tables_bytes},
          {"vision_bytes", plan.vision_bytes},
          {"images", plan.images},
          {"floor_bytes", plan.floor_bytes},
          {"working_set_bytes", plan.working_set_bytes},
          {"physical_bytes", plan.physical_bytes},
          {"usable_bytes", plan.usable_bytes},
          {"usable_source", plan.usable_source},
          {"budget_bytes", plan.budget_bytes},
          {"budget_given", plan.budget_given},
          {"working_sets", plan.working_sets},
          {"all_experts", plan.all_experts},
          {"forced", plan.forced},
          {"full_cache_bytes", plan.full_cache_bytes},
          {"cache_bytes", plan.cache_bytes},
          {"cache_slots", plan.cache_slots}};
}

MemoryPlan plan_for(const Container& container, const std::string& budget, uint32_t context, const PlanRequest& shape) {
  const ModelConfig config = ModelConfig::from_json(container.arch(), container.config());
  return plan_for(&container, config, container.dir(), budget, context, std::nullopt, shape);
}

MemoryPlan plan_for(const Container* container, const ModelConfig& config, const std::string& name,
                    const std::string& budget, uint32_t context, std::optional<uint64_t> ram,
                    const PlanRequest& shape) {
  PlanRequest request = shape;
  request.context = config.context_or_default(context);
  request.budget_bytes.reset();
  if (!budget.empty()) request.budget_bytes = parse_size(budget, "--budget");
  UsableRam usable = ram ? UsableRam{*ram, *ram, "--ram"} : read_usable_ram();
  const PlanInputs inputs = container ? plan_inputs(*container, request.max_clients, request.mailbox_rows)
                                      : plan_inputs(config, name, request.max_clients, request.mailbox_rows);
  return plan_memory(inputs, config, request, usable);
}

}  // namespace sluice
