// tests/compute/kernels/isa_main.cpp: doctest's main for the kernel tests run
// once per instruction set (isas_under_test.h): exits 77, meson's skip, when
// this CPU lacks the set the run is for.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string_view>

#include "tests/compute/kernels/isas_under_test.h"

namespace sluice::testing {

using kernels::Isa;

namespace {

// The set SLUICE_TEST_ISA names, if it is set; an unknown name ends the run.
std::optional<Isa> named_isa() {
  const char* value = std::getenv("SLUICE_TEST_ISA");
  if (value == nullptr) return std::nullopt;
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512})
    if (std::string_view(value) == kernels::isa_name(isa)) return isa;
  std::fprintf(stderr, "SLUICE_TEST_ISA=%s: unknown kernel set (expected scalar, avx2 or avx512)\n",
               value);
  std::exit(1);
}

}  // namespace

std::vector<Isa> isas_under_test() {
  std::vector<Isa> isas = kernels::supported_isas();
  if (const std::optional<Isa> named = named_isa())
    std::erase_if(isas, [&](Isa isa) { return isa > *named; });
  return isas;
}

bool isa_under_test(Isa isa) {
  const std::vector<Isa> isas = isas_under_test();
  return std::find(isas.begin(), isas.end(), isa) != isas.end();
}

}  // namespace sluice::testing

int main(int argc, char** argv) {
  using namespace sluice;
  if (const std::optional<kernels::Isa> named = testing::named_isa();
      named && !kernels::isa_supported(*named)) {
    std::printf(
        "CAPABILITY-SKIP: %s: this CPU does not run these kernels, so this run would execute none "
        "of their bodies\n",
        kernels::isa_name(*named));
    return 77;
  }
  doctest::Context context(argc, argv);
  return context.run();
}
