// tests/ctl/memory_plan_test.cpp: the budget rule, --budget parsing and the
// cgroup v1/v2 walk behind usable RAM, on fake /proc and /sys trees. Expected
// numbers are written from design.md's formulas, never taken from the code.
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>

#include "compute/kernels/dispatch.h"
#include "compute/kernels/rvq.h"
#include "compute/kernels/rvq_crossover.h"
#include "ioworker/memory_plan.h"
#include "ioworker/worker.h"
#include "proto/container.h"
#include "proto/error.h"
#include "proto/model_config.h"
#include "tests/ctl/tiny_container.h"

namespace fs = std::filesystem;
using namespace sluice;

namespace {

constexpr uint64_t kKiB = 1024, kMiB = kKiB * 1024, kGiB = kMiB * 1024;

class FakeRoot {
 public:
  FakeRoot() {
    path_ = fs::temp_directory_path() / ("sluice-ctl-plan-" + std::to_string(::getpid()) + "-" +
                                         std::to_string(counter_++));
    fs::create_directories(path_);
  }
  ~FakeRoot() { fs::remove_all(path_); }
  void write(const std::string& relative, const std::string& text) const {
    const fs::path file = path_ / relative.substr(1);
    fs::create_directories(file.parent_path());
    std::ofstream(file) << text;
  }
  std::string root() const { return path_.string(); }

 private:
  static inline int counter_ = 0;
  fs::path path_;
};

const char* kMeminfo16G = "MemTotal:       16777216 kB\nMemFree:         1000 kB\n";
const char* kV1Mounts =
    "30 22 0:27 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
    "31 30 0:28 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n"
    "34 30 0:31 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
    "40 30 0:37 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";
const char* kV1Unlimited = "9223372036854771712\n";

ModelConfig small_config() {
  ModelConfig config;
  config.vocab = 1000;
  config.hidden = 64;
  config.layers = 4;
  config.gqa.heads = 8;
  config.gqa.kv_heads = 2;
  config.gqa.head_dim = 16;
  config.dense_width = 0;
  config.expert_width = 32;
  config.experts = 16;
  config.top_k = 4;
  config.layer_is_moe.assign(4, true);
  return config;
}

PlanInputs small_inputs() {
  PlanInputs inputs;
  inputs.model = "tiny.sluice";
  inputs.resident_bytes = 3 * kMiB;
  inputs.top_k = 4;
  inputs.moe_layers = 4;
  inputs.record_stride = 8192;
  return inputs;
}

// The scratch of small_config() (hidden 64, experts' width 32, top-4 of 16,
// 8 query and 2 KV heads of 16, vocabulary 1000, 4 MoE layers) at `ctx`,
// written out buffer by buffer from transformer.h and the kernels for a
// 64-row chunk.
uint64_t expected_scratch(uint64_t ctx, uint64_t threads = 1, uint64_t sequences = 1) {
  const uint64_t rows = 64;
  // x, normed, proj; expert_out (top-k rows), routed, table_input; the
  // mixer's q, its rotated copy, k and v.
  const uint64_t row_floats = 3 * 64 + 4 * 64 + 2 * 64 + (2 * 8 * 16 + 2 * 2 * 16);
  const uint64_t routing =
      4 * (48 + 32 + 4 * 8);  // per MoE layer: two vectors of top-k ids and weights
  const uint64_t int8 = rows * 64 + rows * 2 * 4;  // codes of the widest row, a scale per 32
  // A token's table: int16 codes (f32 activations; int8 ones take half) per
  // 4 columns × 2 stages × 64 entries, and an f32 scale per 128 columns.
  const uint64_t gate_up_table = (64 / 4) * 2 * 64 * 2 + 1 * 4;
  const uint64_t shared =
      (rows * row_floats + 16) * 4 + rows * routing + int8 + 2 * rows * gate_up_table;
  const uint64_t down_table = (32 / 4) * 2 * 64 * 2 + 1 * 4;
  const uint64_t tile = 64 * 64 * 4;  // 64 rows (the most) of 64 decoded columns
  // The int8 tiles' inputs: each row's 64 columns as one whole 128-column
  // group of bytes and its scale.
  const uint64_t tile_inputs = rows * (128 + 4);
  // Each thread's attention: a pass's scores (8 heads × ctx at most), and one
  // kv head's group (4 heads of 16) of queries and outputs, and their counts.
  const uint64_t attention = (8 * ctx + rows * (2 * 4 * 16 + 4)) * 4;
  const uint64_t per_thread = rows * (2 * 64 + 3 * 32) * 4 + rows * 4 + 64 * down_table + tile +
                              tile_inputs + attention;
  const uint64_t logits = (rows + sequences) * 1000 * 4;
  return shared + threads * per_thread + logits;
}

// design.md's floor written out for small_config()/small_inputs() at `ctx`.
uint64_t expected_floor(uint64_t ctx) {
  const uint64_t kv =
      4 * ctx * 2 * 16 * 2 * 4;  // layers × ctx × kv_heads × head_dim × (K, V) × f32
  const uint64_t min_cache = 2 * 4 * 8192;
  const uint64_t process = 8 * kMiB + 1000 * 224;  // program and libraries, the tokenizer by vocabulary entry
  return 3 * kMiB + kv + expected_scratch(ctx) + process + min_cache;
}

UsableRam ram_of(uint64_t bytes) { return {bytes, bytes, "test"}; }

}  // namespace

TEST_CASE("parse_size: 1024-based suffixes, bad ones name the flag") {
  CHECK(parse_size("100", "--budget") == 100);
  CHECK(parse_size("4K", "--budget") == 4 * kKiB);
  CHECK(parse_size("512m", "--budget") == 512 * kMiB);
  CHECK(parse_size("3G", "--budget") == 3 * kGiB);
  CHECK(parse_size("1.5G", "--budget") == 3 * kGiB / 2);
  CHECK(parse_size("2TiB", "--budget") == 2 * 1024 * kGiB);
  CHECK(parse_size("8GB", "--budget") == 8 * kGiB);
  for (const char* bad : {"12X", "", "G", "1.2.3G", "-4G", "5 GQ", "1e3"}) {
    CAPTURE(bad);
    try {
      parse_size(bad, "--budget");
      FAIL("accepted");
    } catch (const Error& e) {
      CHECK(std::string(e.what()).find("--budget") != std::string::npos);
    }
  }
}

TEST_CASE("plan: floor and working set follow the formula") {
  const ModelConfig config = small_config();
  PlanRequest request;
  request.context = 256;
  const MemoryPlan plan = plan_memory(small_inputs(), config, request, ram_of(64 * kGiB));
  CHECK(plan.kv_bytes == 4 * 256 * 2 * 16 * 2 * 4);
  CHECK(plan.min_cache_bytes == 2 * 4 * 8192);
  CHECK(plan.floor_bytes == expected_floor(256));
  CHECK(plan.working_set_bytes == 4 * 4 * 8192);
  // A longer context only grows the KV cache and the attention scores.
  request.context = 512;
  const MemoryPlan longer = plan_memory(small_inputs(), config, request, ram_of(64 * kGiB));
  CHECK(longer.floor_bytes == expected_floor(512));
}

TEST_CASE(
    "plan: every thread keeps its own expert scratch, every sequence and saved state its own "
    "state") {
  const ModelConfig config = small_config();
  PlanRequest request;
  request.context = 256;
  const MemoryPlan one = plan_memory(small_inputs(), config, request, ram_of(64 * kGiB));
  CHECK(one.threads == 1);
  CHECK(one.scratch_bytes == expected_scratch(256));
  request.scratch.threads = 3;
  const MemoryPlan three = plan_memory(small_inputs(), config, request, ram_of(64 * kGiB));
  CHECK(three.scratch_bytes == expected_scratch(256, 3));
  CHECK(three.floor_bytes - one.floor_bytes == expected_scratch(256, 3) - expected_scratch(256));
  CHECK(describe_plan(three).find("3 threads") != std::string::npos);
  // serve --parallel 2: two sequences, each with its saved prompt state.
  request.scratch.threads = 1;
  request.scratch.sequences = 2;
  request.saved_states = 2;
  const MemoryPlan served = plan_memory(small_inputs(), config, request, ram_of(64 * kGiB));
  const uint64_t state = 4 * 256 * 2 * 16 * 2 * 4;
  CHECK(served.sequence_state_bytes == state);
  CHECK(served.kv_bytes == 4 * state);
  CHECK(served.scratch_bytes == expected_scratch(256, 1, 2));
  CHECK(served.floor_bytes - one.floor_bytes ==
        3 * state + expected_scratch(256, 1, 2) - expected_scratch(256));
  CHECK(plan_to_json(served)["sequences"] == 2);
  // A longer chunk grows every row's part.
  request = PlanRequest{};
  request.context = 256;
  request.scratch.chunk = 128;
  CHECK(plan_memory(small_inputs(), config, request, ram_of(64 * kGiB)).scratch_bytes >
        expected_scratch(256) * 3 / 2);
}

TEST_CASE(
    "plan: no ISA serves more tokens of an expert through a down table than the plan counts") {
  for (const kernels::Isa isa :
       {kernels::Isa::kScalar, kernels::Isa::kAvx2, kernels::Isa::kAvx512}) {
    CAPTURE(kernels::isa_name(isa));
    CHECK(kernels::rvq_default_crossover(isa) - 1 <= kPlanTableTokensPerExpert);
  }
  CHECK(kernels::kRvqCrossoverMax - 1 <= kPlanTableTokensPerExpert);
  CHECK(kernels::kRvqGroupVectors == kPlanTableGroupVectors);
}

TEST_CASE("plan: the floor's minimum cache is a whole segment, so a budget at the floor starts a worker") {
  const Container container = Container::open(testing::tiny_container());
  const ModelConfig config = ModelConfig::from_json(container.arch(), container.config());
  PlanRequest request;
  request.context = 256;
  const MemoryPlan chosen = plan_memory(container, config, request, ram_of(64 * kGiB));
  CHECK(chosen.cache_tables_bytes > 0);
  CHECK(chosen.min_cache_bytes == ioworker::min_cache_bytes(container, ioworker::WorkerOptions{}.max_clients));
  request.budget_bytes = chosen.floor_bytes;
  const MemoryPlan at_floor = plan_memory(container, config, request, ram_of(64 * kGiB));
  CHECK(at_floor.cache_bytes == chosen.min_cache_bytes);
  ioworker::WorkerOptions options;
  options.cache_bytes = at_floor.cache_bytes;
  options.quiet = true;
  const ioworker::Worker worker(container, options);
  CHECK(worker.geometry().slot_count == 2 * container.top_k());
}

TEST_CASE("plan: the budget steps down in whole working sets under 7/8 of usable RAM") {
  const ModelConfig config = small_config();
  PlanRequest request;
  request.context = 256;
  const uint64_t floor = expected_floor(256);
  const uint64_t ws = 4 * 4 * 8192;
  // usable × 7/8 exactly at floor + n·ws picks n; one byte less picks n − 1.
  for (uint32_t n = 1; n <= 3; ++n) {
    const uint64_t usable = (floor + n * ws) / 7 * 8 + 8;  // cap = usable/8×7 ≥ floor + n·ws
    const MemoryPlan plan = plan_memory(small_inputs(), config, request, ram_of(usable));
    CHECK(plan.working_sets == n);
    CHECK(plan.budget_bytes == floor + n * ws);
    CHECK(plan.cache_bytes == n * ws + 2 * 4 * 8192);
    CHECK(plan.cache_slots == plan.cache_bytes / 8192);
    const MemoryPlan tighter = plan_memory(small_inputs(), config, request, ram_of((floor + n * ws - 1) / 7 * 8));
    CHECK(tighter.working_sets == n - 1);
  }
  // Plenty of RAM still stops at three working sets.
  CHECK(plan_memory(small_inputs(), config, request, ram_of(1024 * kGiB)).budget_bytes == floor + 3 * ws);
  // Not even the floor fits: the floor, and the cache is the minimum.
  const MemoryPlan starved = plan_memory(small_inputs(), config, request, ram_of(kMiB));
  CHECK(starved.budget_bytes == floor);
  CHECK(starved.cache_bytes == 2 * 4 * 8192);
  CHECK(describe_plan(starved).find("does not fit") != std::string::npos);
}

TEST_CASE("plan: a given budget is used as given; under the floor it is refused with the plan") {
  const ModelConfig config = small_config();
  PlanRequest request;
  request.context = 256;
  const uint64_t floor = expected_floor(256);
  request.budget_bytes = floor + 100000;
  const MemoryPlan plan = plan_memory(small_inputs(), config, request, ram_of(64 * kGiB));
  CHECK(plan.budget_given);
  CHECK(plan.budget_bytes == floor + 100000);
  CHECK(plan.cache_bytes == 100000 + 2 * 4 * 8192);
  request.budget_bytes = floor - 1;
  try {
    plan_memory(small_inputs(), config, request, ram_of(64 * kGiB));
    FAIL("accepted a budget under the floor");
  } catch (const Error& e) {
    const std::string message = e.what();
    CHECK(message.find("--budget") != std::string::npos);
    CHECK(message.find("under the floor") != std::string::npos);
    CHECK(message.find("kv cache") != std::string::npos);
    CHECK(message.find("working set") != std::string::npos);
  }
}

TEST_CASE("plan: a given budget above the usable memory is refused with the plan unless forced") {
  const ModelConfig config = small_config();
  PlanRequest request;
  request.context = 256;
  request.budget_bytes = 1024 * kGiB;
  try {
    plan_memory(small_inputs(), config, request, ram_of(16 * kGiB));
    FAIL("accepted a budget above the usable memory");
  } catch (const Error& e) {
    const std::string message = e.what();
    CHECK(message.find("above the usable memory of 16.00 GiB") != std::string::npos);
    CHECK(message.find("--force") != std::string::npos);
    CHECK(message.find("floor") != std::string::npos);
  }
  request.force = true;
  const MemoryPlan forced = plan_memory(small_inputs(), config, request, ram_of(16 * kGiB));
  CHECK(forced.forced);
  CHECK(forced.budget_bytes == 1024 * kGiB);
  // At the usable memory exactly it is no longer "above".
  request.force = false;
  request.budget_bytes = 16 * kGiB;
  CHECK_FALSE(plan_memory(small_inputs(), config, request, ram_of(16 * kGiB)).forced);
}

TEST_CASE(
    "plan: a budget written as the cgroup's limit, which the kernel keeps in whole pages, is that "
    "limit") {
  const ModelConfig config = small_config();
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  const uint64_t limit =
      2 * kGiB;  // what memory.limit_in_bytes reads back after writing `limit + page - 1`
  PlanRequest request;
  request.context = 256;
  request.budget_bytes = limit + page - 1;
  const MemoryPlan plan = plan_memory(small_inputs(), config, request, ram_of(limit));
  CHECK(plan.budget_given);
  CHECK_FALSE(plan.forced);
  CHECK(plan.budget_bytes == limit);
  CHECK(plan.cache_bytes == limit - expected_floor(256) + 2 * 4 * 8192);
  // A whole page above is above the usable memory.
  request.budget_bytes = limit + page;
  try {
    plan_memory(small_inputs(), config, request, ram_of(limit));
    FAIL("accepted a budget a page above the usable memory");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("above the usable memory") != std::string::npos);
  }
  // Rounded down to the limit, a budget at the floor falls under it: refused naming both.
  const uint64_t floor_limit = expected_floor(256) / page * page;
  request.budget_bytes = expected_floor(256);
  if (floor_limit < expected_floor(256)) {
    try {
      plan_memory(small_inputs(), config, request, ram_of(floor_limit));
      FAIL("accepted a limit under the floor");
    } catch (const Error& e) {
      CHECK(std::string(e.what()).find("in whole pages), under the floor") != std::string::npos);
    }
  }
}

TEST_CASE("plan: the cache never outgrows the container, and caches every expert when they fit") {
  const Container container = Container::open(testing::tiny_container());
  const ModelConfig config = ModelConfig::from_json(container.arch(), container.config());
  const uint32_t records = static_cast<uint32_t>(container.record_count());
  const uint32_t max_clients = ioworker::WorkerOptions{}.max_clients;
  const uint64_t every_expert = ioworker::cache_bytes_for_slots(container, records, max_clients);
  PlanRequest request;
  request.context = 256;
  // Plenty of memory: the default holds every expert, and no more.
  const MemoryPlan roomy = plan_memory(container, config, request, ram_of(64 * kGiB));
  CHECK(roomy.all_experts);
  CHECK(roomy.cache_bytes == every_expert);
  CHECK(roomy.cache_slots == records);
  CHECK(roomy.budget_bytes == roomy.floor_bytes - roomy.min_cache_bytes + every_expert);
  // A huge given budget still makes a cache of the container's size.
  request.budget_bytes = 32 * kGiB;
  const MemoryPlan given = plan_memory(container, config, request, ram_of(64 * kGiB));
  CHECK(given.cache_bytes == every_expert);
  CHECK(given.budget_bytes == 32 * kGiB);
  // Too little memory for every expert: the working-set rule again.
  request.budget_bytes.reset();
  const uint64_t usable = (roomy.floor_bytes + roomy.working_set_bytes) / 7 * 8 + 8;
  const MemoryPlan tight = plan_memory(container, config, request, ram_of(usable));
  CHECK_FALSE(tight.all_experts);
  CHECK(tight.working_sets == 1);
  CHECK(tight.cache_bytes < every_expert);
}

TEST_CASE("plan: the slot count is the one the worker makes of the cache") {
  const Container container = Container::open(testing::tiny_container());
  const ModelConfig config = ModelConfig::from_json(container.arch(), container.config());
  PlanRequest at_256;
  at_256.context = 256;
  const MemoryPlan floor_plan = plan_memory(container, config, at_256, ram_of(kMiB));
  // Budgets between the floor and every expert, where the index and rings grow with the slots.
  for (uint64_t extra :
       {uint64_t{0}, floor_plan.record_stride * 5 + 17, floor_plan.record_stride * 9}) {
    CAPTURE(extra);
    PlanRequest request = at_256;
    request.budget_bytes = floor_plan.floor_bytes + extra;
    const MemoryPlan plan = plan_memory(container, config, request, ram_of(64 * kGiB));
    ioworker::WorkerOptions options;
    options.cache_bytes = plan.cache_bytes;
    options.quiet = true;
    const ioworker::Worker worker(container, options);
    CHECK(worker.geometry().slot_count == plan.cache_slots);
  }
}

TEST_CASE("usable RAM: physical memory when no cgroup limits") {
  FakeRoot fake;
  fake.write("/proc/meminfo", kMeminfo16G);
  const UsableRam ram = read_usable_ram(fake.root());
  CHECK(ram.physical_bytes == 16 * kGiB);
  CHECK(ram.usable_bytes == 16 * kGiB);
  CHECK(ram.source == "physical memory");
}

TEST_CASE("usable RAM: cgroup v1 memory.limit_in_bytes of the process's cgroup and its ancestors") {
  FakeRoot fake;
  fake.write("/proc/meminfo", kMeminfo16G);
  fake.write("/proc/self/cgroup", "9:name=systemd:/\n4:memory:/jobs/job7\n1:cpu:/\n0::/\n");
  fake.write("/proc/self/mountinfo", kV1Mounts);
  fake.write("/sys/fs/cgroup/memory/memory.limit_in_bytes", kV1Unlimited);
  fake.write("/sys/fs/cgroup/memory/jobs/job7/memory.limit_in_bytes", kV1Unlimited);
  SUBCASE("unlimited everywhere") {
    CHECK(read_usable_ram(fake.root()).usable_bytes == 16 * kGiB);
  }
  SUBCASE("the parent's limit applies") {
    fake.write("/sys/fs/cgroup/memory/jobs/memory.limit_in_bytes", std::to_string(4 * kGiB) + "\n");
    const UsableRam ram = read_usable_ram(fake.root());
    CHECK(ram.usable_bytes == 4 * kGiB);
    CHECK(ram.source == "/sys/fs/cgroup/memory/jobs/memory.limit_in_bytes");
  }
  SUBCASE("the smallest of several limits") {
    fake.write("/sys/fs/cgroup/memory/jobs/memory.limit_in_bytes", std::to_string(4 * kGiB));
    fake.write("/sys/fs/cgroup/memory/jobs/job7/memory.limit_in_bytes", std::to_string(3 * kGiB));
    CHECK(read_usable_ram(fake.root()).usable_bytes == 3 * kGiB);
  }
  SUBCASE("a limit above physical memory changes nothing") {
    fake.write("/sys/fs/cgroup/memory/jobs/memory.limit_in_bytes", std::to_string(64 * kGiB));
    CHECK(read_usable_ram(fake.root()).source == "physical memory");
  }
  SUBCASE("a cpu cgroup's files are not memory limits") {
    fake.write("/sys/fs/cgroup/cpu/memory.limit_in_bytes", std::to_string(kGiB));
    CHECK(read_usable_ram(fake.root()).usable_bytes == 16 * kGiB);
  }
}

TEST_CASE("usable RAM: cgroup v2 memory.max and memory.high up to the mounted root") {
  FakeRoot fake;
  fake.write("/proc/meminfo", kMeminfo16G);
  fake.write("/proc/self/cgroup", "0::/user.slice/user-1000.slice/session-3.scope\n");
  fake.write("/proc/self/mountinfo",
             "25 20 0:22 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n");
  fake.write("/sys/fs/cgroup/user.slice/user-1000.slice/session-3.scope/memory.max", "max\n");
  fake.write("/sys/fs/cgroup/user.slice/user-1000.slice/session-3.scope/memory.high", "max\n");
  SUBCASE("no limits") { CHECK(read_usable_ram(fake.root()).usable_bytes == 16 * kGiB); }
  SUBCASE("memory.high of an ancestor") {
    fake.write("/sys/fs/cgroup/user.slice/memory.high", std::to_string(6 * kGiB) + "\n");
    fake.write("/sys/fs/cgroup/user.slice/user-1000.slice/memory.max", std::to_string(8 * kGiB) + "\n");
    const UsableRam ram = read_usable_ram(fake.root());
    CHECK(ram.usable_bytes == 6 * kGiB);
    CHECK(ram.source == "/sys/fs/cgroup/user.slice/memory.high");
  }
  SUBCASE("memory.max of the process's own cgroup") {
    fake.write("/sys/fs/cgroup/user.slice/user-1000.slice/session-3.scope/memory.max", std::to_string(2 * kGiB));
    CHECK(read_usable_ram(fake.root()).usable_bytes == 2 * kGiB);
  }
  SUBCASE("a limit above the mount point is not visible and not read") {
    fake.write("/sys/fs/memory.max", std::to_string(kGiB));
    CHECK(read_usable_ram(fake.root()).usable_bytes == 16 * kGiB);
  }
}

TEST_CASE("usable RAM: cgroup v2 mounted at a sub-hierarchy (cgroup namespace or container)") {
  FakeRoot fake;
  fake.write("/proc/meminfo", kMeminfo16G);
  fake.write("/proc/self/cgroup", "0::/machine/box/app\n");
  fake.write("/proc/self/mountinfo", "25 20 0:22 /machine/box /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n");
  fake.write("/sys/fs/cgroup/memory.max", std::to_string(5 * kGiB));
  fake.write("/sys/fs/cgroup/app/memory.max", std::to_string(7 * kGiB));
  CHECK(read_usable_ram(fake.root()).usable_bytes == 5 * kGiB);
}

TEST_CASE("usable RAM: a missing /proc/meminfo is an error naming it") {
  FakeRoot fake;
  try {
    read_usable_ram(fake.root());
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("/proc/meminfo") != std::string::npos);
  }
}

TEST_CASE("usable RAM on this machine is positive and at most physical memory") {
  const UsableRam ram = read_usable_ram();
  CHECK(ram.physical_bytes > 0);
  CHECK(ram.usable_bytes <= ram.physical_bytes);
}
