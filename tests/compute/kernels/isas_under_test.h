// tests/compute/kernels/isas_under_test.h: the instruction sets one run of a
// kernel test exercises. meson runs each of these tests once per instruction
// set above scalar, naming it in SLUICE_TEST_ISA; a run covers every supported
// set up to the named one (cross-set checks need the lower ones), and
// isa_main.cpp skips the run on a CPU without it, so that missing coverage
// shows in the totals as a skip instead of passing silently.
#pragma once

#include <vector>

#include "compute/kernels/dispatch.h"

namespace sluice::testing {

// The ISAs named by SLUICE_TEST_ISA and below it; every supported one when unset.
std::vector<kernels::Isa> isas_under_test();
bool isa_under_test(kernels::Isa isa);

}  // namespace sluice::testing
