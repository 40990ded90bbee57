// compute/cli/commands.h: each sluice subcommand lives in its own file and
// registers itself on the application here; main.cpp only wires them.
#pragma once

#include <vector>

#include <CLI/CLI.hpp>

namespace sluice::cli {

// Thrown by a command that has already told the user what happened and only
// needs the process to end with this status (e.g. verify found damage).
struct ExitStatus {
  int code;
};

void add_convert_command(CLI::App& app);
void add_info_command(CLI::App& app);
void add_verify_command(CLI::App& app);
void add_tokenize_commands(CLI::App& app);  // tokenize and detokenize
void add_bench_command(CLI::App& app);
void add_plan_command(CLI::App& app);
void add_stats_command(CLI::App& app);
void add_template_command(CLI::App& app);  // in cmd_template.cpp
void add_bench_io(CLI::App& bench);  // `sluice bench io`, in bench_io.cpp
void add_run_command(CLI::App& app);
void add_eval_command(CLI::App& app);

// The benchmarks report medians (the machine is shared and noisy): of an even
// count, the mean of the middle two. 0 when empty.
double median(std::vector<double> values);

}  // namespace sluice::cli
