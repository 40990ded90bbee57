// compute/kernels/dispatch.h: which instruction set the kernels use (CPUID plus
// the SLUICE_KERNELS override) and the execution context every kernel takes.
// Never chooses an instruction set the CPU or the OS cannot run.
#pragma once

#include <string_view>
#include <vector>

namespace sluice::kernels {

class ThreadPool;

// kAvx2 means AVX2 with FMA and F16C (every AVX2 CPU has both; the trunk
// kernels widen their f16 scales with F16C). kAvx512 means AVX-512 F/BW/VL
// with VBMI (Ice Lake, Zen 4 and later): the RVQ kernel needs vpermi2b. The
// trunk kernels take the VNNI dot product there when CPUID has it, and their
// AVX2 path otherwise.
enum class Isa { kScalar, kAvx2, kAvx512 };

struct CpuFeatures {
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;  // the vector bodies widen f16 scales with it
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

// What the trunk's q8g128/q6g128/q4g128 kernels multiply the weights with
// (quant.h): the input quantized to int8 per group of 128 columns (integer dot
// products, the default: faster, and +0.035% perplexity on the demo model), or
// f32 inputs.
// f32 is what scripts/reference.py matches to 1e-4; int8 rounding turns a
// one-ulp difference into a step of amax/127, so the int8 engine is held to
// the reference's model of it by its own, looser bar (test_reference_agreement.py).
enum class TrunkActivations { kF32, kInt8 };
const char* trunk_activations_name(TrunkActivations activations);
// kInt8, unless SLUICE_TRUNK_ACTIVATIONS says "f32" (or "int8"); any other
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
