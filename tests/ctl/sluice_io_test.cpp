// tests/ctl/sluice_io_test.cpp: sluice-io as a process, driven through its
// control socket: it answers stats, attaches the right container and refuses
// another, keeps socket and segment at 0600, refuses a second daemon on a live
// socket, and leaves nothing behind on SIGTERM; a client of a daemon killed
// mid-generation fails with an error naming what went away.
#include <doctest/doctest.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "ioworker/rpc_client.h"
#include "proto/container.h"
#include "proto/error.h"
#include "shm/client.h"
#include "shm/segment.h"
#include "tests/ctl/tiny_container.h"

using namespace sluice;
using sluice::testing::Daemon;

namespace {

unsigned mode_of(const std::string& path) {
  struct stat info{};
  REQUIRE(::stat(path.c_str(), &info) == 0);
  return info.st_mode & 0777;
}

void require_ready(Daemon& daemon) {
  std::string why;
  if (!daemon.wait_ready(60, &why)) FAIL(why);
}

}  // namespace

TEST_CASE("sluice-io serves stats and attach, refuses another container, stops cleanly on SIGTERM") {
  const Container container = Container::open(testing::tiny_container());
  Daemon daemon;
  require_ready(daemon);

  CHECK(mode_of(daemon.socket()) == 0600);
  CHECK(mode_of(daemon.segment_path()) == 0600);

  ioworker::RpcClient client(daemon.socket());
  const ioworker::DaemonStats stats = client.stats();
  CHECK(stats.pid == daemon.pid());
  CHECK(stats.instance == daemon.instance());
  CHECK(stats.segment_name == daemon.segment_name());
  CHECK(stats.cache.slot_count >= 2 * container.top_k());
  CHECK(stats.readers == 2);
  CHECK(stats.sessions == 0);

  SUBCASE("attach for another container is refused with both identities") {
    const uint64_t other = container.identity() ^ 0x5a5a;
    try {
      client.attach(other);
      FAIL("attached with a wrong identity");
    } catch (const Error& e) {
      const std::string message = e.what();
      CHECK(message.find("refused") != std::string::npos);
      CHECK(message.find(fmt::format("{:016x}", other)) != std::string::npos);
      CHECK(message.find(fmt::format("{:016x}", container.identity())) != std::string::npos);
    }
    CHECK(client.stats().sessions == 0);
  }

  SUBCASE("attach hands back what the shm client needs, and the mapping agrees") {
    const ioworker::Attachment attached = client.attach(container.identity());
    CHECK(attached.segment_name == daemon.segment_name());
    CHECK(attached.identity == container.identity());
    CHECK(client.stats().sessions == 1);
    auto segment = shm::Segment::attach(attached.segment_name, container.identity());
    CHECK(segment->geometry() == attached.geometry);
    CHECK(segment->mapped_bytes() == attached.segment_bytes);
    client.detach(attached.session);
    CHECK(client.stats().sessions == 0);
    CHECK_THROWS_AS(client.detach(attached.session), Error);
  }

  SUBCASE("prefetch queues distinct experts and they are read") {
    const uint32_t layer = container.moe_layers().front().layer;
    const std::vector<uint32_t> experts = {0, 1, 1, 2};
    CHECK(client.prefetch(layer, experts, ioworker::RpcPrefetchOrigin::kClient) == 3);
    ioworker::DaemonStats after;
    for (int i = 0; i < 200; ++i) {
      after = client.stats();
      if (after.cache.prefetch_reads >= 3) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    CHECK(after.cache.prefetch_reads == 3);
    CHECK(after.cache.bytes_read == 3 * uint64_t{container.moe_layers().front().record_stride});
    const std::vector<uint32_t> beyond = {container.moe_layers().front().experts};
    CHECK_THROWS_AS(client.prefetch(layer, beyond, ioworker::RpcPrefetchOrigin::kRouter), Error);
  }

  SUBCASE("a second daemon on a live socket is refused and leaves the first alone") {
    std::string output;
    const int status = testing::run_command(
        {testing::sluice_io_bin(), testing::tiny_container(), "--socket", daemon.socket(), "--instance",
         daemon.instance() + "-two"},
        &output);
    CHECK(status == 1);
    CHECK(output.find("already serving") != std::string::npos);
    CHECK(client.stats().pid == daemon.pid());
  }

  const int status = daemon.stop(SIGTERM);
  REQUIRE(status >= 0);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK_FALSE(std::filesystem::exists(daemon.socket()));
  CHECK_FALSE(std::filesystem::exists(daemon.segment_path()));
}

TEST_CASE("sluice-io refuses a budget under the floor, with the plan, and leaves nothing behind") {
  Daemon daemon({"--budget", "64K"});
  const int status = testing::wait_exit(daemon.pid(), 60);
  REQUIRE(status >= 0);
  CHECK(WEXITSTATUS(status) == 1);
  const std::string log = daemon.log();
  CHECK(log.find("--budget") != std::string::npos);
  CHECK(log.find("under the floor") != std::string::npos);
  CHECK(log.find("working set") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(daemon.socket()));
  CHECK_FALSE(std::filesystem::exists(daemon.segment_path()));
}

TEST_CASE("a client of a daemon killed mid-generation fails with a clear error") {
  const Container container = Container::open(testing::tiny_container());
  Daemon daemon;
  require_ready(daemon);
  ioworker::RpcClient rpc(daemon.socket());
  const ioworker::Attachment attached = rpc.attach(container.identity());
  auto segment = shm::Segment::attach(attached.segment_name, container.identity());
  shm::Client client(*segment);
  const auto& layers = container.moe_layers();
  // A token's worth of layers served, then the daemon dies before the next.
  const std::vector<uint32_t> experts = {0, 1};
  client.request(layers.front().layer, experts);
  for (size_t i = 0; i < experts.size(); ++i) client.release(client.next());
  const int status = daemon.stop(SIGKILL);
  REQUIRE(status >= 0);
  const std::vector<uint32_t> cold = {layers.front().experts - 1};
  try {
    client.request(layers.back().layer, cold);
    client.release(client.next());
    FAIL("the client did not notice the daemon died");
  } catch (const Error& e) {
    INFO(e.what());
    CHECK(std::string(e.what()).find(attached.segment_name) != std::string::npos);
  }
  try {
    rpc.stats();
    FAIL("stats answered from a dead daemon");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find(daemon.socket()) != std::string::npos);
  }
}
