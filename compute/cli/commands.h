// compute/cli/commands.h: each sluice subcommand lives in its own file and
// registers itself on the application here; main.cpp only wires them.
#pragma once

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <string>
#include <utility>
#include <vector>

namespace sluice::cli {

// Thrown by a command that has already told the user what happened and only
// needs the process to end with this status (e.g. verify found damage).
struct ExitStatus {
  int code;
};

// An argument the parser could not judge (flags that exclude each other, a
// prompt too long for the context): reported like a parse error, one line
// "sluice: error: ..." and exit status 2.
template <typename... Args>
[[noreturn]] void usage_error(fmt::format_string<Args...> format, Args&&... args) {
  throw CLI::ValidationError(fmt::format(format, std::forward<Args>(args)...));
}

// Validators shared by the commands: a count of at least 1 (--ctx, --threads,
// --readers, ...) and a size --budget accepts (K/M/G/T; never empty).
CLI::Validator at_least_one();
CLI::Validator memory_size();

void add_convert_command(CLI::App& app);
void add_synth_command(CLI::App& app);  // in cmd_synth.cpp
void add_info_command(CLI::App& app);
void add_verify_command(CLI::App& app);
void add_tokenize_commands(CLI::App& app);  // tokenize and detokenize
void add_bench_command(CLI::App& app);
void add_plan_command(CLI::App& app);
void add_stats_command(CLI::App& app);
void add_template_command(CLI::App& app);  // in cmd_template.cpp
void add_chat_command(CLI::App& app);      // in cmd_chat.cpp
void add_bench_io(CLI::App& bench);  // `sluice bench io`, in bench_io.cpp
void add_run_command(CLI::App& app);
void add_eval_command(CLI::App& app);

// The benchmarks report medians (the machine is shared and noisy): of an even
// count, the mean of the middle two. 0 when empty.
double median(std::vector<double> values);

}  // namespace sluice::cli
