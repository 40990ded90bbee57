// compute/kernels/dispatch.cpp: CPUID/XGETBV probing and the SLUICE_KERNELS
// override. Reads the environment only when asked; the one thing it keeps is
// whether this CPU has VNNI, which cannot change while the process runs.
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
  features.f16c = (ecx & bit_F16C) != 0;
  if (osxsave) {
    uint32_t xcr0_lo = 0, xcr0_hi = 0;
    __asm__("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
    features.os_saves_ymm = (xcr0_lo & 0x6u) == 0x6u;    // SSE and AVX state
    features.os_saves_zmm = (xcr0_lo & 0xe6u) == 0xe6u;  // plus opmask, ZMM_Hi256, Hi16_ZMM
  }
  __cpuid_count(7, 0, eax, ebx, ecx, edx);
  features.avx2 = (ebx & bit_AVX2) != 0;
  features.avx512f = (ebx & bit_AVX512F) != 0;
  features.avx512bw = (ebx & bit_AVX512BW) != 0;
  features.avx512vl = (ebx & bit_AVX512VL) != 0;
  features.avx512vbmi = (ecx & bit_AVX512VBMI) != 0;
  features.avx512vnni = (ecx & bit_AVX512VNNI) != 0;
  return features;
}

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::kAvx512:
      return "avx512";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kScalar:
      break;
  }
  return "scalar";
}

bool isa_supported(Isa isa) {
  const CpuFeatures f = detect_cpu_features();
  const bool avx2 = f.avx2 && f.fma && f.f16c && f.os_saves_ymm;
  switch (isa) {
    case Isa::kScalar:
      return true;
    case Isa::kAvx2:
      return avx2;
    case Isa::kAvx512:
      return avx2 && f.os_saves_zmm && f.avx512f && f.avx512bw && f.avx512vl && f.avx512vbmi;
  }
  return false;
}

std::vector<Isa> supported_isas() {
  std::vector<Isa> out;
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512})
    if (isa_supported(isa)) out.push_back(isa);
  return out;
}

Isa best_isa() {
  return supported_isas().back();
}

bool avx512_has_vnni() {
  static const bool vnni = isa_supported(Isa::kAvx512) && detect_cpu_features().avx512vnni;
  return vnni;
}

Isa parse_isa(std::string_view name, std::string_view what) {
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
    if (name != isa_name(isa)) continue;
    if (!isa_supported(isa))
      fail("{}={}: this CPU (or OS) does not support it{}", what, name,
           isa == Isa::kAvx2 ? " (needs AVX2 with FMA)" : " (needs AVX-512 F/BW/VL/VBMI)");
    return isa;
  }
  fail("{}={}: unknown kernel set (expected scalar, avx2 or avx512)", what, name);
}

Isa isa_from_environment() {
  const char* value = std::getenv("SLUICE_KERNELS");
  if (value == nullptr || *value == '\0') return best_isa();
  return parse_isa(value, "SLUICE_KERNELS");
}

const char* trunk_activations_name(TrunkActivations activations) {
  return activations == TrunkActivations::kF32 ? "f32" : "int8";
}

TrunkActivations trunk_activations_from_environment() {
  const char* value = std::getenv("SLUICE_TRUNK_ACTIVATIONS");
  if (value == nullptr || *value == '\0') return TrunkActivations::kInt8;
  for (TrunkActivations a : {TrunkActivations::kF32, TrunkActivations::kInt8})
    if (std::string_view(value) == trunk_activations_name(a)) return a;
  fail("SLUICE_TRUNK_ACTIVATIONS={}: unknown trunk activations (expected int8 or f32)", value);
}

}  // namespace sluice::kernels
