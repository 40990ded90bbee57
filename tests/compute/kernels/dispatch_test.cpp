// The SLUICE_KERNELS override and the chosen instruction set follow the CPU.
#include "compute/kernels/dispatch.h"

#include <doctest/doctest.h>

#include <cstdlib>
#include <string>

#include "proto/error.h"

using namespace sluice::kernels;

TEST_CASE("best_isa is the fastest set the CPU and OS support") {
  const CpuFeatures f = detect_cpu_features();
  const bool avx2 = f.avx2 && f.fma && f.os_saves_ymm;
  const bool avx512 = avx2 && f.os_saves_zmm && f.avx512f && f.avx512bw && f.avx512vl &&
                      f.avx512vbmi;
  CHECK(isa_supported(Isa::kScalar));
  CHECK(isa_supported(Isa::kAvx2) == avx2);
  CHECK(isa_supported(Isa::kAvx512) == avx512);
  CHECK(best_isa() == (avx512 ? Isa::kAvx512 : avx2 ? Isa::kAvx2 : Isa::kScalar));
  CHECK(supported_isas().front() == Isa::kScalar);
  CHECK(supported_isas().size() == 1u + avx2 + avx512);
  CHECK(std::string(isa_name(Isa::kScalar)) == "scalar");
  CHECK(std::string(isa_name(Isa::kAvx2)) == "avx2");
  CHECK(std::string(isa_name(Isa::kAvx512)) == "avx512");
}

TEST_CASE("SLUICE_KERNELS forces a set the machine runs; unknown values name the variable") {
  setenv("SLUICE_KERNELS", "scalar", 1);
  CHECK(isa_from_environment() == Isa::kScalar);
  setenv("SLUICE_KERNELS", "neon", 1);
  try {
    isa_from_environment();
    FAIL("expected an error");
  } catch (const sluice::Error& e) {
    CHECK(std::string(e.what()).find("SLUICE_KERNELS=neon") != std::string::npos);
  }
  for (Isa isa : {Isa::kAvx2, Isa::kAvx512}) {
    setenv("SLUICE_KERNELS", isa_name(isa), 1);
    if (isa_supported(isa))
      CHECK(isa_from_environment() == isa);
    else
      CHECK_THROWS_WITH_AS(isa_from_environment(), doctest::Contains("SLUICE_KERNELS="),
                           sluice::Error);
  }
  unsetenv("SLUICE_KERNELS");
  CHECK(isa_from_environment() == best_isa());
}
