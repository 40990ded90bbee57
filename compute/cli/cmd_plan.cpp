// compute/cli/cmd_plan.cpp: `sluice plan (MODEL | --config config.json)
// [--ctx N] [--budget SIZE] [--ram SIZE] [--threads N] [--chunk N]
// [--parallel N] [--session] [--json]`: the floor, working set and budget of
// ioworker/memory_plan.h that a run with those flags uses, for a container
// (reading its manifest only, never the trunk) or for a Hugging Face config
// before any download, and what a 32, 64 and 128 GiB machine would get.
#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include <fmt/format.h>

#include "compute/cli/commands.h"
#include "compute/cli/run_options.h"
#include "ioworker/memory_plan.h"
#include "proto/container.h"
#include "proto/error.h"
#include "proto/model_config.h"

namespace sluice::cli {
namespace {

void print_breakdown(const nlohmann::json& model) {
  fmt::print("trunk by component:\n");
  for (const auto& [component, bytes] : model["trunk_bytes_by_component"].items()) {
    fmt::print("  {:<16} {}\n", component, format_bytes(bytes.get<uint64_t>()));
  }
  fmt::print("parameters       {:.3f} B in all, {:.3f} B routed experts, {:.3f} B active per token\n",
             model["params_total"].get<double>() / 1e9, model["params_routed_experts"].get<double>() / 1e9,
             model["params_active_per_token"].get<double>() / 1e9);
}

// The machines a user most often has, for the table of what each gets.
constexpr uint64_t kMachineGiB[] = {32, 64, 128};

// What a machine of each size in kMachineGiB gets: the budget the plan
// chooses there and the cache it leaves, in the model's working sets.
nlohmann::json machines_json(const Container* container, const ModelConfig& config, const std::string& name,
                             uint32_t context, const PlanRequest& shape) {
  nlohmann::json out = nlohmann::json::array();
  for (const uint64_t gib : kMachineGiB) {
    const uint64_t ram = gib << 30;
    const MemoryPlan plan = plan_for(container, config, name, "", context, ram, shape);
    const bool fits = plan.floor_bytes <= ram / 8 * 7;
    out.push_back({{"ram_bytes", ram},
                   {"fits", fits},
                   {"budget_bytes", plan.budget_bytes},
                   {"working_sets_above_floor", plan.working_sets},
                   {"all_experts", plan.all_experts},
                   {"cache_bytes", fits ? plan.cache_bytes : 0},
                   {"cache_working_sets",
                    fits ? double(plan.cache_bytes) / double(plan.working_set_bytes) : 0.0}});
  }
  return out;
}

void print_machines(const nlohmann::json& machines, const MemoryPlan& plan) {
  fmt::print("on a machine of (floor {}, working set {}):\n", format_bytes(plan.floor_bytes),
             format_bytes(plan.working_set_bytes));
  for (const nlohmann::json& m : machines) {
    const uint64_t gib = m["ram_bytes"].get<uint64_t>() >> 30;
    if (!m["fits"].get<bool>()) {
      fmt::print("  {:>4} GiB  the floor does not fit under 7/8 of it\n", gib);
      continue;
    }
    const uint32_t sets = m["working_sets_above_floor"].get<uint32_t>();
    const std::string chosen = m["all_experts"].get<bool>() ? "every expert"
                               : sets > 0 ? fmt::format("floor + {} working set{}", sets, sets == 1 ? "" : "s")
                                          : std::string("the floor");
    fmt::print("  {:>4} GiB  budget {} ({}), cache {} = {:.2f} working sets\n", gib,
               format_bytes(m["budget_bytes"].get<uint64_t>()), chosen,
               format_bytes(m["cache_bytes"].get<uint64_t>()), m["cache_working_sets"].get<double>());
  }
}

}  // namespace

void add_plan_command(CLI::App& app) {
  struct Options {
    std::string model;
    std::string config;
    uint32_t context = 0;
    std::string budget;
    std::string ram;
    bool force = false;
    bool images = false;
    bool json = false;
    size_t threads = 0;
    uint32_t chunk = kPlanChunkTokens;
    uint32_t parallel = 0;
    bool session = false;
  };
  auto options = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand(
      "plan", "Print the memory floor, working set and budget for a container, or for a config.json alone");
  auto* model = cmd->add_option("MODEL", options->model, "Container directory (NAME.sluice)");
  cmd->add_option("--config", options->config, "Plan from a Hugging Face config.json instead of a container")
      ->excludes(model);
  cmd->add_option(
         "--ctx", options->context,
         "Context length the mixers' state is sized for (default: the model's, at most 4096)")
      ->check(at_least_one());
  cmd->add_option("--budget", options->budget,
                  "Use this budget (K/M/G/T, 1024-based) instead of choosing one")
      ->check(memory_size());
  cmd->add_flag("--force", options->force,
                "Take a --budget above the usable memory (a budget equal to a cgroup's limit is "
                "not above it)");
  cmd->add_option("--ram", options->ram,
                  "Choose the budget for a machine with this much RAM (default: this one)")
      ->check(memory_size());
  cmd->add_flag("--images", options->images,
                "Plan for prompts with images: the vision tower (Kimi K3) is resident and in the floor");
  cmd->add_option("--threads", options->threads,
                  "Plan for this many compute threads, each keeping its own expert scratch "
                  "(default: what run "
                  "uses, SLUICE_THREADS or every core)")
      ->check(at_least_one());
  cmd->add_option("--chunk", options->chunk, "Plan for this prefill chunk (run's --chunk)")
      ->capture_default_str()
      ->check(at_least_one());
  cmd->add_option(
         "--parallel", options->parallel,
         "Plan for `sluice serve --parallel N`: N sequences, each with its saved prompt state, "
         "and the vision tower of a model that has one")
      ->check(CLI::Range(1u, 64u));
  cmd->add_flag("--session", options->session,
                "Plan for `run --session` or `chat` (its /save and /load): one copy more of the "
                "sequence's state");
  cmd->add_flag("--json", options->json, "Print JSON");
  cmd->callback([options] {
    if (options->model.empty() && options->config.empty())
      usage_error("give a container or --config config.json");
    std::optional<uint64_t> ram;
    if (!options->ram.empty()) ram = parse_size(options->ram, "--ram");
    std::optional<Container> container;
    ModelConfig config;
    std::string name;
    if (!options->model.empty()) {
      container.emplace(Container::open(options->model));
      config = ModelConfig::from_json(container->arch(), container->config());
      name = container->dir();
    } else {
      name = options->config;
      nlohmann::json parsed;
      try {
        parsed = nlohmann::json::parse(read_file(options->config, "--config"));
      } catch (const nlohmann::json::exception& e) {
        fail("{}: not valid JSON: {}", options->config, e.what());
      }
      config = ModelConfig::from_json(parsed, options->config);
    }
    PlanRequest shape = plan_shape(options->threads);
    shape.force = options->force;
    shape.images = options->images;
    shape.scratch.chunk = options->chunk;
    if (options->parallel > 0) {
      shape.scratch.sequences = options->parallel;
      shape.saved_states = options->parallel;
      shape.mailbox_rows = options->parallel;
      // serve loads a model's vision tower at its first image and keeps it.
      shape.images = shape.images || config.vision.has_value();
    }
    if (options->session) ++shape.saved_states;
    const MemoryPlan plan = plan_for(container ? &*container : nullptr, config, name,
                                     options->budget, options->context, ram, shape);
    const nlohmann::json breakdown = model_breakdown(config);
    const nlohmann::json machines =
        machines_json(container ? &*container : nullptr, config, name, options->context, shape);
    if (options->json) {
      nlohmann::json out = plan_to_json(plan);
      out["arch"] = config.arch;
      out["model"] = breakdown;
      out["cold_bytes_per_token"] = plan.working_set_bytes;
      out["machines"] = machines;
      fmt::print("{}\n", out.dump());
    } else {
      fmt::print("{}", describe_plan(plan));
      print_breakdown(breakdown);
      print_machines(machines, plan);
    }
  });
}

}  // namespace sluice::cli
