// compute/cli/cmd_bench.cpp: `sluice bench` and its subcommands. Each one is a
// single add_bench_<name> function wired in add_bench_command (kernels lives
// here; io, decode and replay get their own files). Measures, never asserts.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "compute/cli/commands.h"
#include "compute/kernels/dispatch.h"
#include "compute/kernels/kernel_bench.h"
#include "compute/kernels/thread_pool.h"
#include "proto/error.h"

namespace sluice::cli {

namespace {

nlohmann::json kernel_report_json(const kernels::KernelBenchReport& r) {
  nlohmann::json cases = nlohmann::json::array();
  for (const kernels::KernelBenchCase& c : r.cases) {
    const double wps = c.weights / c.median_seconds;
    const double per_core = c.weights / c.median_cpu_seconds;
    cases.push_back({{"model", c.model},
                     {"kernel", c.kernel},
                     {"shape", c.shape},
                     {"variant", c.variant},
                     {"isa", c.isa},
                     {"weights", c.weights},
                     {"packed_bytes", c.packed_bytes},
                     {"median_seconds", c.median_seconds},
                     {"median_cpu_seconds", c.median_cpu_seconds},
                     {"runs", c.runs},
                     {"weights_per_second", wps},
                     {"weights_per_cpu_second", per_core},
                     {"packed_bytes_per_second", c.packed_bytes / c.median_seconds},
                     {"compute_bound_ratio", c.compute_bound_ratio}});
  }
  return {{"isa", r.isa},
          {"threads", r.threads},
          {"memory_buffer_bytes", r.memory_buffer_bytes},
          {"memory_read_bytes_per_second", r.memory_read_bytes_per_second},
          {"cases", cases}};
}

// Gw/s is wall clock; Gw/cpu-s divides by the process's CPU time, the per-core
// speed that survives other jobs sharing the machine.
void print_kernel_report(const kernels::KernelBenchReport& r) {
  fmt::print("kernels {}, {} thread(s); memory read {:.1f} GB/s ({} MiB buffer)\n", r.isa, r.threads,
             r.memory_read_bytes_per_second / 1e9, r.memory_buffer_bytes >> 20);
  fmt::print("{:<16} {:<18} {:<24} {:<31} {:<6} {:>8} {:>8} {:>6} {:>9} {:>7} {:>4}\n", "model", "kernel",
             "shape", "variant", "isa", "wall ms", "cpu ms", "Gw/s", "Gw/cpu-s", "pk GB/s", "%mem");
  for (const kernels::KernelBenchCase& c : r.cases) {
    const double gb = c.packed_bytes / c.median_seconds / 1e9;
    fmt::print("{:<16} {:<18} {:<24} {:<31} {:<6} {:>8.3f} {:>8.3f} {:>6.2f} {:>9.2f} {:>7.2f} {:>4.0f}\n", c.model,
               c.kernel, c.shape, c.variant, c.isa, c.median_seconds * 1e3, c.median_cpu_seconds * 1e3,
               c.weights / c.median_seconds / 1e9, c.weights / c.median_cpu_seconds / 1e9, gb,
               100.0 * c.compute_bound_ratio);
  }
}

void add_bench_kernels(CLI::App& bench) {
  struct Flags {
    bool json = false;
    std::optional<size_t> threads;
    double seconds = 0.3;
    bool no_alternatives = false;
  };
  auto flags = std::make_shared<Flags>();
  CLI::App* cmd = bench.add_subcommand(
      "kernels", "time the RVQ expert, trunk q4/q8 and attention kernels at real model shapes, next to memory bandwidth");
  cmd->add_flag("--json", flags->json, "print JSON instead of a table");
  cmd->add_option("--threads", flags->threads,
                  "worker threads (default: SLUICE_THREADS, else all cores)")
      ->check(at_least_one());
  cmd->add_option("--seconds", flags->seconds, "time budget per case; each case runs at least 3 times")
      ->check(CLI::Range(0.0, 600.0));
  cmd->add_flag("--no-alternatives", flags->no_alternatives,
                "time only what the engine runs (at the engine's instruction set only)");
  cmd->callback([flags] {
    kernels::KernelBenchOptions options;
    options.threads = kernels::resolve_thread_count(flags->threads);
    options.seconds_per_case = flags->seconds;
    options.isa = kernels::isa_from_environment();
    options.alternatives = !flags->no_alternatives;
    options.every_isa = !flags->no_alternatives;
    const bool terminal = ::isatty(STDERR_FILENO) == 1;
    size_t timed = 0;
    if (terminal) {
      options.on_case = [&timed](const kernels::KernelBenchCase& c) {
        fmt::print(stderr, "\r\033[Kbench kernels: {} cases timed; {} {} ({})", ++timed, c.model,
                   c.kernel, c.variant);
        std::fflush(stderr);
      };
    }
    const kernels::KernelBenchReport report = kernels::run_kernel_bench(options);
    if (terminal) fmt::print(stderr, "\r\033[K");
    if (flags->json)
      fmt::print("{}\n", kernel_report_json(report).dump(2));
    else
      print_kernel_report(report);
  });
}

}  // namespace

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n == 0 ? 0.0 : n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

void add_bench_replay(CLI::App& bench);  // bench_replay.cpp
void add_bench_decode(CLI::App& bench);  // bench_decode.cpp
void add_bench_batch(CLI::App& bench);   // bench_batch.cpp
void add_bench_mixer(CLI::App& bench);   // bench_mixer.cpp

void add_bench_command(CLI::App& app) {
  CLI::App* bench =
      app.add_subcommand("bench",
                         "measure this machine and a container: kernels, io, replay "
                         "(cache policy), decode (lookahead), batch (sequences together), mixer (attention and KDA "
                         "at a context length)");
  bench->require_subcommand(1);
  add_bench_kernels(*bench);
  add_bench_io(*bench);
  add_bench_replay(*bench);
  add_bench_decode(*bench);
  add_bench_batch(*bench);
  add_bench_mixer(*bench);
}

}  // namespace sluice::cli
