// tests/compute/kernels/rvq_crossover_test.cpp: the run-time choice between
// RVQ tables and decoding once: the decision rule on given timings, the
// SLUICE_RVQ_CROSSOVER pin and its errors, the small-shape default, the cache
// file, and that a real calibration returns one of the candidates (never a time).
#include "compute/kernels/rvq_crossover.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "proto/error.h"
#include "sluice_build_id.h"
#include "tests/compute/kernels/isas_under_test.h"
#include "tests/proto/pinned_environment.h"

using namespace sluice;
using namespace sluice::kernels;

namespace {

// Points XDG_CACHE_HOME at a fresh directory for one scope (and removes it).
struct TemporaryCache {
  std::filesystem::path dir;
  TemporaryCache() {
    char pattern[] = "/tmp/rvq_crossover_test.XXXXXX";
    REQUIRE(mkdtemp(pattern) != nullptr);
    dir = pattern;
    setenv("XDG_CACHE_HOME", pattern, 1);
  }
  ~TemporaryCache() {
    unsetenv("XDG_CACHE_HOME");
    std::filesystem::remove_all(dir);
  }
};

void write_text(const std::string& path, const std::string& text) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path) << text;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace

TEST_CASE(
    "the crossover is the first candidate where decoding once is no slower, and stops measuring "
    "there") {
  const uint32_t candidates[] = {2, 3, 4, 6, 8};
  std::vector<uint32_t> measured;
  // Tables cost n, decoding once a flat 5: equal at none, cheaper from 6.
  const uint32_t crossover = rvq_crossover_from(candidates, [&](uint32_t n) {
    measured.push_back(n);
    return RvqPathSeconds{static_cast<double>(n), 5.0};
  });
  CHECK(crossover == 6);
  CHECK(measured == std::vector<uint32_t>{2, 3, 4, 6});
  // A tie goes to decoding once.
  CHECK(rvq_crossover_from(candidates, [](uint32_t n) {
          return RvqPathSeconds{double(n), 3.0};
        }) == 3);
}

TEST_CASE("when the tables always win, the crossover is one past the last candidate") {
  const uint32_t candidates[] = {2, 4, 16};
  CHECK(rvq_crossover_from(candidates, [](uint32_t) { return RvqPathSeconds{1.0, 2.0}; }) == 17);
}

TEST_CASE("SLUICE_RVQ_CROSSOVER pins the crossover; a bad value is an error naming it") {
  const Exec exec{best_isa(), nullptr};
  {
    const testing::PinnedEnvironment pin("SLUICE_RVQ_CROSSOVER", "7");
    CHECK(rvq_decode_crossover(exec, 2048, 1024) == 7);
    CHECK(rvq_decode_crossover(exec, 64, 32) == 7);
  }
  {
    const testing::PinnedEnvironment pin("SLUICE_RVQ_CROSSOVER", "65");  // kRvqCrossoverMax: tables up to 64 tokens
    CHECK(rvq_decode_crossover(exec, 64, 32) == 65);
  }
  for (const char* bad : {"0", "abc", "-3", "4x", "66", "12345678"}) {
    CAPTURE(bad);
    const testing::PinnedEnvironment pin("SLUICE_RVQ_CROSSOVER", bad);
    CHECK_THROWS_WITH_AS(rvq_decode_crossover(exec, 64, 32),
                         doctest::Contains("SLUICE_RVQ_CROSSOVER"), Error);
  }
}

TEST_CASE("small experts take the instruction set's default; a bad shape is an error naming it") {
  for (Isa isa : testing::isas_under_test()) {
    CAPTURE(isa_name(isa));
    CHECK(rvq_decode_crossover(Exec{isa, nullptr}, 64, 32) == rvq_default_crossover(isa));
  }
  CHECK_THROWS_WITH_AS(rvq_decode_crossover(Exec{}, 60, 32), doctest::Contains("60"), Error);
  CHECK_THROWS_WITH_AS(rvq_decode_crossover(Exec{}, 64, 0), doctest::Contains("64"), Error);
}

TEST_CASE(
    "the cache file lives under XDG_CACHE_HOME, else HOME/.cache, and names isa, activations, "
    "shape and build") {
  const char* home = std::getenv("HOME");
  const std::string saved_home = home != nullptr ? home : "";
  const std::string build = SLUICE_BUILD_ID;
  REQUIRE(!build.empty());
  setenv("XDG_CACHE_HOME", "/x/cache", 1);
  CHECK(rvq_crossover_cache_path(Isa::kAvx2, TrunkActivations::kInt8, 2048, 1024) ==
        "/x/cache/sluice/rvq-crossover-avx2-int8-2048x1024-" + build);
  unsetenv("XDG_CACHE_HOME");
  setenv("HOME", "/h", 1);
  CHECK(rvq_crossover_cache_path(Isa::kScalar, TrunkActivations::kF32, 8, 16) ==
        "/h/.cache/sluice/rvq-crossover-scalar-f32-8x16-" + build);
  unsetenv("HOME");
  CHECK(rvq_crossover_cache_path(Isa::kScalar, TrunkActivations::kF32, 8, 16).empty());
  if (home != nullptr) setenv("HOME", saved_home.c_str(), 1);
}

TEST_CASE("a cached crossover is used as it is, without measuring") {
  const TemporaryCache cache;
  const Exec exec{best_isa(), nullptr};
  // 7 is no candidate, so only the file can have given it.
  write_text(rvq_crossover_cache_path(exec.isa, exec.trunk, 1024, 2048), "7\n");
  CHECK(rvq_decode_crossover(exec, 1024, 2048) == 7);
}

TEST_CASE(
    "a measured crossover is a candidate or one past them, replaces a bad cache file, and is "
    "kept") {
  const TemporaryCache cache;
  const Exec exec{best_isa(), nullptr};
  const std::string path = rvq_crossover_cache_path(exec.isa, exec.trunk, 1024, 1024);
  write_text(path, "not a count\n");
  const uint32_t crossover = rvq_decode_crossover(exec, 1024, 1024);
  const bool candidate =
      std::find(std::begin(kRvqCrossoverCandidates), std::end(kRvqCrossoverCandidates),
                crossover) != std::end(kRvqCrossoverCandidates);
  CHECK((candidate || crossover == std::end(kRvqCrossoverCandidates)[-1] + 1));
  CHECK(read_text(path) == std::to_string(crossover) + "\n");
  write_text(path, "3\n");  // the process measured once: it keeps its value
  CHECK(rvq_decode_crossover(exec, 1024, 1024) == crossover);
}
