// tests/compute/model/tiny_models.h: tiny converted containers of any family
// (scripts/make_tiny_checkpoint.py + `sluice convert`, from the environment
// meson test sets) and greedy runs over them, for the engine-level tests.
// Test-only.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "compute/model/engine.h"

namespace sluice::testing {

// The container of `family` made with `seed`, built once per process in a
// directory removed at exit.
const std::string& tiny_model(const std::string& family, int seed = 3);
// A directory for the test's own files, removed at exit.
const std::string& scratch_path();

// Runs a shell command; its stdout (and whatever it redirects there), and
// fails the test when it exits non-zero (unless `allow_failure`, when
// `status` gets the exit status).
std::string shell_output(const std::string& command, int* status = nullptr);
std::string env_or_fail(const char* name);
std::string read_bytes(const std::string& path);

// One thread and chunks of 4, so prefill crosses chunk boundaries.
EngineOptions small_options(uint32_t context = 0);

int32_t greedy_token(std::span<const float> logits);
// Prefills `prompt` into `sequence`, then `steps` greedy tokens, each run
// through the model; appends every logits row to `rows`.
void continue_greedy(Engine& engine, SequenceState& sequence, std::span<const int32_t> prompt,
                     int steps, std::vector<float>& rows);

bool bit_identical(const std::vector<float>& a, const std::vector<float>& b);

}  // namespace sluice::testing
