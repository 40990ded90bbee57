// The SLUICE_KERNELS override and the chosen instruction set follow the CPU.
#include <doctest/doctest.h>

#include <cstdlib>
#include <string>

#include "compute/kernels/dispatch.h"
#include "proto/error.h"

using namespace sluice::kernels;

TEST_CASE("best_isa is AVX2 exactly when the CPU and OS support AVX2 and FMA") {
  const CpuFeatures f = detect_cpu_features();
  CHECK((best_isa() == Isa::kAvx2) == (f.avx2 && f.fma && f.os_saves_ymm));
  CHECK(std::string(isa_name(Isa::kScalar)) == "scalar");
  CHECK(std::string(isa_name(Isa::kAvx2)) == "avx2");
}

TEST_CASE("SLUICE_KERNELS=scalar forces the scalar path; unknown values name the variable") {
  setenv("SLUICE_KERNELS", "scalar", 1);
  CHECK(isa_from_environment() == Isa::kScalar);
  setenv("SLUICE_KERNELS", "neon", 1);
  try {
    isa_from_environment();
    FAIL("expected an error");
  } catch (const sluice::Error& e) {
    CHECK(std::string(e.what()).find("SLUICE_KERNELS=neon") != std::string::npos);
  }
  setenv("SLUICE_KERNELS", "avx2", 1);
  if (best_isa() == Isa::kAvx2)
    CHECK(isa_from_environment() == Isa::kAvx2);
  else
    CHECK_THROWS_AS(isa_from_environment(), sluice::Error);
  unsetenv("SLUICE_KERNELS");
  CHECK(isa_from_environment() == best_isa());
}
