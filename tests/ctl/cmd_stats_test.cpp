// tests/ctl/cmd_stats_test.cpp: `sluice stats` against a running sluice-io:
// one JSON snapshot, --watch printing a JSON line per interval when stdout is
// not a terminal, and a clear error when nothing answers.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <sstream>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>
#include <sys/wait.h>

#include "tests/ctl/tiny_container.h"

using nlohmann::json;
using namespace sluice::testing;

TEST_CASE("sluice stats reports a daemon's figures") {
  Daemon daemon;
  std::string why;
  if (!daemon.wait_ready(60, &why)) FAIL(why);

  std::string output;
  REQUIRE(run_command({sluice_bin(), "stats", "--attach", daemon.socket(), "--json"}, &output) == 0);
  const json stats = json::parse(output);
  CHECK(stats["pid"].get<int>() == daemon.pid());
  CHECK(stats["instance"] == daemon.instance());
  CHECK(stats["slot_count"].get<uint32_t>() > 0);
  CHECK(stats["direct_io"].is_boolean());
  CHECK(stats["hits"].get<uint64_t>() == 0);
  CHECK(stats["misses"].get<uint64_t>() == 0);
  for (const char* key : {"hit_rate", "demand_reads", "prefetch_reads", "bytes_read", "read_gbps", "read_latency_us",
                          "queue_depth", "evictions", "wasted_prefetches", "layers", "clients"}) {
    CAPTURE(key);
    CHECK(stats.contains(key));
  }
  // Start-up made every slot resident before serving, and says how.
  const json& startup = stats["startup"];
  CHECK(startup["seconds"].get<double>() > 0);
  CHECK(startup["resident_seconds"].get<double>() <= startup["seconds"].get<double>());
  CHECK((startup["populate"] == "MADV_POPULATE_WRITE" || startup["populate"] == "touched"));
  CHECK(startup["huge_pages"].get<std::string>().find(" pages") != std::string::npos);
  CHECK(stats["page_faults_since_startup"].is_number_unsigned());

  REQUIRE(run_command({sluice_bin(), "stats", "--attach", daemon.socket()}, &output) == 0);
  CHECK(output.find("hit rate") != std::string::npos);
  CHECK(output.find(daemon.instance()) != std::string::npos);

  const std::string watch_log = scratch_dir() + "/watch.log";
  const pid_t watcher = spawn({sluice_bin(), "stats", "--attach", daemon.socket(), "--watch", "0.2"}, watch_log);
  // Three complete lines, however long the watcher took to start.
  const auto lines_written = [&] {
    const std::string text = read_text(watch_log);
    return std::count(text.begin(), text.end(), '\n');
  };
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (lines_written() < 3 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ::kill(watcher, SIGINT);
  CHECK(wait_exit(watcher, 10) >= 0);
  std::istringstream lines(read_text(watch_log));
  std::string line;
  int count = 0;
  while (std::getline(lines, line)) {
    const json tick = json::parse(line);
    CHECK(tick["read_gbps_window"] == (count == 0 ? "since start" : "interval"));
    ++count;
  }
  CHECK(count >= 3);
}

TEST_CASE("sluice stats with nothing on the socket says so") {
  std::string output;
  const std::string socket = scratch_dir() + "/nobody.sock";
  CHECK(run_command({sluice_bin(), "stats", "--attach", socket}, &output) == 1);
  CHECK(output.find("cannot reach sluice-io at " + socket) != std::string::npos);
}
