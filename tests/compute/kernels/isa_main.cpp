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

constexpr Isa kAllIsas[] = {Isa::kScalar, Isa::kAvx2, Isa::kAvx512};

// The set SLUICE_TEST_ISA names: nothing when unset, kAllIsas's end when unknown.
std::optional<const Isa*> named_isa() {
  const char* value = std::getenv("SLUICE_TEST_ISA");
  if (value == nullptr) return std::nullopt;
  return std::find_if(std::begin(kAllIsas), std::end(kAllIsas),
                      [&](Isa isa) { return std::string_view(value) == kernels::isa_name(isa); });
}

}  // namespace

std::vector<Isa> isas_under_test() {
  std::vector<Isa> isas = kernels::supported_isas();
  if (const auto named = named_isa())
    std::erase_if(isas, [limit = **named](Isa isa) { return isa > limit; });
  return isas;
}

bool isa_under_test(Isa isa) {
  const std::vector<Isa> isas = isas_under_test();
  return std::find(isas.begin(), isas.end(), isa) != isas.end();
}

}  // namespace sluice::testing

int main(int argc, char** argv) {
  using namespace sluice;
  if (const auto named = testing::named_isa()) {
    if (*named == std::end(testing::kAllIsas)) {
      std::fprintf(stderr,
                   "SLUICE_TEST_ISA=%s: unknown kernel set (expected scalar, avx2 or avx512)\n",
                   std::getenv("SLUICE_TEST_ISA"));
      return 1;
    }
    if (!kernels::isa_supported(**named)) {
      std::printf(
          "skipped: this CPU does not run the %s kernels, so this run would execute none of "
          "their bodies\n",
          kernels::isa_name(**named));
      return 77;
    }
  }
  doctest::Context context(argc, argv);
  return context.run();
}
