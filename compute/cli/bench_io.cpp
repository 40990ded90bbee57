// compute/cli/bench_io.cpp: `sluice bench io MODEL [--json]`: the disk's raw
// O_DIRECT bandwidth at the record size (random whole-record reads over the
// banks, 1 to 32 threads) next to what the I/O worker sustains serving a decode
// whose experts miss, and their ratio. Measures, never asserts; no compute.
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "compute/cli/bench_disk.h"
#include "compute/cli/commands.h"
#include "ioworker/worker.h"
#include "proto/aligned_buffer.h"
#include "proto/container.h"
#include "proto/error.h"
#include "proto/file_io.h"
#include "shm/client.h"

namespace sluice::cli {
namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

// Random whole-record reads, each thread with its own descriptors and buffer.
RawResult raw_reads(const Container& container, uint32_t threads, double seconds, bool& all_direct) {
  const auto& layers = container.moe_layers();
  std::atomic<uint64_t> reads{0}, bytes{0};
  std::atomic<bool> direct{true};
  const auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
  const auto started = Clock::now();
  std::vector<std::thread> pool;
  std::vector<std::string> errors(threads);
  for (uint32_t t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      try {
        std::vector<std::unique_ptr<RandomAccessFile>> banks;
        for (const auto& layer : layers) {
          banks.push_back(posix_file_system().open(container.dir() + "/" + layer.file, OpenMode::kDirect));
          if (!banks.back()->direct()) direct = false;
        }
        AlignedBuffer buffer(container.largest_record_stride(), 4096);
        std::mt19937_64 rng(0x10b0 + t);
        while (Clock::now() < deadline) {
          const size_t bank = rng() % layers.size();
          const uint32_t expert = static_cast<uint32_t>(rng() % layers[bank].experts);
          const uint32_t length = layers[bank].record_stride;
          read_exact(*banks[bank], uint64_t{expert} * length, buffer.data(), length);
          reads += 1;
          bytes += length;
        }
      } catch (const Error& e) {
        errors[t] = e.what();
      }
    });
  }
  for (auto& thread : pool) thread.join();
  for (const auto& error : errors) {
    if (!error.empty()) fail("bench io: {}", error);
  }
  RawResult result;
  result.threads = threads;
  result.reads = reads;
  result.seconds = std::chrono::duration<double>(Clock::now() - started).count();
  result.gbps = static_cast<double>(bytes) / result.seconds / 1e9;
  all_direct = all_direct && direct;
  return result;
}

namespace {

constexpr uint32_t kRawThreads[] = {1, 2, 4, 8, 16, 32};

struct DaemonResult {
  uint64_t tokens = 0, hits = 0, misses = 0, reads = 0, bytes = 0;
  double seconds = 0, gbps = 0;
  double read_p50_us = 0, read_p90_us = 0, read_seconds_total = 0;
  bool direct_io = false;
  std::string backend;
};

// A decode with no compute: per token, every MoE layer asks top-k random
// experts (none of the layer's previous ones, so they miss when the layer has
// enough experts) from a worker whose cache is the minimum.
DaemonResult daemon_reads(const Container& container, uint32_t readers, ioworker::IoBackend backend, double seconds) {
  ioworker::WorkerOptions options;
  options.backend = backend;
  options.cache_bytes = ioworker::min_cache_bytes(container, 1);
  options.readers = readers;
  options.max_clients = 1;
  options.quiet = true;
  ioworker::Worker worker(container, options);
  shm::Client client(worker.segment());
  const auto& layers = container.moe_layers();
  const uint32_t top_k = container.top_k();
  std::vector<std::vector<uint32_t>> previous(layers.size());
  std::mt19937_64 rng(0xdec0de);
  DaemonResult result;
  const uint64_t bytes_before = worker.stats().bytes_read;
  const auto started = Clock::now();
  const auto deadline = started + std::chrono::duration<double>(seconds);
  while (Clock::now() < deadline) {
    for (size_t l = 0; l < layers.size(); ++l) {
      const uint32_t experts = layers[l].experts;
      const bool avoid = experts >= 2 * top_k;
      std::vector<uint32_t> chosen;
      while (chosen.size() < std::min(top_k, experts)) {
        const uint32_t e = static_cast<uint32_t>(rng() % experts);
        if (std::find(chosen.begin(), chosen.end(), e) != chosen.end()) continue;
        if (avoid && std::find(previous[l].begin(), previous[l].end(), e) != previous[l].end()) continue;
        chosen.push_back(e);
      }
      client.request(layers[l].layer, chosen);
      for (size_t i = 0; i < chosen.size(); ++i) client.release(client.next());
      previous[l] = std::move(chosen);
    }
    ++result.tokens;
  }
  result.seconds = std::chrono::duration<double>(Clock::now() - started).count();
  const shm::StatsSnapshot stats = worker.stats();
  result.bytes = stats.bytes_read - bytes_before;
  result.reads = stats.demand_reads;
  result.hits = client.counters().hits;
  result.misses = client.counters().misses;
  result.gbps = static_cast<double>(result.bytes) / result.seconds / 1e9;
  result.read_p50_us = stats.read_p50_us;
  result.read_p90_us = stats.read_p90_us;
  result.read_seconds_total = stats.read_seconds_total;
  result.direct_io = worker.direct_io();
  result.backend = worker.backend_name();
  return result;
}

// One round: the raw figure at 1, 2 and 4 threads (the best counts), then the
// worker, back to back, so both see the disk in the same mood.
struct Round {
  std::vector<RawResult> raw;
  RawResult best;
  DaemonResult daemon;
  double ratio = 0;
};

}  // namespace

void add_bench_io(CLI::App& bench) {
  struct Flags {
    std::string model;
    bool json = false;
    double seconds = 2.0;
    uint32_t readers = 4;
    uint32_t rounds = 3;
    std::string backend = "auto";
  };
  auto flags = std::make_shared<Flags>();
  CLI::App* cmd = bench.add_subcommand("io",
                                       "raw O_DIRECT record reads of the container's disk next to "
                                       "the I/O worker serving an all-miss decode");
  cmd->add_option("MODEL", flags->model, "Container directory (NAME.sluice)")->required();
  cmd->add_flag("--json", flags->json, "print JSON instead of a table");
  cmd->add_option("--seconds", flags->seconds, "time per measurement")->check(CLI::Range(0.1, 600.0));
  cmd->add_option("--readers", flags->readers, "worker reader threads (reads in flight)")->check(CLI::Range(1, 64));
  cmd->add_option("--rounds", flags->rounds, "rounds of raw then worker; the ratio reported is their median")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
  cmd->add_option("--backend", flags->backend, "worker reads: io_uring, threads (pread), or auto")
      ->check(CLI::IsMember({"auto", "io_uring", "threads"}))
      ->capture_default_str();
  cmd->callback([flags] {
    const Container container = Container::open(flags->model);
    const uint64_t stride = container.largest_record_stride();
    bool all_direct = true;
    std::vector<Round> rounds(flags->rounds);
    for (Round& round : rounds) {
      // Up to the worker's deepest io_uring queue: the raw figure is the best the disk gives at any depth.
      for (uint32_t threads : kRawThreads) round.raw.push_back(raw_reads(container, threads, flags->seconds, all_direct));
      round.best = *std::max_element(round.raw.begin(), round.raw.end(),
                                     [](const RawResult& a, const RawResult& b) { return a.gbps < b.gbps; });
      const ioworker::IoBackend backend = flags->backend == "io_uring" ? ioworker::IoBackend::kUring
                                          : flags->backend == "threads" ? ioworker::IoBackend::kThreads
                                                                        : ioworker::IoBackend::kAuto;
      round.daemon = daemon_reads(container, flags->readers, backend, flags->seconds);
      round.ratio = round.best.gbps > 0 ? round.daemon.gbps / round.best.gbps : 0.0;
    }
    std::vector<double> ratios, raw_best, daemon_gbps;
    for (const Round& r : rounds) {
      ratios.push_back(r.ratio);
      raw_best.push_back(r.best.gbps);
      daemon_gbps.push_back(r.daemon.gbps);
    }
    const double ratio = median(ratios);
    if (flags->json) {
      nlohmann::json per_round = nlohmann::json::array();
      for (const Round& round : rounds) {
        nlohmann::json rows = nlohmann::json::array();
        for (const auto& r : round.raw) {
          rows.push_back({{"threads", r.threads}, {"reads", r.reads}, {"seconds", r.seconds}, {"gbps", r.gbps}});
        }
        const DaemonResult& d = round.daemon;
        per_round.push_back(
            {{"raw", rows},
             {"raw_best_gbps", round.best.gbps},
             {"daemon",
              {{"backend", d.backend}, {"direct_io", d.direct_io}, {"tokens", d.tokens}, {"hits", d.hits},
               {"misses", d.misses}, {"reads", d.reads}, {"bytes", d.bytes}, {"seconds", d.seconds},
               {"gbps", d.gbps}, {"read_latency_us", {{"p50", d.read_p50_us}, {"p90", d.read_p90_us}}},
               {"mean_reads_in_flight", d.seconds > 0 ? d.read_seconds_total / d.seconds : 0.0}}},
             {"ratio", round.ratio}});
      }
      const nlohmann::json report = {{"model", flags->model},
                                     {"record_bytes", stride},
                                     {"o_direct", all_direct},
                                     {"readers", flags->readers},
                                     {"rounds", per_round},
                                     {"median_raw_best_gbps", median(raw_best)},
                                     {"median_daemon_gbps", median(daemon_gbps)},
                                     {"ratio", ratio}};
      fmt::print("{}\n", report.dump(2));
      return;
    }
    fmt::print("records of {} bytes, O_DIRECT {}; worker with {} readers via {}\n", stride,
               all_direct ? "in effect" : "REFUSED (page cache used)", flags->readers, rounds[0].daemon.backend);
    for (size_t i = 0; i < rounds.size(); ++i) {
      const Round& r = rounds[i];
      std::string raw;
      for (const RawResult& x : r.raw) raw += fmt::format("{}{:.3f}", raw.empty() ? "" : " / ", x.gbps);
      fmt::print("  round {}: raw {} GB/s at 1 / 2 / 4 / 8 / 16 / 32 threads; worker {:.3f} GB/s "
                 "({} misses, reads p50 {:.0f} us, {:.2f} in flight); ratio {:.2f}\n",
                 i + 1, raw, r.daemon.gbps, r.daemon.misses,
                 r.daemon.read_p50_us, r.daemon.seconds > 0 ? r.daemon.read_seconds_total / r.daemon.seconds : 0.0,
                 r.ratio);
    }
    fmt::print("  median ratio of the worker to the best raw figure: {:.2f} (goal >= 0.9)\n", ratio);
  });
}

}  // namespace sluice::cli
