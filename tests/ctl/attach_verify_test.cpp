// tests/ctl/attach_verify_test.cpp: `--verify` with `--attach`. A client that
// asks for verification is refused by a daemon that does not verify (at the
// RPC and through `sluice run`), accepted by one that does, and an attached
// run over damaged records then fails naming the record instead of
// producing different logits. Also: a prefetch list longer than any layer is
// refused before the daemon touches its segment.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "ioworker/rpc_client.h"
#include "proto/container.h"
#include "proto/error.h"
#include "tests/ctl/tiny_container.h"

using namespace sluice;
using sluice::testing::Daemon;

namespace {

void require_ready(Daemon& daemon) {
  std::string why;
  if (!daemon.wait_ready(60, &why)) FAIL(why);
}

int run_attached(const std::string& model, const Daemon& daemon, std::string* output) {
  return testing::run_command(
      {testing::sluice_bin(), "run", model, "--attach", daemon.socket(), "--verify", "--prompt-ids",
       "1,2,3", "-n", "4", "--ignore-eos", "--threads", "1"},
      output);
}

}  // namespace

TEST_CASE("a client asking for --verify is refused by a daemon that does not verify") {
  const Container container = Container::open(testing::tiny_container());
  Daemon daemon;
  require_ready(daemon);
  ioworker::RpcClient client(daemon.socket());
  try {
    client.attach(container.identity(), true);
    FAIL("attached with --verify to a daemon that does not verify");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("does not check record crc32s: start it with --verify") !=
          std::string::npos);
  }
  CHECK(client.stats().sessions == 0);
  CHECK_FALSE(client.attach(container.identity(), false).verifies_records);

  std::string output;
  CHECK(run_attached(testing::tiny_container(), daemon, &output) == 1);
  CHECK_MESSAGE(output.find("does not check record crc32s") != std::string::npos, output);
}

TEST_CASE("a verifying daemon accepts --verify, and damaged records fail the attached run") {
  const std::string copy = testing::scratch_dir() + "/attach-verify.sluice";
  std::filesystem::copy(testing::tiny_container(), copy,
                        std::filesystem::copy_options::recursive);
  const Container container = Container::open(copy);
  // One payload byte of every record of the first MoE layer: whatever the
  // routing picks there, the first read of it is damaged.
  const MoeLayerInfo& layer = container.moe_layers().front();
  {
    std::fstream bank(copy + "/" + layer.file, std::ios::in | std::ios::out | std::ios::binary);
    for (uint32_t e = 0; e < layer.experts; ++e) {
      const std::streamoff at =
          static_cast<std::streamoff>(uint64_t{e} * layer.record_stride + 100);
      char c = 0;
      bank.seekg(at);
      bank.read(&c, 1);
      c = static_cast<char>(c ^ 0x10);
      bank.seekp(at);
      bank.write(&c, 1);
    }
    REQUIRE(bank.good());
  }
  Daemon daemon({"--verify"}, copy);
  require_ready(daemon);
  {
    ioworker::RpcClient client(daemon.socket());
    const ioworker::Attachment attached = client.attach(container.identity(), true);
    CHECK(attached.verifies_records);
  }
  std::string output;
  CHECK(run_attached(copy, daemon, &output) != 0);
  CHECK_MESSAGE(
      output.find("layer " + std::to_string(layer.layer) + " expert") != std::string::npos, output);
  CHECK_MESSAGE(output.find("checksum mismatch") != std::string::npos, output);
}

TEST_CASE("a prefetch list longer than any layer is refused, and the daemon keeps serving") {
  const Container container = Container::open(testing::tiny_container());
  Daemon daemon;
  require_ready(daemon);
  ioworker::RpcClient client(daemon.socket());
  const uint32_t layer = container.moe_layers().front().layer;
  const std::vector<uint32_t> huge(kMaxExpertsPerLayer + 1, 0);
  try {
    client.prefetch(layer, huge, ioworker::RpcPrefetchOrigin::kClient);
    FAIL("a prefetch of 4097 experts was accepted");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find(
              "prefetch: 4097 experts in one request; a layer has at most 4096") !=
          std::string::npos);
  }
  // Longer than the layer but within the bound, all duplicates: merged, accepted.
  const std::vector<uint32_t> too_many(container.moe_layers().front().experts + 1, 0);
  try {
    client.prefetch(layer, too_many, ioworker::RpcPrefetchOrigin::kClient);
  } catch (const Error& e) {
    FAIL("duplicates within the layer's size are merged, not refused: ", e.what());
  }
  CHECK(client.stats().pid == daemon.pid());
}
