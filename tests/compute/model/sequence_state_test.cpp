// tests/compute/model/sequence_state_test.cpp: a sequence's state apart from
// the model (compute/model/sequence_state.h, session_file.h): a run saved,
// loaded into a fresh engine and continued gives logits bit-identical to one
// uninterrupted run, for GQA (OLMoE), MLA (DeepSeek-V3) and KDA + NoPE MLA
// (Kimi-Linear), in memory, through a file and through `sluice run
// --session`; a session file from another container, cut short or damaged,
// is refused naming the file; the images a sequence holds (their runs and
// digests) decide whether a prompt extends it, and survive a session file.
#include <doctest/doctest.h>

#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "compute/model/engine.h"
#include "compute/model/session_file.h"
#include "proto/checksum.h"
#include "proto/error.h"
#include "tests/compute/model/tiny_models.h"
#include "tests/proto/container_fixture.h"

using namespace sluice;
using namespace sluice::testing;

namespace {

const std::vector<int32_t> kFirst = {3,  17, 42, 5, 99,
                                     23, 8,  61, 14};  // 9 tokens: chunks of 4, 4, 1
const std::vector<int32_t> kSecond = {7, 2, 30, 11, 54};

}  // namespace

TEST_CASE("save after N tokens, load into a fresh engine, continue: bit-identical to one run") {
  for (const std::string family : {"olmoe", "deepseek_v3", "kimi_linear", "kimi_k3"}) {
    CAPTURE(family);
    const std::string& model = tiny_model(family);
    std::vector<float> whole_first, whole_second;
    {
      Engine engine(model, small_options());
      continue_greedy(engine, engine.sequence(), kFirst, 3, whole_first);
      continue_greedy(engine, engine.sequence(), kSecond, 4, whole_second);
    }
    const std::string file = scratch_path() + "/" + family + ".session";
    std::vector<float> first;
    {
      Engine engine(model, small_options());
      continue_greedy(engine, engine.sequence(), kFirst, 3, first);
      save_session(file, engine.container().identity(), engine.sequence());
    }
    CHECK(bit_identical(first, whole_first));
    Engine engine(model, small_options());
    load_session(file, engine.container().identity(), engine.sequence());
    CHECK(engine.sequence().position() == kFirst.size() + 3);
    CHECK(std::equal(kFirst.begin(), kFirst.end(), engine.sequence().tokens().begin()));
    std::vector<float> second;
    continue_greedy(engine, engine.sequence(), kSecond, 4, second);
    CHECK(bit_identical(second, whole_second));

    // In memory: a snapshot restored over a sequence that moved on rewinds it.
    SequenceState other = engine.new_sequence();
    std::vector<float> ignored;
    continue_greedy(engine, other, kFirst, 3, ignored);
    const SequenceSnapshot snapshot = other.snapshot();
    CHECK(snapshot.state.size() * sizeof(float) < other.bytes());  // only the used rows
    continue_greedy(engine, other, std::vector<int32_t>{9, 9, 9, 9, 9}, 2, ignored);
    other.restore(snapshot);
    std::vector<float> again;
    continue_greedy(engine, other, kSecond, 4, again);
    CHECK(bit_identical(again, whole_second));
  }
}

TEST_CASE("a sequence's state is what the memory plan counts for one sequence") {
  for (const std::string family : {"olmoe", "deepseek_v3", "kimi_linear", "kimi_k3"}) {
    CAPTURE(family);
    Engine engine(tiny_model(family), small_options(64));
    const ModelConfig& config = engine.config();
    const SequenceState& sequence = engine.sequence();
    CHECK(sequence.bytes() ==
          (config.state_floats_per_token() * 64 + config.state_floats_fixed()) * sizeof(float));
    CHECK(sequence.snapshot_floats(10) ==
          config.state_floats_per_token() * 10 + config.state_floats_fixed());
    CHECK(engine.new_sequence().bytes() == sequence.bytes());
  }
}

TEST_CASE("a session's state is cut at its position: the used rows and the fixed recurrent state") {
  Engine gqa(tiny_model("olmoe"), small_options(64));
  // Positional state grows with the position; at 0 nothing of it is kept.
  CHECK(gqa.sequence().snapshot_floats(0) == 0);
  CHECK(gqa.sequence().snapshot_floats(10) == 10 * gqa.sequence().snapshot_floats(1));
  Engine kda(tiny_model("kimi_linear"), small_options(64));
  const size_t fixed = kda.sequence().kda().fixed().size();
  CHECK(fixed > 0);
  CHECK(kda.sequence().snapshot_floats(0) == fixed);
  CHECK(kda.sequence().snapshot_floats(10) - fixed ==
        10 * (kda.sequence().snapshot_floats(1) - fixed));
}

TEST_CASE(
    "a session file is refused when it comes from another container, is damaged or does not fit") {
  const std::string& model = tiny_model("olmoe");
  const std::string file = scratch_path() + "/refusals.session";
  uint64_t identity = 0;
  {
    Engine engine(model, small_options());
    std::vector<float> ignored;
    continue_greedy(engine, engine.sequence(), kFirst, 2, ignored);
    save_session(file, engine.container().identity(), engine.sequence());
    identity = engine.container().identity();
  }
  const std::string bytes = read_bytes(file);
  const auto restore = [&](const std::string& contents, uint32_t context = 0) {
    const std::string copy = scratch_path() + "/copy.session";
    sluice::testing::write_bytes(copy, contents);
    Engine engine(model, small_options(context));
    load_session(copy, engine.container().identity(), engine.sequence());
  };

  SUBCASE("another container, named with both identities") {
    const std::string& other = tiny_model("olmoe", 5);
    Engine engine(other, small_options());
    REQUIRE(engine.container().identity() != identity);
    const std::string message = sluice::testing::error_message(
        [&] { load_session(file, engine.container().identity(), engine.sequence()); });
    CHECK(message.find(file) == 0);
    CHECK(message.find(fmt::format("{:016x}", identity)) != std::string::npos);
    CHECK(message.find(fmt::format("{:016x}", engine.container().identity())) != std::string::npos);
    CHECK(engine.sequence().position() == 0);
  }
  SUBCASE("cut short, at any length") {
    for (const size_t length :
         {size_t{0}, size_t{20}, size_t{47}, size_t{48}, bytes.size() / 2, bytes.size() - 1}) {
      CAPTURE(length);
      SLUICE_CHECK_ERROR_STARTS(restore(bytes.substr(0, length)),
                                scratch_path() + "/copy.session: ");
    }
    SLUICE_CHECK_ERROR_CONTAINS(restore(bytes.substr(0, bytes.size() - 4)), "cut short");
    SLUICE_CHECK_ERROR_CONTAINS(restore(bytes + "x"), "padded");
  }
  SUBCASE("a flipped byte in the state, the tokens or the header") {
    std::string garbled = bytes;
    garbled[bytes.size() - 3] ^= 0x40;
    SLUICE_CHECK_ERROR_CONTAINS(restore(garbled), "is damaged (its checksum does not match)");
    garbled = bytes;
    garbled[50] ^= 0x01;
    SLUICE_CHECK_ERROR_CONTAINS(restore(garbled), "is damaged (its checksum does not match)");
    garbled = bytes;
    garbled[24] ^= 0x01;  // the position
    SLUICE_CHECK_ERROR_CONTAINS(restore(garbled), "header is damaged");
  }
  SUBCASE("not a session file at all") {
    SLUICE_CHECK_ERROR_CONTAINS(restore(std::string(200, 'z')), "not a sluice session file");
  }
  SUBCASE("more tokens than the context holds") {
    SLUICE_CHECK_ERROR_CONTAINS(restore(bytes, 8), "raise --ctx");
  }
}

TEST_CASE(
    "sluice run --session resumes, prefills only the new prompt and saves what it generated") {
  const std::string& model = tiny_model("kimi_linear");
  const std::string session = scratch_path() + "/cli.session";
  const std::string sluice =
      env_or_fail("SLUICE_BIN") + " run " + model + " --threads 1 --chunk 4 --session " + session;
  const auto read_rows = [](const std::string& path) {
    const std::string raw = read_bytes(path);
    std::vector<float> rows(raw.size() / sizeof(float));
    std::memcpy(rows.data(), raw.data(), rows.size() * sizeof(float));
    return rows;
  };
  const std::string dump1 = scratch_path() + "/cli1.f32", dump2 = scratch_path() + "/cli2.f32";
  const auto first = nlohmann::json::parse(shell_output(
      sluice + " --prompt-ids 3,17,42,5,99,23,8,61,14 -n 3 --temp 0 --json --dump-logits " +
      dump1));
  CHECK(first["session"]["reused_tokens"] == 0);
  CHECK(first["session"]["saved_tokens"] == kFirst.size() + 3);
  const auto second = nlohmann::json::parse(shell_output(
      sluice + " --prompt-ids 7,2,30,11,54 -n 4 --temp 0 --json --dump-logits " + dump2));
  CHECK(second["session"]["reused_tokens"] == kFirst.size() + 3);
  CHECK(second["prompt_tokens"] == kSecond.size());
  CHECK(second["session"]["saved_tokens"] == kFirst.size() + 3 + kSecond.size() + 4);

  std::vector<float> whole_first, whole_second;
  Engine engine(model, small_options());
  continue_greedy(engine, engine.sequence(), kFirst, 3, whole_first);
  continue_greedy(engine, engine.sequence(), kSecond, 4, whole_second);
  CHECK(bit_identical(read_rows(dump1), whole_first));
  CHECK(bit_identical(read_rows(dump2), whole_second));

  // The summary line says what was reused.
  const std::string text = shell_output(sluice + " --prompt-ids 1,2 -n 1 2>&1 >/dev/null");
  CHECK(text.find("tokens reused") != std::string::npos);
  CHECK(text.find(std::to_string(kFirst.size() + 3 + kSecond.size() + 4) + " tokens reused") !=
        std::string::npos);
}

TEST_CASE("sluice run refuses a session of another container, naming the file") {
  const std::string session = scratch_path() + "/foreign.session";
  shell_output(env_or_fail("SLUICE_BIN") + " run " + tiny_model("olmoe") +
               " --prompt-ids 1,2,3 -n 1 --session " + session + " > /dev/null 2>&1");
  const std::string command = env_or_fail("SLUICE_BIN") + " run " + tiny_model("deepseek_v3") +
                              " --prompt-ids 1,2 -n 1 " + "--session " + session + " 2>&1";
  int status = 0;
  const std::string text = shell_output(command, &status);
  CHECK(status == 1);
  CHECK(text.find("sluice: error: " + session + ": the session belongs to container") == 0);
}

TEST_CASE("a prefix holds only with the same images at the same places") {
  MediaRun a{1, 3, {}};
  a.digest[0] = 1;
  MediaRun b = a;
  b.digest[31] = 2;  // another image, the same size
  const std::vector<int32_t> held = {1, 9, 9, 9, 4};
  const std::vector<int32_t> longer = {1, 9, 9, 9, 4, 5};
  const std::vector<MediaRun> with_a = {a}, with_b = {b}, none;
  CHECK(holds_prefix(held, with_a, longer, with_a));
  CHECK_FALSE(holds_prefix(held, with_a, longer, with_b));
  CHECK_FALSE(holds_prefix(held, none, longer, with_a));  // the state ran those pads as text
  CHECK_FALSE(holds_prefix(held, with_a, longer, none));
  CHECK_FALSE(holds_prefix(held, with_a, held, with_a));  // not a strict prefix
  CHECK_FALSE(holds_prefix({}, none, longer, none));
  // An image that starts after what the state holds is the prompt's own business.
  const std::vector<MediaRun> a_and_later = {a, MediaRun{5, 1, {}}};
  CHECK(holds_prefix(held, with_a, longer, a_and_later));
  // So is one the state noted but never ran (a stopped prefill).
  CHECK(holds_prefix(std::vector<int32_t>(held.begin(), held.begin() + 1), with_a, longer, none));
}

TEST_CASE("a sequence's images are noted, snapshotted, saved and checked when loaded") {
  const std::string& model = tiny_model("kimi_k3");
  const std::string file = scratch_path() + "/images.session";
  MediaRun image{2, 3, {}};
  for (size_t i = 0; i < image.digest.size(); ++i)
    image.digest[i] = static_cast<uint8_t>(7 * i + 1);
  const std::vector<int32_t> prompt = {3, 17, 509, 509, 509, 42, 5};
  uint64_t identity = 0;
  {
    Engine engine(model, small_options());
    SequenceState& sequence = engine.sequence();
    const std::vector<MediaRun> runs = {image};
    sequence.note_media(runs);
    std::vector<float> logits(engine.config().vocab);
    engine.prefill(sequence, prompt, logits);
    CHECK(sequence.media().size() == 1);
    // Runs must follow the position and each other.
    const std::vector<MediaRun> behind = {MediaRun{4, 1, {}}};
    SLUICE_CHECK_ERROR_CONTAINS(sequence.note_media(behind), "does not follow");
    const SequenceSnapshot snapshot = sequence.snapshot();
    REQUIRE(snapshot.media.size() == 1);
    CHECK(snapshot.media[0] == image);
    save_session(file, engine.container().identity(), sequence);
    identity = engine.container().identity();
    sequence.reset();
    CHECK(sequence.media().empty());
    // A run noted ahead of a stopped prefill is dropped by the next note.
    const std::vector<int32_t> two = {3, 17};
    engine.prefill(sequence, two, logits);
    const std::vector<MediaRun> ahead = {MediaRun{4, 2, {}}};
    sequence.note_media(ahead);
    sequence.note_media({});
    CHECK(sequence.media().empty());
  }
  Engine engine(model, small_options());
  load_session(file, identity, engine.sequence());
  REQUIRE(engine.sequence().media().size() == 1);
  CHECK(engine.sequence().media()[0] == image);
  CHECK(engine.sequence().position() == prompt.size());

  // A run outside the positions, with every checksum made to match, is still refused.
  std::string bytes = read_bytes(file);
  const size_t run_at = 48 + prompt.size() * sizeof(int32_t);
  const uint32_t far = 100;
  std::memcpy(bytes.data() + run_at, &far, sizeof(far));
  const uint32_t payload = crc32_bytes(bytes.data() + 48, bytes.size() - 48);
  std::memcpy(bytes.data() + 40, &payload, sizeof(payload));
  const uint32_t header = crc32_bytes(bytes.data(), 44);
  std::memcpy(bytes.data() + 44, &header, sizeof(header));
  const std::string damaged = scratch_path() + "/images-damaged.session";
  sluice::testing::write_bytes(damaged, bytes);
  Engine other(model, small_options());
  SLUICE_CHECK_ERROR_STARTS(load_session(damaged, identity, other.sequence()), damaged + ": ");
  SLUICE_CHECK_ERROR_CONTAINS(load_session(damaged, identity, other.sequence()),
                              "image run at 100");
  CHECK(other.sequence().position() == 0);
  // More runs than positions is refused before anything is read.
  bytes = read_bytes(file);
  const uint32_t runs = 1000;
  std::memcpy(bytes.data() + 28, &runs, sizeof(runs));
  const uint32_t header2 = crc32_bytes(bytes.data(), 44);
  std::memcpy(bytes.data() + 44, &header2, sizeof(header2));
  sluice::testing::write_bytes(damaged, bytes);
  SLUICE_CHECK_ERROR_CONTAINS(load_session(damaged, identity, other.sequence()), "1000 image runs");
}
