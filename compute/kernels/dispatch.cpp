// compute/kernels/dispatch.cpp: CPUID/XGETBV probing and the SLUICE_KERNELS
// override. Reads the environment only when asked; holds no global state.
#include "compute/kernels/dispatch.h"

#include <cpuid.h>

#include <cstdint>
#include <cstdlib>
#include <string>

#include "proto/error.h"

namespace sluice::kernels {

CpuFeatures detect_cpu_features() {
  CpuFeatures features;
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid_max(0, nullptr) < 7) return features;
  __cpuid_count(1, 0, eax, ebx, ecx, edx);
  const bool osxsave = (ecx & bit_OSXSAVE) != 0;
  features.fma = (ecx & bit_FMA) != 0;
  if (osxsave) {
    uint32_t xcr0_lo = 0, xcr0_hi = 0;
    __asm__("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
    features.os_saves_ymm = (xcr0_lo & 0x6u) == 0x6u;  // SSE and AVX state
  }
  __cpuid_count(7, 0, eax, ebx, ecx, edx);
  features.avx2 = (ebx & bit_AVX2) != 0;
  return features;
}

const char* isa_name(Isa isa) { return isa == Isa::kAvx2 ? "avx2" : "scalar"; }

Isa best_isa() {
  const CpuFeatures f = detect_cpu_features();
  return f.avx2 && f.fma && f.os_saves_ymm ? Isa::kAvx2 : Isa::kScalar;
}

Isa parse_isa(std::string_view name, std::string_view what) {
  if (name == "scalar") return Isa::kScalar;
  if (name == "avx2") {
    if (best_isa() != Isa::kAvx2) fail("{}=avx2: this CPU (or OS) does not support AVX2 with FMA", what);
    return Isa::kAvx2;
  }
  fail("{}={}: unknown kernel set (expected scalar or avx2)", what, name);
}

Isa isa_from_environment() {
  const char* value = std::getenv("SLUICE_KERNELS");
  if (value == nullptr || *value == '\0') return best_isa();
  return parse_isa(value, "SLUICE_KERNELS");
}

}  // namespace sluice::kernels
