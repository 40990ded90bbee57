// tests/router/router_process_test.cpp: sluice-router as a process next to a
// sluice-io: attached `sluice run` publishes to the segment's mailbox, the
// router prefetches and scores, and the output is bit-identical with the router
// alive, SIGKILLed mid-generation, or lookahead off; a daemon started with
// --parallel N gives every client a mailbox of N rows.
#include <doctest/doctest.h>

#include <csignal>
#include <filesystem>
#include <thread>

#include <nlohmann/json.hpp>
#include <sys/wait.h>

#include "ioworker/rpc_client.h"
#include "proto/container.h"
#include "router/lookahead.h"
#include "shm/client.h"
#include "shm/segment.h"
#include "shm/stats.h"
#include "tests/ctl/tiny_container.h"
#include "tests/router/rank1_routing.h"

using namespace sluice;

namespace {

std::string router_bin() {
  const char* path = std::getenv("SLUICE_ROUTER_BIN");
  return path ? path : "sluice-router";
}

// The router says which mailbox it serves once it has mapped the segment.
bool wait_for_log(const std::string& path, const std::string& text, double seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < deadline) {
    if (testing::read_text(path).find(text) != std::string::npos) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

std::vector<std::string> run_args(const std::string& socket, const std::string& logits, const char* lookahead) {
  return {testing::sluice_bin(), "run", testing::tiny_container(), "--attach", socket, "--prompt-ids",
          "7,3,9,1,4", "-n", "24", "--temp", "0.7", "--seed", "99", "--threads", "1", "--lookahead", lookahead,
          "--dump-logits", logits};
}

// Starts the client `argv`, waits until the router has read a routing message
// the client published, stops the client there, SIGKILLs the router and lets
// the client go on; returns the client's pid. A client that finished before
// it could be stopped is run again.
pid_t kill_router_mid_generation(testing::Daemon& daemon, pid_t router, const std::vector<std::string>& argv,
                                 const std::string& log) {
  const Container container = Container::open(testing::tiny_container());
  ioworker::RpcClient rpc(daemon.socket());
  auto segment = shm::Segment::attach(rpc.attach(container.identity()).segment_name, container.identity());
  for (int attempt = 0; attempt < 20; ++attempt) {
    const uint64_t before = shm::read_stats(*segment).lookahead.messages;
    const pid_t client = testing::spawn(argv, log);
    int status = 0;
    pid_t changed = 0;
    while ((changed = ::waitpid(client, &status, WNOHANG)) == 0 && shm::read_stats(*segment).lookahead.messages == before) {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    if (changed == 0) {
      ::kill(client, SIGSTOP);
      REQUIRE(::waitpid(client, &status, WUNTRACED) == client);
      if (WIFSTOPPED(status)) {
        ::kill(router, SIGKILL);
        REQUIRE(testing::wait_exit(router, 10) != -1);
        ::kill(client, SIGCONT);
        return client;
      }
    }
    // The client ended before the router read it, or before it was stopped.
    INFO(testing::read_text(log));
    REQUIRE((WIFEXITED(status) && WEXITSTATUS(status) == 0));
  }
  FAIL("the client finished every time before the router read a routing message of it");
  return -1;
}

}  // namespace

TEST_CASE("a router process prefetches for attached clients and its death changes nothing") {
  testing::Daemon daemon;
  std::string why;
  REQUIRE_MESSAGE(daemon.wait_ready(30, &why), why);
  const std::string dir = testing::scratch_dir();
  const pid_t router = testing::spawn({router_bin(), "--attach", daemon.socket(), "--lookahead", "6"}, dir + "/router.log");
  REQUIRE_MESSAGE(wait_for_log(dir + "/router.log", "mailbox in /dev/shm/", 30), testing::read_text(dir + "/router.log"));

  // A guess is scored only when the router reads the message of the layer
  // it guessed; the mailbox keeps the latest message, so a router starved of
  // CPU (a loaded machine: five runs in a row once scored nothing) can miss
  // every pair in one short run. Runs are byte-identical, so the test runs
  // again until one is scored or a minute has passed.
  std::string output;
  nlohmann::json s;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (s.is_null() ||
         (s["router"]["layers"].empty() && std::chrono::steady_clock::now() < deadline)) {
    REQUIRE_MESSAGE(testing::run_command(run_args(daemon.socket(), dir + "/on.f32", "6"), &output) == 0, output);
    std::string stats;
    REQUIRE(testing::run_command({testing::sluice_bin(), "stats", "--attach", daemon.socket(), "--json"}, &stats) == 0);
    s = nlohmann::json::parse(stats.substr(stats.find('{')));
    REQUIRE(s.at("router").is_object());
  }
  REQUIRE(s.at("router").is_object());
  CHECK(s["router"]["pid"].get<int>() == router);
  CHECK(s["router"]["messages"].get<uint64_t>() > 0);
  CHECK(s["router"]["prefetches"].get<uint64_t>() > 0);
  CHECK(s["prefetch_requests"].get<uint64_t>() > 0);
  CHECK_FALSE(s["router"]["layers"].empty());

  // SIGKILL the router while a client generates: the client carries on. The
  // client is stopped once the router has read one of its routing messages,
  // so the kill lands mid-generation however fast or slow the machine is.
  const pid_t client = kill_router_mid_generation(daemon, router, run_args(daemon.socket(), dir + "/killed.f32", "6"),
                                                  dir + "/killed.log");
  const int status = testing::wait_exit(client, 120);
  INFO(testing::read_text(dir + "/killed.log"));
  CHECK((WIFEXITED(status) && WEXITSTATUS(status) == 0));

  REQUIRE(testing::run_command(run_args(daemon.socket(), dir + "/off.f32", "0"), &output) == 0);
  const std::string on = testing::read_text(dir + "/on.f32");
  CHECK(on.size() > 0);
  CHECK(testing::read_text(dir + "/killed.f32") == on);
  CHECK(testing::read_text(dir + "/off.f32") == on);
}

TEST_CASE("a daemon started with --parallel 2 gets guesses for both rows of one attached client's decode step") {
  const Container container = Container::open(testing::tiny_container());
  REQUIRE(container.moe_layers().size() >= 2);
  testing::Daemon daemon({"--parallel", "2"});
  std::string why;
  REQUIRE_MESSAGE(daemon.wait_ready(30, &why), why);
  ioworker::RpcClient rpc(daemon.socket());
  const ioworker::Attachment attachment = rpc.attach(container.identity());
  CHECK(attachment.geometry.mailbox_rows == 2);
  auto segment = shm::Segment::attach(attachment.segment_name, container.identity());
  shm::Client client(*segment);

  // The router of the group, run here so the test decides when it reads.
  const router::Predictor predictor(container);
  std::vector<std::vector<uint32_t>> sent;
  router::Lookahead lookahead(
      predictor, *segment, 3,
      [&](uint32_t, std::span<const uint32_t> experts) { sent.emplace_back(experts.begin(), experts.end()); }, 1);
  router::Publisher publisher(*segment, client.id(), false);
  const uint32_t first = container.moe_layers()[0].layer, second = container.moe_layers()[1].layer;
  const uint32_t hidden = predictor.hidden(), top_k = predictor.top_k(), rows = 2;
  std::vector<float> input(size_t{rows} * hidden);
  for (uint32_t i = 0; i < hidden; ++i) {
    input[i] = std::sin(0.37f * static_cast<float>(i));
    input[hidden + i] = std::cos(1.91f * static_cast<float>(i) + 0.5f);
  }
  const auto row = [&](uint32_t r) { return std::span<const float>(input).subspan(size_t{r} * hidden, hidden); };
  std::vector<uint32_t> ids(size_t{rows} * top_k);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<uint32_t>(i % top_k);

  publisher.publish(first, rows, true, input, top_k, ids);
  REQUIRE(lookahead.poll(std::chrono::milliseconds(1000)));
  REQUIRE(sent.size() == 1);
  const std::vector<std::vector<uint32_t>> guesses = {predictor.predict(second, row(0), 3),
                                                      predictor.predict(second, row(1), 3)};
  CHECK(sent[0] == router::rank_union(guesses));

  // Each row's real routing holds its own rank-1 guess: both rows are scored, both hit.
  const std::vector<uint32_t> real = testing::routing_holding_rank1(guesses, top_k);
  publisher.publish(second, rows, true, input, top_k, real);
  REQUIRE(lookahead.poll(std::chrono::milliseconds(1000)));
  const auto scored = shm::read_stats(*segment).lookahead.layers;
  REQUIRE(scored.size() == 1);
  CHECK(scored[0].scored == rows);
  CHECK(scored[0].rank1_hits == rows);
}
