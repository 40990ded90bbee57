// compute/cli/cmd_plan.cpp: `sluice plan MODEL [--ctx N] [--budget SIZE]
// [--json]`: the floor, working set and budget of ioworker/memory_plan.h
// for a container. It reads the manifest only; it never loads the trunk.
#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include <fmt/format.h>

#include "compute/cli/commands.h"
#include "ioworker/memory_plan.h"
#include "proto/container.h"

namespace sluice::cli {

void add_plan_command(CLI::App& app) {
  struct Options {
    std::string model;
    uint32_t context = 0;
    std::string budget;
    bool force = false;
    bool json = false;
  };
  auto options = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand("plan", "Print the memory floor, working set and budget for a container");
  cmd->add_option("MODEL", options->model, "Container directory (NAME.sluice)")->required();
  cmd->add_option("--ctx", options->context,
                  "Context length the KV cache is sized for (default: the model's, at most 4096)")
      ->check(at_least_one());
  cmd->add_option("--budget", options->budget,
                  "Use this budget (K/M/G/T, 1024-based) instead of choosing one")
      ->check(memory_size());
  cmd->add_flag("--force", options->force, "Take a --budget above the usable memory");
  cmd->add_flag("--json", options->json, "Print JSON");
  cmd->callback([options] {
    PlanRequest shape;
    shape.force = options->force;
    const MemoryPlan plan =
        plan_for(Container::open(options->model), options->budget, options->context, shape);
    if (options->json) {
      fmt::print("{}\n", plan_to_json(plan).dump());
    } else {
      fmt::print("{}", describe_plan(plan));
    }
  });
}

}  // namespace sluice::cli
