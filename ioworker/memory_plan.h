// ioworker/memory_plan.h: how much RAM a container needs at a context
// length (the floor), one token's expert working set, the RAM this process may
// use (physical memory and every cgroup limit above it) and the budget chosen
// from them. It only reads the manifest and /proc, /sys: it never allocates
// what it plans.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "ioworker/worker.h"

namespace sluice {

class Container;
struct ModelConfig;

// Rows of a prefill chunk the scratch estimate assumes (the engine's default).
inline constexpr uint64_t kPlanChunkTokens = 64;
// The most tokens an expert serves through an RVQ down table in a prefill
// chunk: at the decode-once crossover or more it decodes its weights instead
// (compute/kernels/rvq_crossover.h: the crossover is at most 65, measured or
// pinned; tests/ctl/memory_plan_test checks the two agree).
inline constexpr uint64_t kPlanTableTokensPerExpert = 64;
// Vectors per scale of an RVQ table (compute/kernels/rvq.h, kRvqGroupVectors;
// memory_plan_test holds them equal).
inline constexpr uint64_t kPlanTableGroupVectors = 32;

// What one computing process holds besides the model: code, libraries,
// thread stacks and small allocations (`sluice --version` alone is 7.5 MB
// resident), and the loaded tokenizer, about 210 bytes per vocabulary entry
// (measured: Qwen3's 151,643-entry tokenizer.json is 31.5 MB once parsed).
inline constexpr uint64_t kProcessBaseBytes = uint64_t{8} << 20;
inline constexpr uint64_t kTokenizerBytesPerEntry = 224;
uint64_t plan_process_bytes(const ModelConfig& config);

struct MemoryPlan {
  uint32_t context = 0;
  // The floor: everything but the cache, plus the smallest cache that works.
  uint64_t trunk_bytes = 0;      // trunk.bin + codebooks.bin resident, less embedding_disk_bytes
  // An untied embedding table left in trunk.bin and read a row per token
  // (compute/model/embedding.h): what that saves (its row sums are in trunk_bytes).
  uint64_t embedding_disk_bytes = 0;
  uint64_t kv_bytes = 0;  // the mixers' state of every sequence and saved state (PlanRequest)
  uint64_t sequence_state_bytes =
      0;  // one sequence's: (ctx × floats per token + fixed floats) × 4 (ModelConfig)
  uint32_t sequences = 1;        // PlanRequest::scratch.sequences
  uint32_t saved_states = 0;     // PlanRequest::saved_states
  uint32_t threads = 1;          // PlanRequest::scratch.threads
  uint64_t chunk = 0;            // PlanRequest::scratch.chunk
  uint64_t scratch_bytes = 0;    // see plan_scratch_bytes()
  uint64_t process_bytes = 0;    // see plan_process_bytes()
  uint64_t record_stride = 0;    // largest record stride of any MoE layer
  uint64_t cache_tables_bytes = 0;  // the segment's own tables (header, stats, clients, index, rings, mailbox)
  uint64_t min_cache_bytes = 0;  // 2 × top-k slots of record_stride, plus the tables
  // K3's vision tower: its weights and its activations for one image of
  // kMaxImagePatches; in the floor only when the plan is for images (0 without a tower).
  uint64_t vision_bytes = 0;
  bool images = false;           // PlanRequest::images
  uint64_t floor_bytes = 0;      // trunk + kv + scratch + process + min cache (+ vision with images)
  uint64_t working_set_bytes = 0;  // top-k × MoE layers × record_stride
  // What the budget was chosen against.
  uint64_t physical_bytes = 0;
  uint64_t usable_bytes = 0;     // min(physical, cgroup limits)
  std::string usable_source;     // what set usable_bytes ("physical memory", a cgroup file)
  // The choice.
  uint64_t budget_bytes = 0;
  uint32_t working_sets = 0;     // whole working sets above the floor (0..3), when chosen
  bool budget_given = false;     // --budget, used as given
  bool all_experts = false;      // the cache holds every expert of the container
  bool forced = false;           // --force: a given budget above the usable memory
  uint64_t full_cache_bytes = 0;  // a segment with a slot for every expert (0: not known)
  uint64_t cache_bytes = 0;       // budget − floor + min cache, at most full_cache_bytes
  uint64_t cache_slots = 0;       // the slots a worker makes of cache_bytes
};

// RAM this process may use, and which limit set it.
struct UsableRam {
  uint64_t physical_bytes = 0;
  uint64_t usable_bytes = 0;
  std::string source;
};

// Reads MemTotal from <root>/proc/meminfo, the process's cgroups from
// <root>/proc/self/cgroup and their mount points from
// <root>/proc/self/mountinfo, then every limit from the process's cgroup up
// to the hierarchy's mounted root: v2 memory.max and memory.high, v1
// memory.limit_in_bytes (memory controller only). "max" and v1's
// "unlimited" sentinel (near 2^63) impose nothing; a file that is absent is
// skipped. `root` is "" for the real system; tests pass a fake tree.
UsableRam read_usable_ram(const std::string& root = "");

// What sizes a process's scratch: the rows of its largest forward pass, the
// threads that each keep their own expert scratch, the sequences it decodes.
struct ScratchShape {
  uint64_t chunk = kPlanChunkTokens;  // --chunk: rows of a prefill chunk
  uint32_t threads = 1;               // --threads: the compute pool, caller included
  uint32_t sequences = 1;             // serve --parallel: rows of a batched step, logits rows
};

// The scratch the engine allocates for its largest forward pass, counted
// buffer by buffer from compute/model/transformer.h and compute/kernels. With
// rows = max(chunk, sequences), h = hidden, e = expert_hidden(), w =
// expert_width, d = max(dense_width of a model with dense layers,
// shared_width), in f32 unless noted:
// - the chunk's rows × (3h + 2d + (top_k + 2)·e + K3's latent e and stored
//   blocks + the mixer's scratch (ModelConfig::mixer_scratch_floats)), the
//   router's logits, attention scores heads × context, the routing of each
//   row at each MoE layer, the int8 activations of one matmul (bytes);
// - the gate and up RVQ tables of every row: int16 codes (f32 activations;
//   int8 ones take half, counted at int16 so that a budget means the same to
//   sluice-io as to its clients whatever their mode), 2 bytes per 4 columns ×
//   2 stages × 64 entries, and an f32 scale per 128 columns;
// - per thread: one expert's rows (rows × (2e + 3w)), its down table for
//   kPlanTableTokensPerExpert rows, and a decode-once tile and the int8
//   inputs of one decode-once call (rvq_decoded.cpp);
// - logits: a chunk's rows (eval scores every position) and one row per sequence.
uint64_t plan_scratch_bytes(const ModelConfig& config, uint32_t context, const ScratchShape& shape);
// K3's vision tower as the converter stores it plus its activations at
// kMaxImagePatches (VisionConfig::activation_floats); 0 without a tower.
uint64_t plan_vision_bytes(const ModelConfig& config);

// What the plan needs from a container's manifest.
struct PlanInputs {
  std::string model;            // names the container in errors
  uint64_t resident_bytes = 0;  // trunk.bin + codebooks.bin, less what stays on disk
  uint64_t embedding_disk_bytes = 0;  // see MemoryPlan
  uint64_t top_k = 0;
  uint64_t moe_layers = 0;
  uint64_t record_stride = 0;   // the largest of any MoE layer
  uint64_t cache_tables_bytes = 0;  // a segment of the minimum cache, less its slots
  uint64_t full_cache_bytes = 0;    // a segment holding every expert; 0: unknown, no cap
  // The slots a worker carves out of a segment of this many bytes (the
  // segment's tables grow with the slots); empty: (bytes − tables) / stride.
  std::function<uint64_t(uint64_t cache_bytes)> slots_in;
};
// The segment's tables are sized for `max_clients` clients and a mailbox of
// `mailbox_rows` rows.
PlanInputs plan_inputs(const Container& container, uint32_t max_clients, uint32_t mailbox_rows);
// The same from a Hugging Face config alone, before anything is downloaded:
// the trunk and codebooks as the converter would write them, records of
// the family's expert shape. `name` names the config in errors.
PlanInputs plan_inputs(const ModelConfig& config, const std::string& name, uint32_t max_clients,
                       uint32_t mailbox_rows);

// The trunk as the converter stores it, by component (embeddings, lm_head,
// attention, dense_ffn, routers, shared_experts, norms), and the parameter
// counts: total, routed experts, and active per token (trunk + top-k
// experts of every MoE layer).
nlohmann::json model_breakdown(const ModelConfig& config);

struct PlanRequest {
  uint32_t context = 4096;
  // The computing process: its prefill chunk, threads and table layout
  // (plan_scratch_bytes), the sequences it holds (serve --parallel) and the
  // copies of a sequence's state it keeps (serve's saved prompt, a session
  // being saved).
  ScratchShape scratch;
  uint32_t saved_states = 0;
  std::optional<uint64_t> budget_bytes;  // as given by --budget
  bool force = false;                    // --force: take a given budget above the usable memory
  bool images = false;                   // prompts with images: the vision tower is resident too
  bool half_latents = true;              // MLA caches halves (int8 trunk activations; f32 ones cache f32)
  // The segment the cache lives in (read by the Container overload only).
  uint32_t max_clients = ioworker::WorkerOptions{}.max_clients;
  uint32_t mailbox_rows = ioworker::WorkerOptions{}.mailbox_rows;
};

// The floor and working set of `container` at request.context, and the
// budget: the given one (refused with the whole plan in the Error when it is
// under the floor, or above the usable memory without request.force; one
// less than a page above it is the usable memory, since the kernel keeps a
// cgroup limit written as the budget in whole pages), else
// the floor with a cache of every expert when that fits under 7/8 of
// ram.usable_bytes, else the largest of floor + 3, 2, 1 working sets that
// does, else the floor. The cache never exceeds full_cache_bytes.
MemoryPlan plan_memory(const PlanInputs& inputs, const ModelConfig& config, const PlanRequest& request,
                       const UsableRam& ram);
MemoryPlan plan_memory(const Container& container, const ModelConfig& config, const PlanRequest& request,
                       const UsableRam& ram);

// The plan as the commands ask for it: `budget` as --budget gives it (empty:
// choose one), at `context` as --ctx gives it (0: the model's default), for
// a segment of `shape` (its budget_bytes and context are ignored; its force
// is --force). Its
// cache_bytes is what `sluice run`, sluice-io and the benchmarks size the
// cache with.
MemoryPlan plan_for(const Container& container, const std::string& budget, uint32_t context = 0,
                    const PlanRequest& shape = {});
// The same for a machine of `ram` bytes (std::nullopt: this one) and, when
// `container` is null, for `config` alone.
MemoryPlan plan_for(const Container* container, const ModelConfig& config, const std::string& name,
                    const std::string& budget, uint32_t context, std::optional<uint64_t> ram,
                    const PlanRequest& shape = {});

// Parses a size with an optional K/M/G/T suffix (1024-based, optional
// trailing "B" or "iB"); `flag` names the option in the error.
uint64_t parse_size(std::string_view text, std::string_view flag);

// "1.50 GiB" style, for people.
std::string format_bytes(uint64_t bytes);

// The plan as lines for people, and as JSON for tools.
std::string describe_plan(const MemoryPlan& plan);
nlohmann::json plan_to_json(const MemoryPlan& plan);

}  // namespace sluice
