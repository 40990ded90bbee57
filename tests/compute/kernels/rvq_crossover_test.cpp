// tests/compute/kernels/rvq_crossover_test.cpp: the run-time choice between
// RVQ tables and decoding once: the decision rule on given timings, the
// SLUICE_RVQ_CROSSOVER pin and its errors, the small-shape default, and that
// a real calibration returns one of the candidates (never a time).
#include "compute/kernels/rvq_crossover.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdlib>
#include <iterator>
#include <vector>

#include "proto/error.h"

using namespace sluice;
using namespace sluice::kernels;

namespace {

// Sets SLUICE_RVQ_CROSSOVER for one scope.
struct PinnedCrossover {
  explicit PinnedCrossover(const char* value) { setenv("SLUICE_RVQ_CROSSOVER", value, 1); }
  ~PinnedCrossover() { unsetenv("SLUICE_RVQ_CROSSOVER"); }
};

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
    const PinnedCrossover pin("7");
    CHECK(rvq_decode_crossover(exec, 2048, 1024) == 7);
    CHECK(rvq_decode_crossover(exec, 64, 32) == 7);
  }
  for (const char* bad : {"0", "abc", "-3", "4x", "12345678"}) {
    CAPTURE(bad);
    const PinnedCrossover pin(bad);
    CHECK_THROWS_WITH_AS(rvq_decode_crossover(exec, 64, 32),
                         doctest::Contains("SLUICE_RVQ_CROSSOVER"), Error);
  }
}

TEST_CASE("small experts take the instruction set's default; a bad shape is an error naming it") {
  for (Isa isa : supported_isas()) {
    CAPTURE(isa_name(isa));
    CHECK(rvq_decode_crossover(Exec{isa, nullptr}, 64, 32) == rvq_default_crossover(isa));
  }
  CHECK_THROWS_WITH_AS(rvq_decode_crossover(Exec{}, 60, 32), doctest::Contains("60"), Error);
  CHECK_THROWS_WITH_AS(rvq_decode_crossover(Exec{}, 64, 0), doctest::Contains("64"), Error);
}

TEST_CASE("a measured crossover is one of the candidates or one past them, and is measured once") {
  const Exec exec{best_isa(), nullptr};
  const uint32_t crossover = rvq_decode_crossover(exec, 1024, 1024);
  const bool candidate =
      std::find(std::begin(kRvqCrossoverCandidates), std::end(kRvqCrossoverCandidates),
                crossover) != std::end(kRvqCrossoverCandidates);
  CHECK((candidate || crossover == std::end(kRvqCrossoverCandidates)[-1] + 1));
  CHECK(rvq_decode_crossover(exec, 1024, 1024) == crossover);
}
