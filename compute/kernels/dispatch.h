// compute/kernels/dispatch.h: which instruction set the kernels use (CPUID plus
// the SLUICE_KERNELS override) and the execution context every kernel takes.
// Never chooses an instruction set the CPU or the OS cannot run.
#pragma once

#include <string_view>
#include <vector>

namespace sluice::kernels {

class ThreadPool;

// kAvx512 means AVX-512 F/BW/VL with VBMI (Ice Lake, Zen 4 and later): the
// RVQ kernel needs vpermi2b. The trunk kernels take the VNNI dot product
// there when CPUID has it, and their AVX2 path otherwise.
enum class Isa { kScalar, kAvx2, kAvx512 };

struct CpuFeatures {
  bool avx2 = false;
  bool fma = false;
  bool os_saves_ymm = false;  // XGETBV says the OS preserves the upper halves of ymm
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512vbmi = false, avx512vnni = false;
  bool os_saves_zmm = false;  // XGETBV: opmask, upper zmm0-15 and zmm16-31 state too
};

CpuFeatures detect_cpu_features();
const char* isa_name(Isa isa);

// Whether this machine (CPU and OS) runs `isa`.
bool isa_supported(Isa isa);
// Every instruction set this machine runs, slowest first (scalar is always there).
std::vector<Isa> supported_isas();

// The fastest instruction set this machine runs.
Isa best_isa();

// Whether kAvx512 has vpdpbusd here (asked once; CPUID can trap in a VM).
bool avx512_has_vnni();

// best_isa(), unless SLUICE_KERNELS says otherwise: "scalar", "avx2" or
// "avx512" request that set and fail with an Error naming the variable when
// this machine cannot run it; any other value is an Error.
Isa isa_from_environment();
Isa parse_isa(std::string_view name, std::string_view what);

// What the trunk's q8g128/q4g128 kernels multiply the weights with (quant.h):
// f32 inputs, or the input quantized to int8 per block of 32 (integer dot
// products, faster). f32 is the default: int8 rounding turns one-ulp
// differences into steps of amax/127, so no family holds the 1e-4 agreement
// with scripts/reference.py under it (measured: up to 0.17 max abs logit).
enum class TrunkActivations { kF32, kInt8 };
const char* trunk_activations_name(TrunkActivations activations);
// kF32, unless SLUICE_TRUNK_ACTIVATIONS says "int8" (or "f32"); any other
// value is an Error naming the variable.
TrunkActivations trunk_activations_from_environment();

// How a kernel runs: the instruction set, the pool that splits its rows
// (nullptr: everything on the calling thread), and the trunk's activations.
// Results do not depend on the pool's size.
struct Exec {
  Isa isa = Isa::kScalar;
  ThreadPool* pool = nullptr;
  TrunkActivations trunk = TrunkActivations::kF32;
};

}  // namespace sluice::kernels
