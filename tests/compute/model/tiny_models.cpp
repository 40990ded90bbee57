// tests/compute/model/tiny_models.cpp: making the tiny containers and the
// greedy runs the engine-level tests compare.
#include "tests/compute/model/tiny_models.h"

#include <doctest/doctest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>

#include "tests/proto/container_fixture.h"

namespace sluice::testing {
namespace {

TempDir& scratch() {
  static TempDir dir;
  return dir;
}

}  // namespace

const std::string& scratch_path() {
  return scratch().path();
}

std::string env_or_fail(const char* name) {
  const char* value = std::getenv(name);
  REQUIRE_MESSAGE(value != nullptr, name << " is not set (run through meson test)");
  return value;
}

std::string shell_output(const std::string& command, int* status) {
  INFO(command);
  std::string text;
  FILE* pipe = ::popen(command.c_str(), "r");
  REQUIRE(pipe != nullptr);
  char buffer[4096];
  for (size_t n; (n = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0;) text.append(buffer, n);
  const int wait_status = ::pclose(pipe);
  const int exit_status = WIFEXITED(wait_status) ? WEXITSTATUS(wait_status) : 128;
  if (status != nullptr) {
    *status = exit_status;
  } else {
    REQUIRE_MESSAGE(exit_status == 0, text);
  }
  return text;
}

const std::string& tiny_model(const std::string& family, int seed) {
  static std::map<std::string, std::string> made;
  const std::string name = family + "-" + std::to_string(seed);
  std::string& model = made[name];
  if (model.empty()) {
    const std::string checkpoint = scratch_path() + "/" + name;
    shell_output(env_or_fail("PYTHON") + " " + env_or_fail("SLUICE_SOURCE_ROOT") +
                 "/scripts/make_tiny_checkpoint.py " + family + " " + checkpoint + " --seed " +
                 std::to_string(seed) + " 2>&1");
    model = scratch_path() + "/" + name + ".sluice";
    shell_output(env_or_fail("SLUICE_BIN") + " convert " + checkpoint + " " + model + " -q 2>&1");
  }
  return model;
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE_MESSAGE(in, path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

EngineOptions small_options(uint32_t context) {
  EngineOptions options;
  options.threads = 1;
  options.prefill_chunk = 4;
  options.context = context;
  return options;
}

int32_t greedy_token(std::span<const float> logits) {
  return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

void continue_greedy(Engine& engine, SequenceState& sequence, std::span<const int32_t> prompt,
                     int steps, std::vector<float>& rows) {
  std::vector<float> logits(engine.config().vocab);
  REQUIRE(engine.prefill(sequence, prompt, logits));
  rows.insert(rows.end(), logits.begin(), logits.end());
  for (int i = 0; i < steps; ++i) {
    const int32_t token = greedy_token(logits);
    engine.transformer().forward(sequence, std::span<const int32_t>(&token, 1), logits, false);
    rows.insert(rows.end(), logits.begin(), logits.end());
  }
}

bool bit_identical(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace sluice::testing
