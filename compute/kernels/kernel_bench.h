// compute/kernels/kernel_bench.h: the measurements behind `sluice bench
// kernels`: RVQ experts and matrices, trunk q4/q8 matvec at real model shapes,
// and the memory read bandwidth of the same run. Prints nothing itself.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "compute/kernels/dispatch.h"

namespace sluice::kernels {

struct KernelBenchCase;

struct KernelBenchOptions {
  size_t threads = 1;
  double seconds_per_case =
      0.3;  // repeated runs of one case stop after this long (at least 3 runs)
  Isa isa = Isa::kScalar;
  bool alternatives = true;  // also time the RVQ alternatives (unshared tables)
  bool every_isa =
      true;  // also time the engine's cases at every other instruction set this CPU runs
  // Told each case as it is timed (progress for people); may be empty.
  std::function<void(const KernelBenchCase&)> on_case;
};

struct KernelBenchCase {
  std::string model;          // e.g. "olmoe-1b-7b"
  std::string kernel;         // e.g. "rvq expert", "rvq gate", "q4g128 q_proj"
  std::string shape;          // e.g. "3x[1024x2048] top-8"
  std::string variant;        // "engine" for what the engine runs, else the alternative's name
  std::string isa;            // the instruction set this case ran with
  uint64_t weights = 0;       // weights multiplied per run
  uint64_t packed_bytes = 0;  // stored bytes read per run (indices/ints plus scales)
  double median_seconds = 0;  // wall clock
  // CPU time of the whole process per run: on a shared, oversubscribed machine
  // this still measures the work (weights per CPU second = per-core speed).
  double median_cpu_seconds = 0;
  size_t runs = 0;
  // Achieved packed bytes/s (wall clock) ÷ the memory read bandwidth of the
  // same run: 1.0 means the kernel runs at the memory's speed.
  double compute_bound_ratio = 0;
};

struct KernelBenchReport {
  std::string isa;
  size_t threads = 0;
  uint64_t memory_buffer_bytes = 0;
  double memory_read_bytes_per_second = 0;  // median of full passes, all threads
  std::vector<KernelBenchCase> cases;
};

KernelBenchReport run_kernel_bench(const KernelBenchOptions& options);

}  // namespace sluice::kernels
